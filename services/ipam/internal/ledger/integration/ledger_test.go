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
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/ipledger/ipledger/lab/testenv"
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

// filled opens a ledger in ns for term, its shards split above limit
// bytes, and commits n allocations, entry(i) the i-th, in one change.
func filled(t *testing.T, client kubernetes.Interface, ns, term string, limit, n int, entry func(i int) ledger.Allocation) *ledger.Ledger {
	t.Helper()
	ctx := context.Background()
	l, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: term, ShardLimit: limit})
	if err != nil {
		t.Fatal(err)
	}
	var ch ledger.Change
	for i := range n {
		ch.Allocate = append(ch.Allocate, entry(i))
	}
	if err := l.Commit(ctx, ch); err != nil {
		t.Fatal(err)
	}
	return l
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
	// Entries reads a Service's entries from the shards by address: the
	// same as a State read whole says, across splits, a release, an
	// address moved to another Service and an address shared by two.
	if err := l.Commit(ctx, ledger.Change{
		Release:  []ledger.Allocation{alloc("10.0.5.1", "ns/svc-105"), alloc("10.0.6.1", "ns/svc-106")},
		Allocate: []ledger.Allocation{alloc("10.0.6.1", "ns/moved"), alloc("10.0.7.1", "ns/moved"), alloc("10.0.7.1", "ns/sharing")},
	}); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, l)
	if err := l.Commit(ctx, ledger.Change{
		Release:  []ledger.Allocation{alloc("10.0.6.1", "ns/moved"), alloc("10.0.7.1", "ns/sharing")},
		Allocate: []ledger.Allocation{alloc("10.0.5.1", "ns/svc-105"), alloc("10.0.6.1", "ns/svc-106")},
	}); err != nil {
		t.Fatal(err)
	}
	checkEntries(t, l)
	for _, a := range l.State().Allocations {
		want = append(want, a.IP.String()+"="+a.Service.Key())
	}
	if len(want) != 401 {
		t.Fatalf("State holds %d allocations, want 401", len(want))
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

// checkEntries checks that l.Entries answers for every Service what its
// State says, and nothing for a Service it does not record.
func checkEntries(t *testing.T, l *ledger.Ledger) {
	t.Helper()
	want := ledger.IndexByService(l.State().Allocations)
	if got, count := len(l.Services()), l.ServiceCount(); got != len(want) || count != len(want) {
		t.Errorf("Services lists %d and ServiceCount says %d, State holds entries of %d", got, count, len(want))
	}
	for key, entries := range want {
		if got := l.Entries().Of(key); !reflect.DeepEqual(got, entries) || !l.Records(key) {
			t.Errorf("Entries().Of(%s) = %+v, State says %+v", key, got, entries)
		}
	}
	if got := l.Entries().Of("ns/svc-missing"); got != nil || l.Records("ns/svc-missing") {
		t.Errorf("Entries().Of an unrecorded Service = %+v", got)
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

// holds answers a ledger's question "does the term still hold its lease?".
func holds(held bool) func(context.Context) (bool, error) {
	return func(context.Context) (bool, error) { return held, nil }
}

// A term that starts late (its leader was paused between winning the Lease
// and opening the ledger) no longer holds the Lease when it opens: it writes
// nothing, whatever its term ID says.
func TestLateOlderTermDoesNotRefence(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	const older, newer = "a/1/2026-11-30T12:00:00Z", "b/2/2026-11-30T12:00:30Z"
	if _, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: newer, Holds: holds(true)}); err != nil {
		t.Fatal(err)
	}
	before, _ := client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if _, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: older, Holds: holds(false)}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("late Open of an older term: %v, want ErrFenced", err)
	}
	after, _ := client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if before.ResourceVersion != after.ResourceVersion || after.Data["term"] != newer || after.Data["epoch"] != "1" {
		t.Fatalf("the older term rewrote the ledger: epoch %q term %q", after.Data["epoch"], after.Data["term"])
	}
}

// The lease is asked about after the ledger is read, and a newer term that
// fences between that answer and our writes makes them fail: the next
// attempt reads the newer epoch, learns the lease is lost, and stops.
func TestNewerTermFencingDuringOpenWins(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	if _, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "a/1/t"}); err != nil {
		t.Fatal(err)
	}
	var newer *ledger.Ledger
	asked := 0
	late := func(ctx context.Context) (bool, error) {
		asked++
		if asked > 1 {
			return false, nil
		}
		// Still held when asked; the next term wins the lease right after
		// and fences before our writes land.
		var err error
		newer, err = ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "c/3/t", Holds: holds(true)})
		if err != nil {
			t.Errorf("the newer term cannot open: %v", err)
		}
		return true, nil
	}
	if _, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "b/2/t", Holds: late}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("Open raced by a newer term: %v, want ErrFenced", err)
	}
	if newer == nil {
		t.Fatal("the newer term never opened")
	}
	if got := newer.Epoch(); got != 2 {
		t.Fatalf("newer epoch %d, want 2", got)
	}
	if err := newer.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.1", "x/a")}}); err != nil {
		t.Fatalf("the newer term cannot write: %v", err)
	}
	head, _ := client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if head.Data["epoch"] != "2" || head.Data["term"] != "c/3/t" {
		t.Fatalf("head carries epoch %q term %q, want the newer term's", head.Data["epoch"], head.Data["term"])
	}
}

