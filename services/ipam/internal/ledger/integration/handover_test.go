package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// shardRVs returns each ledger shard's resourceVersion and epoch by name.
func shardRVs(t *testing.T, client kubernetes.Interface, ns string) (rvs, epochs map[string]string) {
	t.Helper()
	list, err := client.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: ledger.LabelKey + "=true"})
	if err != nil {
		t.Fatal(err)
	}
	rvs, epochs = map[string]string{}, map[string]string{}
	for _, cm := range list.Items {
		rvs[cm.Name], epochs[cm.Name] = cm.ResourceVersion, cm.Data["epoch"]
	}
	return rvs, epochs
}

// openCounted opens the ledger in ns for term, with its metrics on a
// registry of its own, which it returns.
func openCounted(t *testing.T, client kubernetes.Interface, ns, term string, limit int) (*ledger.Ledger, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := ledger.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(context.Background(), client, ledger.Options{Namespace: ns, Term: term, ShardLimit: limit, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	return l, reg
}

// opens is how many Opens fenced the head alone ("head") or every shard
// ("every-shard"), as ipledger_ipam_ledger_opens_total counts them.
func opens(t *testing.T, reg *prometheus.Registry, fence string) float64 {
	t.Helper()
	return testenv.MetricValue(t, reg, "ipledger_ipam_ledger_opens_total", map[string]string{"fence": fence})
}

// A term that ends cleanly (every write of it answered) says so on the
// head: the next term rewrites the head alone, not every shard, and acts at
// once. The released term writes nothing more. A term that ends any other
// way leaves no such word, and the term after it fences every shard.
func TestCleanReleaseHandsOverWithTheHeadAlone(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	const limit = 4 * 1024
	entry := func(i int) ledger.Allocation {
		return alloc(netip.AddrFrom4([4]byte{10, 1, byte(i / 250), byte(i % 250)}).String(), fmt.Sprintf("ns/svc-%d", i))
	}
	first := filled(t, client, ns, "a/1/t", limit, 600, entry)
	if err := first.Release(ctx); err != nil {
		t.Fatalf("a clean release: %v", err)
	}
	if err := first.Commit(ctx, ledger.Change{Release: []ledger.Allocation{entry(599)}}); err == nil {
		t.Fatalf("a released term committed")
	}
	before, _ := shardRVs(t, client, ns)
	if len(before) < 10 {
		t.Fatalf("%d shards, want at least 10", len(before))
	}

	second, reg := openCounted(t, client, ns, "b/2/t", limit)
	if got := second.Epoch(); got != 2 {
		t.Fatalf("epoch %d after a clean release of epoch 1, want 2", got)
	}
	after, epochs := shardRVs(t, client, ns)
	for name, rv := range before {
		switch {
		case name == ledger.HeadName && (rv == after[name] || epochs[name] != "2"):
			t.Errorf("the head was not rewritten at epoch 2 (epoch %q)", epochs[name])
		case name != ledger.HeadName && rv != after[name]:
			t.Errorf("shard %s was rewritten after a clean release", name)
		}
	}
	if got := len(second.State().Allocations); got != 600 {
		t.Fatalf("the next term reads %d allocations, want 600", got)
	}
	if h, all := opens(t, reg, "head"), opens(t, reg, "every-shard"); h != 1 || all != 0 {
		t.Fatalf("opens by fence: head %v, every-shard %v; want 1 and 0", h, all)
	}
	// The next term writes any shard, the ones it did not rewrite too.
	if err := second.Commit(ctx, ledger.Change{Release: []ledger.Allocation{entry(599)}}); err != nil {
		t.Fatal(err)
	}

	// The second term ends without a word (a crash, a lost Lease): the
	// third rewrites every shard, and the second can write no more.
	before, _ = shardRVs(t, client, ns)
	third, reg := openCounted(t, client, ns, "c/3/t", limit)
	after, epochs = shardRVs(t, client, ns)
	for name, rv := range before {
		if rv == after[name] || epochs[name] != "3" {
			t.Errorf("shard %s not fenced at epoch 3 after an unclean end (epoch %q)", name, epochs[name])
		}
	}
	if h, all := opens(t, reg, "head"), opens(t, reg, "every-shard"); h != 0 || all != 1 {
		t.Fatalf("opens by fence: head %v, every-shard %v; want 0 and 1", h, all)
	}
	if err := second.Commit(ctx, ledger.Change{Release: []ledger.Allocation{entry(598)}}); !errors.Is(err, ledger.ErrFenced) {
		t.Fatalf("the unclean term after the fence: %v, want ErrFenced", err)
	}
	if got := len(third.State().Allocations); got != 599 {
		t.Fatalf("the third term reads %d allocations, want 599", got)
	}
}

// A write whose answer was lost may still land: a term that made one may
// not say it ended cleanly, and the next term fences every shard, so that
// the late write cannot land on what it read.
func TestReleaseRefusedAfterAWriteOfUnknownOutcome(t *testing.T) {
	ctx := context.Background()
	env := testenv.Get(t)
	ns := env.Namespace(t, nil)
	var lose atomic.Bool
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return testenv.RoundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/configmaps/") && lose.CompareAndSwap(true, false) {
				resp.Body.Close()
				return nil, errors.New("connection reset after the request was sent")
			}
			return resp, err
		})
	})
	lossy := kubernetes.NewForConfigOrDie(cfg)
	const limit = 4 * 1024
	entry := func(i int) ledger.Allocation {
		return alloc(netip.AddrFrom4([4]byte{10, 2, byte(i / 250), byte(i % 250)}).String(), fmt.Sprintf("ns/svc-%d", i))
	}
	first := filled(t, lossy, ns, "a/1/t", limit, 300, entry)
	lose.Store(true)
	if err := first.Commit(ctx, ledger.Change{Release: []ledger.Allocation{entry(0)}}); err == nil {
		t.Fatalf("the commit whose answer was lost succeeded")
	}
	if err := first.Release(ctx); err == nil {
		t.Fatalf("a term with a write of unknown outcome released the ledger cleanly")
	}
	before, _ := shardRVs(t, env.Client, ns)
	_, reg := openCounted(t, env.Client, ns, "b/2/t", limit)
	after, _ := shardRVs(t, env.Client, ns)
	for name, rv := range before {
		if rv == after[name] {
			t.Errorf("shard %s not fenced after a term whose write had no answer", name)
		}
	}
	if all := opens(t, reg, "every-shard"); all != 1 {
		t.Fatalf("opens that fenced every shard: %v, want 1", all)
	}
}

