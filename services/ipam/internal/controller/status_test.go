package controller

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
	"github.com/ipledger/ipledger/services/ipam/internal/plan"
)

func TestStatusPatch(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	other := conditionJSON("example.com/Ready", "True", "Checked", "set by another controller", 3, t0)
	allocated := &plan.Condition{Status: "True", Reason: "Allocated", Message: "Allocated 10.0.0.1 from pool p", ObservedGeneration: 1, LastTransition: t0}
	exhausted := &plan.Condition{Status: "False", Reason: "PoolExhausted", Message: "pool p is full", ObservedGeneration: 1, LastTransition: t0}
	ours := func(c *plan.Condition) condition {
		return conditionJSON(objects.ConditionType, c.Status, c.Reason, c.Message, c.ObservedGeneration, c.LastTransition)
	}
	ingress := []any{map[string]any{"ip": "10.0.0.1", "ipMode": "VIP"}}
	for _, tc := range []struct {
		name      string
		cur, want svcStatus
		patch     map[string]any // nil: nothing to write
	}{
		{
			name: "nothing differs",
			cur:  svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}, base: version{rv: "7"}},
			want: svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}},
		},
		{
			name: "allocation, conditional on the version decided on",
			cur:  svcStatus{base: version{rv: "7"}},
			want: svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "7", "annotations": map[string]any{"ipledger.io/allocated-from-pool": "p"}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}, "conditions": []any{ours(allocated)}},
			},
		},
		{
			name: "another controller's condition is carried, ours appended",
			cur:  svcStatus{base: version{rv: "8", conditions: []condition{other}}},
			want: svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "8", "annotations": map[string]any{"ipledger.io/allocated-from-pool": "p"}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}, "conditions": []any{other, ours(allocated)}},
			},
		},
		{
			name: "ours replaced in its place",
			cur:  svcStatus{Status: plan.Status{Cond: exhausted}, base: version{rv: "9", conditions: []condition{ours(exhausted), other}}},
			want: svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "9", "annotations": map[string]any{"ipledger.io/allocated-from-pool": "p"}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}, "conditions": []any{ours(allocated), other}},
			},
		},
		{
			name: "release keeps the other condition",
			cur:  svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}, base: version{rv: "10", conditions: []condition{other, ours(allocated)}}},
			want: svcStatus{},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "10", "annotations": map[string]any{"ipledger.io/allocated-from-pool": nil}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": nil}, "conditions": []any{other}},
			},
		},
		{
			name: "release of the only condition clears the list",
			cur:  svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}, base: version{rv: "11", conditions: []condition{ours(allocated)}}},
			want: svcStatus{},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "11", "annotations": map[string]any{"ipledger.io/allocated-from-pool": nil}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": nil}, "conditions": nil},
			},
		},
		{
			name: "only the annotation: the conditions are not touched",
			cur:  svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated}, base: version{rv: "12", conditions: []condition{ours(allocated), other}}},
			want: svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "12", "annotations": map[string]any{"ipledger.io/allocated-from-pool": "p"}},
			},
		},
		{
			name: "only the ingress: the conditions are not touched",
			cur:  svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.2"}, Cond: allocated, Pool: "p"}, base: version{rv: "13", conditions: []condition{ours(allocated), other}}},
			want: svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "13"},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}},
			},
		},
		{
			name: "kube-vip's annotation with the status that grants its address",
			cur:  svcStatus{base: version{rv: "14"}},
			want: svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p", KubeVIP: "10.0.0.1"}},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "14", "annotations": map[string]any{
					"ipledger.io/allocated-from-pool": "p", "kube-vip.io/loadbalancerIPs": "10.0.0.1"}},
				"status": map[string]any{"loadBalancer": map[string]any{"ingress": ingress}, "conditions": []any{ours(allocated)}},
			},
		},
		{
			name: "kube-vip's annotation alone, written where ipam wrote none",
			cur:  svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p"}, base: version{rv: "15"}},
			want: svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p", KubeVIP: "10.0.0.1"}},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "15", "annotations": map[string]any{"kube-vip.io/loadbalancerIPs": "10.0.0.1"}},
			},
		},
		{
			name: "kube-vip's annotation removed with the address",
			cur:  svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}, Cond: allocated, Pool: "p", KubeVIP: "10.0.0.1"}, base: version{rv: "16"}},
			want: svcStatus{Status: plan.Status{Cond: allocated}},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "16", "annotations": map[string]any{
					"ipledger.io/allocated-from-pool": nil, "kube-vip.io/loadbalancerIPs": nil}},
				"status": map[string]any{"loadBalancer": map[string]any{"ingress": nil}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, after := statusPatch(tc.cur, tc.want)
			// The conditions after the write are the ones the patch
			// carries, or cur's when it carries none: no need to read them
			// back from the API server.
			wantAfter := any(tc.cur.base.conditions)
			if st, ok := tc.patch["status"].(map[string]any); ok {
				if c, ok := st["conditions"]; ok {
					wantAfter = c
				}
			}
			if a, w := mustJSON(t, after), mustJSON(t, wantAfter); a != w {
				t.Fatalf("conditions after the write = %s, want %s", a, w)
			}
			if tc.patch == nil {
				if body != nil {
					t.Fatalf("statusPatch = %s, want nothing to write", body)
				}
				return
			}
			var got, want any
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			wantBody, _ := json.Marshal(tc.patch)
			_ = json.Unmarshal(wantBody, &want)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("statusPatch =\n%s\nwant\n%s", body, wantBody)
			}
		})
	}
}

// The version a write is based on is the newest this term knows: its own
// write's, until the stream shows that one or a newer one.
func TestCurrentUsesTheNewestVersion(t *testing.T) {
	at := func(rv string) *watcherv1.Object {
		return &watcherv1.Object{Kind: watcherv1.Kind_KIND_SERVICE, Meta: &watcherv1.ObjectMeta{Namespace: "ns", Name: "web", ResourceVersion: rv},
			Body: &watcherv1.Object_Service{Service: &watcherv1.Service{Type: "LoadBalancer"}}}
	}
	w := &worker{ownWrites: ownWrites{expect: newExpectations()}}
	mine := svcStatus{Status: plan.Status{Ingress: []string{"10.0.0.1"}}, base: version{rv: "105", conditions: []condition{{Type: "x"}}}}
	w.expect.Wrote("ns/web", expectation{rv: "105", status: mine})
	if got := w.current(at("100")); got.base.rv != "105" || len(got.base.conditions) != 1 {
		t.Fatalf("with the stream behind our write: base %+v, want our write's version 105", got.base)
	}
	if got := w.current(at("110")); got.base.rv != "110" {
		t.Fatalf("with the stream past our write: base %+v, want the streamed version 110", got.base)
	}
	if _, ok := w.expect.Get("ns/web"); ok {
		t.Fatal("the expectation outlived the stream catching up")
	}
}

func TestCaughtUp(t *testing.T) {
	for _, tc := range []struct {
		streamed, written string
		want              bool
	}{{"10", "10", true}, {"11", "10", true}, {"9", "10", false}, {"abc", "10", false}, {"abc", "abc", true}} {
		if got := caughtUp(tc.streamed, tc.written); got != tc.want {
			t.Errorf("caughtUp(%q, %q) = %v", tc.streamed, tc.written, got)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	if m, ok := v.([]condition); ok && len(m) == 0 {
		v = nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