// The epoch counts terms: one more for every term that opens the ledger,
// none for the same term opening it again after a failed write.
func TestEpochCountsTerms(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	for i, term := range []string{"a/0/t", "b/1/t", "b/1/t", "a/0/t2"} {
		l, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: term, Holds: holds(true)})
		if err != nil {
			t.Fatal(err)
		}
		if want := []uint64{1, 2, 2, 3}[i]; l.Epoch() != want {
			t.Errorf("open %d (%s): epoch %d, want %d", i, term, l.Epoch(), want)
		}
	}
}

// A ledger written before epochs existed (format v1 without the key) opens:
// it reads as epoch 0, whatever its term ID, and is fenced at 1.
func TestLedgerWithoutEpochOpens(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	old := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ledger.HeadName, Namespace: ns, Labels: map[string]string{ledger.LabelKey: "true"}},
		Data: map[string]string{"format": ledger.Format, "term": "ipam-0/41/2026-11-30T12:00:00Z",
			"allocations.jsonl":  `{"ip":"10.0.0.1","pool":"blue","service":"x/a","uid":"u-a","allocatedAt":"2026-11-30T12:00:00Z"}` + "\n",
			"reservations.jsonl": "", "shards.jsonl": ""},
	}
	if _, err := client.CoreV1().ConfigMaps(ns).Create(ctx, old, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "ipam-1/0/2026-12-01T00:00:00Z", Holds: holds(true)})
	if err != nil {
		t.Fatalf("a ledger without an epoch cannot be opened: %v", err)
	}
	if got := keys(l.State()); !reflect.DeepEqual(got, []string{"10.0.0.1=x/a"}) {
		t.Fatalf("state %v", got)
	}
	head, _ := client.CoreV1().ConfigMaps(ns).Get(ctx, ledger.HeadName, metav1.GetOptions{})
	if head.Data["epoch"] != "1" || l.Epoch() != 1 {
		t.Fatalf("head epoch %q, ledger epoch %d: want 1", head.Data["epoch"], l.Epoch())
	}
}

// A backup restored while a leader runs (a higher epoch from a longer
// history, or a lower one) makes the leader's next write fail with
// ErrStaleWrite, not ErrFenced, while it still holds the lease: opening the
// ledger again fences it above the restored epoch, with the restored
// entries.
func TestRestoreUnderARunningLeader(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	_, other := namespace(t)
	for _, tc := range []struct {
		name  string
		epoch string
	}{{"higher epoch", "40"}, {"lower epoch", "0"}} {
		t.Run(tc.name, func(t *testing.T) {
			cms := client.CoreV1().ConfigMaps(ns)
			_ = cms.Delete(ctx, ledger.HeadName, metav1.DeleteOptions{})
			l, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "a/0/t", Holds: holds(true)})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.1", "x/a")}}); err != nil {
				t.Fatal(err)
			}
			// The backup: another ledger's head, with its own epoch.
			backup := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: ledger.HeadName, Namespace: other, Labels: map[string]string{ledger.LabelKey: "true"}},
				Data: map[string]string{"format": ledger.Format, "epoch": tc.epoch, "term": "z/9/t",
					"allocations.jsonl": `{"ip":"10.0.0.7","pool":"blue","service":"x/b","uid":"u-b","allocatedAt":"2026-11-30T12:00:00Z"}` + "\n"}}
			if err := cms.Delete(ctx, ledger.HeadName, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			backup.Namespace = ns
			if _, err := cms.Create(ctx, backup, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			err = l.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.2", "x/c")}})
			if !errors.Is(err, ledger.ErrStaleWrite) || errors.Is(err, ledger.ErrFenced) {
				t.Fatalf("Commit after a restore: %v, want ErrStaleWrite", err)
			}
			again, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "a/0/t", Holds: holds(true)})
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(again.State()); !reflect.DeepEqual(got, []string{"10.0.0.7=x/b"}) {
				t.Fatalf("state after the restore %v", got)
			}
			if restored, _ := strconv.ParseUint(tc.epoch, 10, 64); again.Epoch() != restored+1 {
				t.Fatalf("epoch %d, want %d", again.Epoch(), restored+1)
			}
		})
	}
}

