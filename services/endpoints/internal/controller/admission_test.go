package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/endpoints/internal/clusternet"
	"github.com/ipledger/ipledger/services/endpoints/internal/grants"
	"github.com/ipledger/ipledger/services/endpoints/internal/readiness"
)

func TestAdmissionVerdict(t *testing.T) {
	nets := clusternet.Learn(nil, []*watcherv1.Object{{Kind: watcherv1.Kind_KIND_SERVICE_CIDR, Meta: &watcherv1.ObjectMeta{Name: "kubernetes"},
		Body: &watcherv1.Object_ServiceCidr{ServiceCidr: &watcherv1.ServiceCIDR{Cidrs: []string{"10.96.0.0/12"}}}}}, nil)
	granted := map[string]string{grants.Annotation: "192.0.2.0/24"}
	for _, tc := range []struct {
		name       string
		mode       grants.Mode
		nsAnn      map[string]string
		ips        []string
		metric     string
		status     metav1.ConditionStatus // "" for no condition
		reason     string
		sliceRefus bool // the planner's Refuse refuses the first address
	}{
		{"admitted, grants off", grants.Off, nil, []string{"198.51.100.1"}, "", "", "", false},
		{"admitted, the zero mode is off", "", nil, []string{"198.51.100.1"}, "", "", "", false},
		{"the Service range, grants off", grants.Off, nil, []string{"10.96.0.1"}, clusternet.ReasonServiceCIDR, metav1.ConditionFalse, ReasonClusterAddress, true},
		{"loopback", grants.Off, nil, []string{"127.0.0.1"}, "loopback", metav1.ConditionFalse, ReasonUnusableAddress, true},
		{"ungranted, report", grants.Report, granted, []string{"198.51.100.1"}, refusedNotGrantedReportOnly, metav1.ConditionTrue, ReasonNotGrantedReportOnly, false},
		{"ungranted, enforce", grants.Enforce, granted, []string{"198.51.100.1"}, refusedNotGranted, metav1.ConditionFalse, ReasonNotGranted, true},
		{"no grants at all, enforce", grants.Enforce, nil, []string{"192.0.2.1"}, refusedNotGranted, metav1.ConditionFalse, ReasonNotGranted, true},
		{"granted, enforce", grants.Enforce, granted, []string{"192.0.2.1"}, "", "", "", false},
		{"the cluster's own wins over grants", grants.Enforce, map[string]string{grants.Annotation: "10.0.0.0/8"}, []string{"10.96.0.1"},
			clusternet.ReasonServiceCIDR, metav1.ConditionFalse, ReasonClusterAddress, true},
	} {
		ad := admission{nets: nets, mode: tc.mode, namespace: "team-a", nsAnn: tc.nsAnn}
		v := ad.judge(&watcherv1.ExternalWorkload{WorkloadIps: tc.ips})
		if got := v.metricReason(tc.mode); got != tc.metric {
			t.Errorf("%s: metric reason %q, want %q", tc.name, got, tc.metric)
		}
		c := v.condition(tc.mode)
		switch {
		case tc.status == "" && c != nil:
			t.Errorf("%s: condition %+v, want none", tc.name, c)
		case tc.status != "" && (c == nil || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.ips[0])):
			t.Errorf("%s: condition %+v, want %s %s naming %s", tc.name, c, tc.status, tc.reason, tc.ips[0])
		}
		if got := ad.slice(netip.MustParseAddr(tc.ips[0])) != ""; got != tc.sliceRefus {
			t.Errorf("%s: slice refuses %v, want %v", tc.name, got, tc.sliceRefus)
		}
	}
}

