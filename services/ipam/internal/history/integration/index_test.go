package integration

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/history"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// churn writes, through a term's Writer into namespace ns, held Services
// on addresses from 10.0.0.0 up and then passes of deletes and creates on
// fresh addresses, until about entries entries are stored; it returns the
// addresses used.
func churn(t testing.TB, ctx context.Context, env *testenv.Env, ns string, held, entries int) []netip.Addr {
	w := history.Start(ctx, env.Client, history.Options{Namespace: ns, Term: "index", Log: slog.New(slog.DiscardHandler)})
	var st ledger.State
	var ips []netip.Addr
	ip := netip.MustParseAddr("10.0.0.0")
	svc := func(i int) ledger.ServiceRef {
		return ledger.ServiceRef{Namespace: fmt.Sprintf("tenant-%03d", i%300), Name: fmt.Sprintf("svc-%06d", i), UID: fmt.Sprintf("7f0c3b2a-5d1e-4c8b-9a6f-%012d", i)}
	}
	for i := range held {
		st.Allocations = append(st.Allocations, ledger.Allocation{IP: ip, Pool: "public", Service: svc(i), AllocatedAt: time.Now()})
		ips = append(ips, ip)
		ip = ip.Next()
	}
	w.Opened(st, 1, false)
	const perPass = 100
	next := held
	for done := held; done < entries; done += 2 * perPass {
		var ch ledger.Change
		for range perPass {
			ch.Release = append(ch.Release, st.Allocations[next-held])
			// A pool per 2,000 Services created: the segments of one time
			// name one or two pools.
			a := ledger.Allocation{IP: ip, Pool: fmt.Sprintf("public-%d", next/2000), Service: svc(next), AllocatedAt: time.Now()}
			ch.Allocate = append(ch.Allocate, a)
			st.Allocations = append(st.Allocations, a)
			ips = append(ips, ip)
			ip = ip.Next()
			next++
		}
		w.Committed(ch, time.Now(), history.IPAM)
	}
	if err := w.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	return ips
}

// ReadAddress, which reads only the history ConfigMaps whose address
// index names the address, finds exactly the entries of that address a
// read of everything finds, in the same order: for an address of the
// oldest segment, of the middle, of the head, and for one never held.
func TestReadAddressFindsWhatReadFinds(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	ips := churn(t, ctx, env, ns, 2000, 12000)
	all, err := history.Read(ctx, env.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	// Every history ConfigMap carries the index, and the oldest address
	// (granted, then released at once) is named by one or two of them.
	list, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: history.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	naming := 0
	for _, cm := range list.Items {
		idx, ok := cm.Annotations[history.AddressesAnnotation]
		if !ok {
			t.Fatalf("history ConfigMap %s has no %s", cm.Name, history.AddressesAnnotation)
		}
		if slices.Contains(strings.Fields(idx), ips[0].String()) {
			naming++
		}
	}
	if len(list.Items) < 4 || naming < 1 || naming > 2 {
		t.Fatalf("%d history ConfigMaps, %d naming %s in their index; want ≥ 4, and 1 or 2", len(list.Items), naming, ips[0])
	}
	for _, ip := range []netip.Addr{ips[0], ips[len(ips)/2], ips[len(ips)-1], netip.MustParseAddr("192.0.2.1")} {
		var want []history.Entry
		for _, e := range all {
			if e.IP == ip {
				want = append(want, e)
			}
		}
		got, err := history.ReadAddress(ctx, env.Client, ns, ip)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, want, func(a, b history.Entry) bool {
			return a.At.Equal(b.At) && a.IP == b.IP && a.Action == b.Action && a.UID == b.UID
		}) {
			t.Errorf("ReadAddress(%s) = %d entries %v, want the %d of Read: %v", ip, len(got), got, len(want), want)
		}
	}
}

// BenchmarkLookupOneAddress: the history of one address out of ≈ 100,000
// stored entries (10,000 held, then churn on fresh addresses), read as
// AddressHistory did (every-segment: LIST every history ConfigMap, decode
// every entry, keep the address's) and through the address index (index:
// a metadata-only LIST, the head, and the segments naming the address).
func BenchmarkLookupOneAddress(b *testing.B) {
	env := testenv.Get(b)
	ctx := context.Background()
	ns := env.Namespace(b, nil)
	ips := churn(b, ctx, env, ns, 10000, 100000)
	ip := ips[len(ips)/3]
	b.Run("every-segment", func(b *testing.B) {
		for b.Loop() {
			all, err := history.Read(ctx, env.Client, ns)
			if err != nil {
				b.Fatal(err)
			}
			page, _, _ := history.Query(all, history.Filter{IP: ip}, history.Cursor{}, 100)
			if len(page) == 0 {
				b.Fatal("no entries")
			}
		}
	})
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			mine, err := history.ReadAddress(ctx, env.Client, ns, ip)
			if err != nil {
				b.Fatal(err)
			}
			page, _, _ := history.Query(mine, history.Filter{IP: ip}, history.Cursor{}, 100)
			if len(page) == 0 {
				b.Fatal("no entries")
			}
		}
	})
}

