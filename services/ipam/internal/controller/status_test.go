package controller

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

func TestStatusPatch(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	other := conditionJSON("example.com/Ready", "True", "Checked", "set by another controller", 3, t0)
	allocated := &condition{status: "True", reason: "Allocated", message: "Allocated 10.0.0.1 from pool p", observedGeneration: 1, lastTransition: t0}
	exhausted := &condition{status: "False", reason: "PoolExhausted", message: "pool p is full", observedGeneration: 1, lastTransition: t0}
	ours := func(c *condition) map[string]any {
		return conditionJSON(objects.ConditionType, c.status, c.reason, c.message, c.observedGeneration, c.lastTransition)
	}
	ingress := []any{map[string]any{"ip": "10.0.0.1", "ipMode": "VIP"}}
	for _, tc := range []struct {
		name      string
		cur, want svcStatus
		patch     map[string]any // nil: nothing to write
	}{
		{
			name: "nothing differs",
			cur:  svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p", base: version{rv: "7"}},
			want: svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p"},
		},
		{
			name: "allocation, conditional on the version decided on",
			cur:  svcStatus{base: version{rv: "7"}},
			want: svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p"},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "7", "annotations": map[string]any{"ipledger.io/allocated-from-pool": "p"}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}, "conditions": []any{ours(allocated)}},
			},
		},
		{
			name: "another controller's condition is carried, ours appended",
			cur:  svcStatus{base: version{rv: "8", conditions: []map[string]any{other}}},
			want: svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p"},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "8", "annotations": map[string]any{"ipledger.io/allocated-from-pool": "p"}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}, "conditions": []any{other, ours(allocated)}},
			},
		},
		{
			name: "ours replaced in its place",
			cur:  svcStatus{cond: exhausted, base: version{rv: "9", conditions: []map[string]any{ours(exhausted), other}}},
			want: svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p"},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "9", "annotations": map[string]any{"ipledger.io/allocated-from-pool": "p"}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}, "conditions": []any{ours(allocated), other}},
			},
		},
		{
			name: "release keeps the other condition",
			cur:  svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p", base: version{rv: "10", conditions: []map[string]any{other, ours(allocated)}}},
			want: svcStatus{},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "10", "annotations": map[string]any{"ipledger.io/allocated-from-pool": nil}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": nil}, "conditions": []any{other}},
			},
		},
		{
			name: "release of the only condition clears the list",
			cur:  svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p", base: version{rv: "11", conditions: []map[string]any{ours(allocated)}}},
			want: svcStatus{},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "11", "annotations": map[string]any{"ipledger.io/allocated-from-pool": nil}},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": nil}, "conditions": nil},
			},
		},
		{
			name: "only the annotation: the conditions are not touched",
			cur:  svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, base: version{rv: "12", conditions: []map[string]any{ours(allocated), other}}},
			want: svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p"},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "12", "annotations": map[string]any{"ipledger.io/allocated-from-pool": "p"}},
			},
		},
		{
			name: "only the ingress: the conditions are not touched",
			cur:  svcStatus{ingress: []string{"10.0.0.2"}, cond: allocated, pool: "p", base: version{rv: "13", conditions: []map[string]any{ours(allocated), other}}},
			want: svcStatus{ingress: []string{"10.0.0.1"}, cond: allocated, pool: "p"},
			patch: map[string]any{
				"metadata": map[string]any{"resourceVersion": "13"},
				"status":   map[string]any{"loadBalancer": map[string]any{"ingress": ingress}},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := statusPatch(tc.cur, tc.want)
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
	at := func(rv string) svcOpt { return func(o *watcherv1.Object) { o.Meta.ResourceVersion = rv } }
	w := &worker{expect: map[string]expectation{}}
	mine := svcStatus{ingress: []string{"10.0.0.1"}, base: version{rv: "105", conditions: []map[string]any{{"type": "x"}}}}
	w.expect["ns/web"] = expectation{rv: "105", status: mine, at: time.Now()}
	if got := w.current(svc("web", 1, at("100"))); got.base.rv != "105" || len(got.base.conditions) != 1 {
		t.Fatalf("with the stream behind our write: base %+v, want our write's version 105", got.base)
	}
	if got := w.current(svc("web", 1, at("110"))); got.base.rv != "110" {
		t.Fatalf("with the stream past our write: base %+v, want the streamed version 110", got.base)
	}
	if _, ok := w.expect["ns/web"]; ok {
		t.Fatal("the expectation outlived the stream catching up")
	}
}
