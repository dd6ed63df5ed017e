package server

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

type readClient struct {
	t *testing.T
	s *Server
}

func (c readClient) explain(ns, name string) *ipamv1.ExplainServiceResponse {
	c.t.Helper()
	resp, err := c.s.ExplainService(context.Background(), &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: ns, Name: name}})
	if err != nil {
		c.t.Fatalf("ExplainService %s/%s: %v", ns, name, err)
	}
	return resp
}

func (c readClient) pools() map[string]*ipamv1.Pool {
	c.t.Helper()
	resp, err := c.s.ListPools(context.Background(), &ipamv1.ListPoolsRequest{})
	if err != nil {
		c.t.Fatalf("ListPools: %v", err)
	}
	out := map[string]*ipamv1.Pool{}
	for _, p := range resp.Pools {
		out[p.Name] = p
	}
	return out
}

func (c readClient) rebuilds() (explain, usage int) {
	return int(testutil.ToFloat64(c.s.m.rebuilds.WithLabelValues(partExplain))), int(testutil.ToFloat64(c.s.m.rebuilds.WithLabelValues(partUsage)))
}

func (c readClient) wantRebuilds(when string, explain, usage int) {
	c.t.Helper()
	if e, u := c.rebuilds(); e != explain || u != usage {
		c.t.Fatalf("%s: rebuilt the explain state %d times and the usage %d times, want %d and %d", when, e, u, explain, usage)
	}
}

func verdictOf(resp *ipamv1.ExplainServiceResponse, pool string) *ipamv1.PoolVerdict {
	for _, v := range resp.Verdicts {
		if v.Pool == pool {
			return v
		}
	}
	return nil
}

// ExplainService and ListPools rebuild the allocator once per change of the
// ledger or the IPPools, however many callers ask, and a change is seen by
// the next call. What belongs to the explained Service (its request, labels,
// its Namespace's labels) is read on every call and needs no rebuild.
func TestReadsRebuildOncePerChange(t *testing.T) {
	w := newWorld(t, allocatedWorld(100, 5)...)
	c := readClient{t: t, s: w.server()}

	// 20 callers of each at once, then 20 more of each one after another.
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() { c.explain("ns-0", "pending-0000") })
		wg.Go(func() { c.pools() })
	}
	wg.Wait()
	for range 20 {
		if got := c.explain("ns-1", "pending-0001").Reason; got != string(allocator.ReasonAllocated) {
			t.Fatalf("pending Service: reason %s, want Allocated", got)
		}
		if got := c.pools()["big"].GetIpv4().GetUsed(); got != "100" {
			t.Fatalf("pool big: used %s, want 100", got)
		}
	}
	c.wantRebuilds("80 calls, no change", 1, 1)

	// A new pool is in the next answer of each.
	extra := poolObj("extra", "172.16.0.0/24")
	extra.GetIpPool().Allocation = &watcherv1.IPPoolAllocation{NamespaceSelectors: []*watcherv1.LabelSelector{{MatchLabels: map[string]string{"tier": "gold"}}}}
	w.put(t, extra)
	if p := c.pools()["extra"]; p.GetIpv4().GetTotal() != "256" {
		t.Fatalf("after adding pool extra, ListPools says %v", p)
	}
	v := verdictOf(c.explain("ns-1", "pending-0001"), "extra")
	if v.GetReason() != string(allocator.VerdictNamespaceMismatch) {
		t.Fatalf("after adding pool extra (tier=gold namespaces only), its verdict is %v, want NamespaceMismatch", v)
	}
	c.wantRebuilds("after a pool change", 2, 2)

	// A ledger change: the pending Service now holds an IP.
	allocs := make([]ledger.Allocation, 0, 101)
	for _, o := range allocatedWorld(100, 0) {
		if o.GetKind() == watcherv1.Kind_KIND_LEDGER_CONFIG_MAP {
			st, _, err := ledger.Parse(map[string]map[string]string{ledger.HeadName: o.GetConfigMap().GetData()})
			if err != nil {
				t.Fatal(err)
			}
			allocs = append(allocs, st.Allocations...)
		}
	}
	held := allocatedWorldFree
	allocs = append(allocs, ledger.Allocation{IP: held, Pool: "big", Service: ledger.ServiceRef{Namespace: "ns-0", Name: "pending-0000", UID: "uid-ns-0-pending-0000"}})
	w.put(t, ledgerObj(allocs))
	if got := c.explain("ns-0", "pending-0000").Ips; !slices.Equal(got, []string{held.String()}) {
		t.Fatalf("after the ledger gave it %s, the Service holds %v", held, got)
	}
	if got := c.pools()["big"].GetIpv4().GetUsed(); got != "101" {
		t.Fatalf("after a ledger change, pool big: used %s, want 101", got)
	}
	c.wantRebuilds("after a ledger change", 3, 3)

	// The Service's own request and its Namespace's labels come from the
	// stream on every call: no rebuild.
	svc := serviceObj("ns-1", "pending-0001", 200)
	svc.Meta.Annotations = map[string]string{allocator.AnnotationLoadBalancerIPs: "10.0.99.99"}
	w.put(t, svc)
	if got := c.explain("ns-1", "pending-0001").Decision; !strings.Contains(got, "10.0.99.99") {
		t.Fatalf("after the Service requested 10.0.99.99, the decision is %q", got)
	}
	w.put(t, namespaceObj("ns-1", map[string]string{"tier": "gold"}))
	svc = serviceObj("ns-1", "pending-0001", 200)
	svc.Meta.Annotations = map[string]string{allocator.AnnotationAddressPool: "extra"}
	w.put(t, svc)
	resp := c.explain("ns-1", "pending-0001")
	if v := verdictOf(resp, "extra"); !v.GetEligible() || !strings.Contains(resp.Decision, "172.16.0.0") {
		t.Fatalf("after labelling ns-1 tier=gold and asking for pool extra: verdict %v, decision %q", v, resp.Decision)
	}
	c.wantRebuilds("after changes of the Service and its Namespace only", 3, 3)
}

// A ledger that does not parse is parsed once per change of its shards, not
// once per call, and the next version that parses is read.
func TestCorruptLedgerParsedOncePerChange(t *testing.T) {
	bad := ledgerObj(nil)
	bad.GetConfigMap().Data["allocations.jsonl"] = "{not json\n"
	w := newWorld(t, poolObj("big", "10.0.0.0/16"), bad)
	s := w.server()
	ctx := context.Background()
	for range 10 {
		_, err := s.ListAllocations(ctx, &ipamv1.ListAllocationsRequest{})
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("ListAllocations on a corrupt ledger: %v, want Unavailable", err)
		}
	}
	if got := testutil.ToFloat64(s.m.parses.WithLabelValues("failed")); got != 1 {
		t.Fatalf("10 calls on one corrupt ledger parsed it %v times, want 1", got)
	}
	w.put(t, ledgerObj([]ledger.Allocation{{IP: allocatedWorldFree, Pool: "big", Service: ledger.ServiceRef{Namespace: "a", Name: "b"}}}))
	resp, err := s.ListAllocations(ctx, &ipamv1.ListAllocationsRequest{})
	if err != nil || len(resp.Allocations) != 1 {
		t.Fatalf("after the ledger was fixed: %v, %v", resp, err)
	}
}