// ReadIndexed, which reads only the history ConfigMaps whose Service and
// pool indexes name what is asked, finds exactly the entries a read of
// everything finds, in the same order — and uses the index: once a sealed
// segment naming neither the Service nor the pool is made unreadable
// (its entries not JSON, its indexes kept), Read fails and ReadIndexed
// still answers. A pool every segment names spares nothing: ReadIndexed
// says so (ok false) and reads nothing.
func TestReadIndexedFindsWhatReadFinds(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	ns := env.Namespace(t, nil)
	churn(t, ctx, env, ns, 2000, 20000)
	all, err := history.Read(ctx, env.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	oldest, newest := all[0], all[len(all)-1]
	filters := []history.Filter{
		{Namespace: oldest.Namespace, Name: oldest.Name},
		{Namespace: newest.Namespace, Name: newest.Name},
		{Pool: oldest.Pool},
		{Pool: newest.Pool},
		{Namespace: "nobody", Name: "here"},
		{Pool: "no-such-pool"},
	}
	want := make([][]history.Entry, len(filters))
	for i, f := range filters {
		for _, e := range all {
			if (f.Name == "" || e.Namespace == f.Namespace && e.Name == f.Name) && (f.Pool == "" || e.Pool == f.Pool) {
				want[i] = append(want[i], e)
			}
		}
	}
	// A sealed segment naming none of them, made unreadable.
	list, err := env.Client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: history.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	broken := ""
	for i := range list.Items {
		cm := &list.Items[i]
		if cm.Name == history.HeadName || cm.Annotations[history.ServicesAnnotation] == "" || cm.Annotations[history.PoolsAnnotation] == "" {
			continue
		}
		if slices.ContainsFunc(filters, func(f history.Filter) bool { return history.MayHold(cm.Annotations, f) }) {
			continue
		}
		cm.Data["entries.jsonl"] = "not JSON\n"
		if _, err := env.Client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		broken = cm.Name
		break
	}
	if broken == "" {
		t.Fatalf("no sealed segment of %d names none of the Services and pools asked: the test proves nothing", len(list.Items))
	}
	if _, err := history.Read(ctx, env.Client, ns); err == nil {
		t.Fatalf("Read with %s unreadable succeeded: the test proves nothing", broken)
	}
	for i, f := range filters {
		got, ok, err := history.ReadIndexed(ctx, env.Client, ns, f)
		if err != nil {
			t.Fatalf("ReadIndexed(%+v) with %s unreadable, which names neither: %v (the index is not used)", f, broken, err)
		}
		if !ok {
			t.Fatalf("ReadIndexed(%+v): the index spares no segment, want it to spare %s at least", f, broken)
		}
		if !slices.EqualFunc(got, want[i], func(a, b history.Entry) bool {
			return a.At.Equal(b.At) && a.IP == b.IP && a.Action == b.Action && a.UID == b.UID
		}) {
			t.Errorf("ReadIndexed(%+v) = %d entries, want the %d of Read", f, len(got), len(want[i]))
		}
	}
	if _, ok, err := history.ReadIndexed(ctx, env.Client, ns, history.Filter{Since: time.Now()}); ok || err != nil {
		t.Errorf("ReadIndexed with no indexed field: ok %v, err %v; want false, nil (read everything)", ok, err)
	}
}

// BenchmarkLookupOneService: the history of one Service out of ≈ 100,000
// stored entries (as BenchmarkLookupOneAddress), read as AddressHistory did
// (every-segment: Read, then Query) and through the Service index
// (ReadIndexed, then Query).
func BenchmarkLookupOneService(b *testing.B) {
	env := testenv.Get(b)
	ctx := context.Background()
	ns := env.Namespace(b, nil)
	churn(b, ctx, env, ns, 10000, 100000)
	all, err := history.Read(ctx, env.Client, ns)
	if err != nil {
		b.Fatal(err)
	}
	e := all[len(all)/3]
	f := history.Filter{Namespace: e.Namespace, Name: e.Name}
	all = nil
	b.Run("every-segment", func(b *testing.B) {
		for b.Loop() {
			all, err := history.Read(ctx, env.Client, ns)
			if err != nil {
				b.Fatal(err)
			}
			if page, _, _ := history.Query(all, f, history.Cursor{}, 100); len(page) == 0 {
				b.Fatal("no entries")
			}
		}
	})
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			mine, ok, err := history.ReadIndexed(ctx, env.Client, ns, f)
			if err != nil || !ok {
				b.Fatal(ok, err)
			}
			if page, _, _ := history.Query(mine, f, history.Cursor{}, 100); len(page) == 0 {
				b.Fatal("no entries")
			}
		}
	})
}