// A shard somebody else wrote after a clean release (a repair by the
// break-glass group) is reported, and the next term fences every shard,
// taking it back: the term after does not report it again.
func TestForeignWriteAfterReleaseFencesEveryShard(t *testing.T) {
	ctx := context.Background()
	client, ns := namespace(t)
	const limit = 4 * 1024
	first := filled(t, client, ns, "a/1/t", limit, 300, func(i int) ledger.Allocation {
		return alloc(netip.AddrFrom4([4]byte{10, 3, byte(i / 250), byte(i % 250)}).String(), fmt.Sprintf("ns/svc-%d", i))
	})
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rvs, _ := shardRVs(t, client, ns)
	var edited string
	for name := range rvs {
		if name != ledger.HeadName {
			edited = name
			break
		}
	}
	cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, edited, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Labels["repaired-by"] = "admin"
	if _, err := client.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	second, reg := openCounted(t, client, ns, "b/2/t", limit)
	if f := second.ForeignWrites(); len(f) != 1 || f[0].Shard != edited {
		t.Fatalf("foreign writes %+v, want the edit of %s", f, edited)
	}
	if all := opens(t, reg, "every-shard"); all != 1 {
		t.Fatalf("opens that fenced every shard: %v, want 1", all)
	}
	_, epochs := shardRVs(t, client, ns)
	if epochs[edited] != "2" {
		t.Fatalf("the edited shard carries epoch %q, want 2 (taken back)", epochs[edited])
	}
}