func TestWithCondition(t *testing.T) {
	then := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := then.Add(time.Hour)
	ready := &watcherv1.Condition{Type: "Ready", Status: "True", Reason: "Probe", LastTransitionTime: then.UnixNano()}
	old := &watcherv1.Condition{Type: ConditionAddressAccepted, Status: "False", Reason: ReasonNotGranted, Message: "old", LastTransitionTime: then.UnixNano()}
	want := &metav1.Condition{Type: ConditionAddressAccepted, Status: metav1.ConditionFalse, Reason: ReasonClusterAddress, Message: "new"}

	got := readiness.WithCondition([]*watcherv1.Condition{ready, old}, ConditionAddressAccepted, want, 3, now)
	if len(got) != 2 || got[0].Type != "Ready" || got[1].Message != "new" || !got[1].LastTransitionTime.Time.Equal(then) || got[1].ObservedGeneration != 3 {
		t.Errorf("same status: %+v, want Ready kept and the condition replaced, its transition time kept", got)
	}
	if got := readiness.WithCondition([]*watcherv1.Condition{ready, old}, ConditionAddressAccepted, nil, 3, now); len(got) != 1 || got[0].Type != "Ready" {
		t.Errorf("removed: %+v", got)
	}
	flipped := *want
	flipped.Status = metav1.ConditionTrue
	if got := readiness.WithCondition([]*watcherv1.Condition{old}, ConditionAddressAccepted, &flipped, 3, now); !got[0].LastTransitionTime.Time.Equal(now.Truncate(time.Second)) {
		t.Errorf("status changed: transition time %v, want now", got[0].LastTransitionTime)
	}
	if !conditionSays([]*watcherv1.Condition{ready}, nil) || conditionSays([]*watcherv1.Condition{old}, nil) || conditionSays([]*watcherv1.Condition{old}, want) {
		t.Error("conditionSays")
	}
}

// TestRelearnTakesAJoiningNodesRangeOut: a Node that joins with a Pod range
// holding a workload takes it out at once: the workload is judged again
// (counted, its condition queued) and its Service queued.
func TestRelearnTakesAJoiningNodesRangeOut(t *testing.T) {
	h := newHarness(t)
	h.stream.upsert(svcObj("a", "web"))
	h.stream.upsert(wlObj("a", "vm", "web", "10.244.9.7"))
	tm := h.startTerm()
	tm.st.networks.Store(tm.st.learnNetworks())
	tm.queued, tm.conditions = nil, nil
	h.stream.upsert(nodeObj("n9", "10.244.9.0/24", "192.168.0.9"))
	if !slices.Contains(tm.queued, "a/web") || !slices.Contains(tm.conditions, "a/vm") {
		t.Fatalf("queued %v, conditions %v: want a/web and a/vm", tm.queued, tm.conditions)
	}
	if v := testutil.ToFloat64(h.c.Metrics.WorkloadsRefused.WithLabelValues(clusternet.ReasonPodCIDR)); v != 1 {
		t.Errorf("pod-cidr refusals %v, want 1", v)
	}
	// A status update of the Node that changes neither learns nothing.
	tm.queued, tm.conditions = nil, nil
	n := nodeObj("n9", "10.244.9.0/24", "192.168.0.9")
	n.GetNode().Unschedulable = true
	h.stream.upsert(n)
	if len(tm.queued) != 0 || len(tm.conditions) != 0 {
		t.Errorf("a Node update that changes no network queued %v and %v", tm.queued, tm.conditions)
	}
}

func nodeObj(name, podCIDR, addr string) *watcherv1.Object {
	return &watcherv1.Object{Kind: watcherv1.Kind_KIND_NODE, Meta: &watcherv1.ObjectMeta{Name: name},
		Body: &watcherv1.Object_Node{Node: &watcherv1.Node{PodCidrs: []string{podCIDR},
			Addresses: []*watcherv1.NodeAddress{{Type: "InternalIP", Address: addr}}}}}
}

// BenchmarkRelearnNetworks: a Node joins (or leaves) a cluster of 1,000
// Nodes and 50,000 ExternalWorkloads; the pass learns the networks again and
// judges the workloads in the range that came or went (none here: the cost
// is the learning and the scan).
func BenchmarkRelearnNetworks(b *testing.B) {
	h := newHarness(b)
	for i := range 1000 {
		h.stream.upsert(nodeObj(fmt.Sprintf("n%d", i), fmt.Sprintf("10.%d.%d.0/24", 128+i/256, i%256), fmt.Sprintf("172.16.%d.%d", i/256, i%256)))
	}
	for i := range 50000 {
		h.stream.upsert(wlObj(fmt.Sprintf("ns%d", i/100), fmt.Sprintf("vm%d", i), "web", fmt.Sprintf("192.%d.%d.%d", 168+i/65536, i/256%256, i%256)))
	}
	st := h.c.newTermState(h.c.log)
	st.networks.Store(st.learnNetworks())
	joining := nodeObj("joining", "10.250.0.0/24", "172.31.0.1")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			h.stream.upsert(joining)
		} else {
			h.stream.remove(watcherv1.Kind_KIND_NODE, "joining")
		}
		st.relearnNetworks()
	}
}
