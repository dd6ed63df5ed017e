// Package integration tests the ledger against a real API server. It is a
// separate package so that the pure format tests and the fuzz target of
// package ledger run without starting a control plane.
package integration

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/pkg/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// namespace gives each test its own ledger namespace.
func namespace(t *testing.T) (kubernetes.Interface, string) {
	env := testenv.Get(t)
	return env.Client, env.Namespace(t, nil)
}

func alloc(ip, svc string) ledger.Allocation {
	ns, name, _ := strings.Cut(svc, "/")
	return ledger.Allocation{IP: netip.MustParseAddr(ip), Pool: "blue", Service: ledger.ServiceRef{Namespace: ns, Name: name, UID: "u-" + name},
		AllocatedAt: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
}

func keys(st ledger.State) []string {
	var out []string
	for _, a := range st.Allocations {
		out = append(out, a.IP.String()+"="+a.Service.Key())
	}
	return out
}

func TestCommitAndReadBack(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	l, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "a/1/t"})
	if err != nil {
		t.Fatal(err)
	}
	// One Commit carries many allocations in one write.
	if err := l.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.2", "x/b"), alloc("10.0.0.1", "x/a")},
		Reserve: []ledger.Reservation{{IP: netip.MustParseAddr("10.0.0.9"), Note: "lab", CreatedAt: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	st, err := ledger.Read(ctx, client, ns)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keys(st), []string{"10.0.0.1=x/a", "10.0.0.2=x/b"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("read back %v, want %v", got, want)
	}
	if len(st.Reservations) != 1 {
		t.Fatalf("reservations = %+v", st.Reservations)
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels[ledger.LabelKey] != "true" || cm.Data["format"] != ledger.Format || cm.Data["term"] != "a/1/t" {
		t.Fatalf("head ConfigMap = %v %v", cm.Labels, cm.Data)
	}
	if err := l.Commit(ctx, ledger.Change{Release: []ledger.Allocation{alloc("10.0.0.1", "x/a")}, Unreserve: []netip.Addr{netip.MustParseAddr("10.0.0.9")}}); err != nil {
		t.Fatal(err)
	}
	st, _ = ledger.Read(ctx, client, ns)
	if got := keys(st); !reflect.DeepEqual(got, []string{"10.0.0.2=x/b"}) || len(st.Reservations) != 0 {
		t.Fatalf("after release: %v %+v", got, st.Reservations)
	}
}

// A leader that was paused while another took over must not be able to write:
// the new term's fence changed every shard's resourceVersion.
func TestStaleTermCannotWrite(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	old, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "a/1/t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.1", "x/a")}}); err != nil {
		t.Fatal(err)
	}
	cur, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "b/2/t"})
	if err != nil {
		t.Fatal(err)
	}
	err = old.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.2", "x/stale")}})
	if !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("stale Commit error = %v, want ErrFenced", err)
	}
	if err := cur.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.3", "x/c")}}); err != nil {
		t.Fatal(err)
	}
	st, _ := ledger.Read(ctx, client, ns)
	if got := keys(st); !reflect.DeepEqual(got, []string{"10.0.0.1=x/a", "10.0.0.3=x/c"}) {
		t.Fatalf("ledger = %v", got)
	}
}

// A ledger that cannot be parsed is reported and never rewritten.
func TestCorruptLedgerIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	bad := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ledger.HeadName, Namespace: ns, Labels: map[string]string{ledger.LabelKey: "true"}},
		Data:       map[string]string{"format": ledger.Format, "allocations.jsonl": `{"ip":"10.0.0.1","pool":"blue","service":"x/a"` + "\n"},
	}
	created, err := client.CoreV1().ConfigMaps(ns).Create(ctx, bad, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "a/1/t"})
	var ce *ledger.CorruptError
	if !errors.As(err, &ce) || ce.Shard != ledger.HeadName || !strings.Contains(err.Error(), "allocations.jsonl line 1") {
		t.Fatalf("Open() error = %v, want a CorruptError naming %s line 1", err, ledger.HeadName)
	}
	got, err := client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != created.ResourceVersion || !reflect.DeepEqual(got.Data, bad.Data) {
		t.Fatalf("the corrupt shard was rewritten: %v", got.Data)
	}
}

// A ledger bigger than one shard is split; the shards stay under the limit,
// and a new term reads every entry back.
func TestShardsSplitAndReassemble(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	const limit = 8 * 1024
	l, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "a/1/t", ShardLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for batch := 0; batch < 4; batch++ {
		var ch ledger.Change
		for i := 0; i < 100; i++ {
			n := batch*100 + i
			// Interleave batches so later batches land in earlier shards.
			ip := netip.AddrFrom4([4]byte{10, 0, byte(i), byte(batch)})
			ch.Allocate = append(ch.Allocate, alloc(ip.String(), fmt.Sprintf("ns/svc-%d", n)))
		}
		if err := l.Commit(ctx, ch); err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
	}
	for _, a := range l.State().Allocations {
		want = append(want, a.IP.String()+"="+a.Service.Key())
	}
	if len(want) != 400 {
		t.Fatalf("State holds %d allocations, want 400", len(want))
	}
	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: ledger.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < 4 {
		t.Fatalf("%d shards, want the ledger split into several", len(list.Items))
	}
	for _, cm := range list.Items {
		if n := ledger.Size(cm.Data); n > limit {
			t.Errorf("shard %s is %d bytes, over the %d limit", cm.Name, n, limit)
		}
	}
	next, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "b/2/t", ShardLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(next.State()); !reflect.DeepEqual(got, want) {
		t.Fatalf("new term reads %d entries, want %d", len(got), len(want))
	}
	if err := l.Commit(ctx, ledger.Change{Release: []ledger.Allocation{alloc("10.0.0.0", "ns/svc-0")}}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("old term after split: %v, want ErrFenced", err)
	}
}

// Two writers racing to create the first shard: one wins, the other is fenced
// or reads the winner's shard; never two heads.
func TestConcurrentOpen(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	errs := make(chan error, 2)
	for _, term := range []string{"a/1/t", "b/2/t"} {
		go func() {
			_, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: term})
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("Open: %v", err)
		}
	}
	if _, err := ledger.Read(ctx, client, ns); err != nil {
		t.Fatal(err)
	}
}

// A term that starts late (its leader was paused between winning the Lease
// and opening the ledger) finds a newer term's fence and writes nothing.
func TestLateOlderTermDoesNotRefence(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	const older, newer = "a/1/2026-11-30T12:00:00Z", "b/2/2026-11-30T12:00:30Z"
	if _, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: newer}); err != nil {
		t.Fatal(err)
	}
	before, _ := client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if _, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: older}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("late Open of an older term: %v, want ErrFenced", err)
	}
	after, _ := client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if before.ResourceVersion != after.ResourceVersion || after.Data["term"] != newer {
		t.Fatalf("the older term rewrote the ledger: term %q", after.Data["term"])
	}
}