// copyLedger returns the data of every ledger ConfigMap of ns, by name: what
// a backup holds.
func copyLedger(t *testing.T, client kubernetes.Interface, ns string) map[string]map[string]string {
	t.Helper()
	list, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: ledger.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	for _, cm := range list.Items {
		out[cm.Name] = cm.Data
	}
	return out
}

// restoreLedger creates the ConfigMaps of a backup in ns, as `kubectl apply`
// of a backup into a fresh cluster would: new objects, new resourceVersions.
func restoreLedger(t *testing.T, client kubernetes.Interface, ns string, backup map[string]map[string]string) {
	t.Helper()
	for name, data := range backup {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{ledger.LabelKey: "true"}}, Data: data}
		if _, err := client.CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// A deleted Lease starts counting its transitions from 0 again: the first
// term of the new Lease must still fence out every term before it, and
// write.
func TestFirstTermOfANewLeaseFencesOlderTerms(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	// The old Lease had seen 5 transitions; the new one has seen none.
	const before, after = "a/5/2026-11-30T12:00:00Z", "c/0/2026-11-30T12:05:00Z"
	old, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: before})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.1", "x/a")}}); err != nil {
		t.Fatal(err)
	}
	cur, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: after})
	if err != nil {
		t.Fatalf("the first term of a new Lease cannot open the ledger: %v", err)
	}
	if err := cur.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.2", "x/b")}}); err != nil {
		t.Fatalf("the first term of a new Lease cannot write: %v", err)
	}
	if err := old.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.0.3", "x/stale")}}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("the term of the deleted Lease wrote after the new one opened: %v, want ErrFenced", err)
	}
	st, err := ledger.Read(ctx, client, ns)
	if err != nil {
		t.Fatal(err)
	}
	if got := keys(st); !reflect.DeepEqual(got, []string{"10.0.0.1=x/a", "10.0.0.2=x/b"}) {
		t.Fatalf("ledger = %v", got)
	}
}

// A ledger restored from a backup into a cluster whose Lease is new opens
// and takes writes; nothing of the backup is lost.
func TestRestoredLedgerOpensUnderANewLease(t *testing.T) {
	ctx := context.Background()
	client, src := namespace(t)
	const limit = 4 * 1024 // several shards
	filled(t, client, src, "a/9/2026-11-30T12:00:00Z", limit, 120, func(i int) ledger.Allocation {
		return alloc(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}).String(), fmt.Sprintf("x/s%d", i))
	})
	backup := copyLedger(t, client, src)
	if len(backup) < 2 {
		t.Fatalf("the backup holds %d shards, want several", len(backup))
	}
	_, dst := namespace(t)
	restoreLedger(t, client, dst, backup)
	cur, err := ledger.Open(ctx, client, ledger.Options{Namespace: dst, Term: "b/0/2026-12-01T08:00:00Z", ShardLimit: limit})
	if err != nil {
		t.Fatalf("a restored ledger cannot be opened under a new Lease: %v", err)
	}
	if got := len(cur.State().Allocations); got != 120 {
		t.Fatalf("the restored ledger holds %d allocations, want 120", got)
	}
	if err := cur.Commit(ctx, ledger.Change{Release: []ledger.Allocation{alloc("10.0.0.0", "x/s0")}}); err != nil {
		t.Fatalf("a restored ledger cannot be written under a new Lease: %v", err)
	}
}

// Open rewrites the shards after the head several at once: every shard of
// a many-shard ledger ends up carrying the new term's epoch, the old term
// cannot write any of them, and Open reports how long it read, parsed and
// fenced.
func TestOpenFencesEveryShard(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	const limit = 4 * 1024
	old := filled(t, client, ns, "a/1/t", limit, 600, func(i int) ledger.Allocation {
		return alloc(netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i % 250)}).String(), fmt.Sprintf("ns/svc-%d", i))
	})
	reg := prometheus.NewRegistry()
	m, err := ledger.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	next, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "b/2/t", ShardLimit: limit, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	list, err := client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: ledger.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) < 10 {
		t.Fatalf("%d shards, want at least 10 (more than Open rewrites at once)", len(list.Items))
	}
	for _, cm := range list.Items {
		if cm.Data["epoch"] != "2" || cm.Data["term"] != "b/2/t" {
			t.Errorf("shard %s carries epoch %q term %q after the new term opened, want 2 and b/2/t", cm.Name, cm.Data["epoch"], cm.Data["term"])
		}
	}
	if got := len(next.State().Allocations); got != 600 {
		t.Fatalf("the new term reads %d allocations, want 600", got)
	}
	if err := old.Commit(ctx, ledger.Change{Release: []ledger.Allocation{alloc("10.1.2.99", "ns/svc-599")}}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("old term after the fence: %v, want ErrFenced", err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "ipledger_ipam_ledger_open_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "step" {
					steps[lp.GetValue()] = m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	if want := map[string]uint64{"read": 1, "parse": 1, "fence": 1}; !reflect.DeepEqual(steps, want) {
		t.Fatalf("ipledger_ipam_ledger_open_duration_seconds samples by step = %v, want %v", steps, want)
	}
}

// The shards after the head are fenced while the new term rebuilds
// (ledger.Begin). A write of the older term that lands on one of them
// between the new term's read and its fence makes Fenced say so (the term
// must read again, not act on what it read), the older term's commit ends
// the only way it may, and Open, reading again, carries the late write.
func TestOlderTermWritingDuringTheFenceMakesItReadAgain(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	const limit = 8 * 1024
	entry := func(i int) ledger.Allocation {
		return alloc(netip.AddrFrom4([4]byte{10, 0, byte(i), 1}).String(), fmt.Sprintf("ns/svc-%d", i))
	}
	old := filled(t, client, ns, "a/1/t", limit, 200, entry)
	// The highest entry lives in a shard after the head; releasing it
	// writes that shard alone.
	last := entry(199)
	lateWrite := func(ctx context.Context) (bool, error) {
		if err := old.Commit(ctx, ledger.Change{Release: []ledger.Allocation{last}}); err != nil {
			t.Errorf("the older term's late write: %v", err)
		}
		return true, nil
	}
	next, err := ledger.Begin(ctx, client, ledger.Options{Namespace: ns, Term: "b/2/t", ShardLimit: limit, Holds: lateWrite})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(next.State().Allocations); got != 200 {
		t.Fatalf("Begin read %d allocations, want the 200 read before the late write", got)
	}
	if err := next.Fenced(ctx); !ledger.Contended(err) {
		t.Fatalf("Fenced after a late write to a later shard: %v, want a conflict", err)
	}
	if err := next.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.9.9", "ns/new")}}); !ledger.Contended(err) {
		t.Fatalf("Commit on a ledger whose fence failed: %v, want the fence's conflict", err)
	}
	again, err := ledger.Open(ctx, client, ledger.Options{Namespace: ns, Term: "b/2/t", ShardLimit: limit, Holds: holds(true)})
	if err != nil {
		t.Fatal(err)
	}
	if got := len(again.State().Allocations); got != 199 {
		t.Fatalf("reading again gives %d allocations, want 199 (the late release carried)", got)
	}
	if err := old.Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.9.8", "ns/stale")}}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("the older term after the fence: %v, want ErrFenced", err)
	}
}

// An Opener whose first attempt an older term's late write got in on
// hands the caller a second attempt, read again, and ends with that
// attempt's Ledger: what the caller rebuilt from the first is dropped
// (docs/fencing.md, step 5).
func TestOpenerBeginsAgainAfterALateWrite(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	const limit = 8 * 1024
	entry := func(i int) ledger.Allocation {
		return alloc(netip.AddrFrom4([4]byte{10, 0, byte(i), 1}).String(), fmt.Sprintf("ns/svc-%d", i))
	}
	old := filled(t, client, ns, "a/1/t", limit, 200, entry)
	asked := 0
	lateOnce := func(ctx context.Context) (bool, error) {
		if asked++; asked == 1 {
			if err := old.Commit(ctx, ledger.Change{Release: []ledger.Allocation{entry(199)}}); err != nil {
				t.Errorf("the older term's late write: %v", err)
			}
		}
		return true, nil
	}
	o := ledger.NewOpener(client, ledger.Options{Namespace: ns, Term: "b/2/t", ShardLimit: limit, Holds: lateOnce})
	var read []int
	var attempts []*ledger.Ledger
	for o.Next(ctx) {
		attempts = append(attempts, o.Ledger())
		read = append(read, len(o.Ledger().State().Allocations))
	}
	if err := o.Err(); err != nil {
		t.Fatalf("Opener after one late write: %v", err)
	}
	if want := []int{200, 199}; !reflect.DeepEqual(read, want) {
		t.Fatalf("the attempts read %v allocations, want %v (the first before the late write, the second after)", read, want)
	}
	if o.Ledger() != attempts[len(attempts)-1] {
		t.Fatal("the Opener ended with a Ledger other than its last attempt's")
	}
	if err := o.Ledger().Commit(ctx, ledger.Change{Allocate: []ledger.Allocation{alloc("10.0.9.9", "ns/new")}}); err != nil {
		t.Fatalf("Commit on the opened ledger: %v", err)
	}
}
