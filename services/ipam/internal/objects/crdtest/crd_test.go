// Package crdtest checks, against the real API server, that the IPPool CRD
// refuses exactly what ipam's parser refuses: one set of rules, enforced
// where the operator types (kubectl apply) and again where ipam reads.
package crdtest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/convert"
	"github.com/ipledger/ipledger/services/ipam/internal/allocator"
	"github.com/ipledger/ipledger/services/ipam/internal/objects"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var poolsGVR = schema.GroupVersionResource{Group: "ipledger.io", Version: "v1alpha1", Resource: "ippools"}

func expr(key, op string, values ...any) map[string]any {
	e := map[string]any{"key": key, "operator": op}
	if values != nil {
		e["values"] = values
	}
	return e
}

// TestCRDAndParserAgree: every spec is created (dry run) at the API server
// and parsed by ipam; both accept it, or both refuse it naming the field.
func TestCRDAndParserAgree(t *testing.T) {
	env := testenv.Get(t)
	sel := func(exprs ...map[string]any) map[string]any {
		var list []any
		for _, e := range exprs {
			list = append(list, e)
		}
		return map[string]any{"allocation": map[string]any{"namespaceSelectors": []any{map[string]any{"matchExpressions": list}}}}
	}
	cases := []struct {
		name  string
		spec  map[string]any
		field string // "" = valid; else the field both must name
	}{
		{"ipv4 cidr", addr("192.0.2.0/24"), ""},
		{"ipv6 cidr", addr("2001:db8::/64"), ""},
		{"ipv4 range", addr("198.51.100.10-198.51.100.20"), ""},
		{"ipv4 range, one address", addr("198.51.100.10-198.51.100.10"), ""},
		{"ipv4 range across octets", addr("10.0.0.250-10.0.1.5"), ""},
		{"ipv4 range, spaces", addr("10.0.0.1 - 10.0.0.9"), ""},
		{"ipv4 cidr, spaces", addr(" 10.0.0.0/24 "), ""},
		{"ipv6 range", addr("2001:db8:1::-2001:db8:1::ff"), ""},
		{"ipv6 range, compressed differently", addr("2001:db8::ffff-2001:db8::1:0"), ""},
		{"ipv6 range, long", addr("::1:0-ffff::"), ""},
		{"unusable addresses are valid (and never handed out)", addr("0.0.0.0/30", "127.0.0.0/30"), ""},
		{"reversed ipv4 range", addr("10.0.1.20-10.0.1.10"), "spec.addresses[0]"},
		{"reversed ipv4 range, second entry", addr("10.0.0.0/24", "10.0.1.20-10.0.1.9"), "spec.addresses[1]"},
		{"reversed ipv4 range by one", addr("10.0.0.2-10.0.0.1"), "spec.addresses[0]"},
		{"reversed across octet widths", addr("10.0.0.100-10.0.0.99"), "spec.addresses[0]"},
		{"reversed ipv6 range", addr("2001:db8::ff-2001:db8::1"), "spec.addresses[0]"},
		{"reversed ipv6 range across groups", addr("2001:db8::1:0-2001:db8::ffff"), "spec.addresses[0]"},
		{"reversed ipv6 compressed", addr("ffff::-::1:0"), "spec.addresses[0]"},
		{"host bits", addr("192.0.2.1/24"), "spec.addresses[0]"},
		{"not an address", addr("banana"), "spec.addresses[0]"},
		{"bare address", addr("10.0.0.1"), "spec.addresses[0]"},
		{"range across families", addr("192.0.2.1-2001:db8::1"), "spec.addresses[0]"},
		{"three-part range", addr("192.0.2.1-192.0.2.2-192.0.2.3"), "spec.addresses[0]"},
		{"zone", addr("fe80::1%eth0-fe80::9"), "spec.addresses[0]"},
		{"IPv4-mapped", addr("::ffff:10.0.0.1-::ffff:10.0.0.9"), "spec.addresses[0]"},
		{"leading zeros", addr("010.0.0.1-10.0.0.9"), "spec.addresses[0]"},
		{"exclude an address, a CIDR and a range", excl(addr("10.0.0.0/24"), "10.0.0.1", "10.0.0.128/28", "10.0.0.240-10.0.0.250"), ""},
		{"exclude IPv6", excl(addr("2001:db8::/64", "10.0.0.0/24"), "2001:db8::1", "2001:db8::ff00-2001:db8::ffff", " 2001:db8::100/120 "), ""},
		{"exclude part of a range entry", excl(addr("10.0.0.10-10.0.0.20"), "10.0.0.0/28"), ""},
		{"exclude reaching over a range entry", excl(addr("10.0.0.10-10.0.0.20"), "10.0.0.0-10.0.0.30"), ""},
		{"exclude inside a range entry", excl(addr("10.0.0.10-10.0.0.20"), "10.0.0.15"), ""},
		{"exclude the ends of a range entry", excl(addr("10.0.0.10-10.0.0.20"), "10.0.0.10", "10.0.0.20"), ""},
		{"exclude a CIDR over the end of a range entry", excl(addr("10.0.0.20-10.0.0.40"), "10.0.0.16/29"), ""},
		{"exclude across octets", excl(addr("10.0.0.250-10.0.1.5"), "10.0.1.0-10.0.1.2"), ""},
		{"exclude IPv6 inside a range entry", excl(addr("2001:db8::ffff-2001:db8::1:ff"), "2001:db8::1:0"), ""},
		{"skipFirstLastIPs", with(addr("10.0.0.0/24"), "skipFirstLastIPs", true), ""},
		{"exclude not an address", excl(addr("10.0.0.0/24"), "gateway"), "spec.exclude[0]"},
		{"exclude host bits", excl(addr("10.0.0.0/24"), "10.0.0.1/28"), "spec.exclude[0]"},
		{"exclude range across families", excl(addr("10.0.0.0/24"), "10.0.0.1-2001:db8::1"), "spec.exclude[0]"},
		{"exclude zone", excl(addr("fe80::/64"), "fe80::1%eth0"), "spec.exclude[0]"},
		{"exclude IPv4-mapped", excl(addr("10.0.0.0/24"), "::ffff:10.0.0.1"), "spec.exclude[0]"},
		{"exclude reversed", excl(addr("10.0.0.0/24"), "10.0.0.1", "10.0.0.9-10.0.0.5"), "spec.exclude[1]"},
		{"exclude outside the pool", excl(addr("10.0.0.0/24", "10.0.2.0/24"), "10.0.1.1"), "spec.exclude[0]"},
		{"exclude outside, second entry", excl(addr("10.0.0.0/24"), "10.0.0.1", "10.0.1.0/28"), "spec.exclude[1]"},
		{"exclude just below a range entry", excl(addr("10.0.0.10-10.0.0.20"), "10.0.0.9"), "spec.exclude[0]"},
		{"exclude just above a range entry", excl(addr("10.0.0.10-10.0.0.20"), "10.0.0.21-10.0.0.30"), "spec.exclude[0]"},
		{"exclude a CIDR beside a range entry", excl(addr("10.0.0.10-10.0.0.20"), "10.0.0.0/29"), "spec.exclude[0]"},
		{"exclude the other family", excl(addr("10.0.0.0/24"), "2001:db8::1"), "spec.exclude[0]"},
		{"exclude IPv6 outside a range entry", excl(addr("2001:db8::ffff-2001:db8::1:ff"), "2001:db8::1:100"), "spec.exclude[0]"},
		{"empty list", map[string]any{"addresses": []any{}}, "spec.addresses"},
		{"negative priority", with(addr("10.0.0.0/24"), "allocation", map[string]any{"priority": int64(-1)}), "spec.allocation.priority"},
		{"namespace names", with(addr("10.0.0.0/24"), "allocation", map[string]any{"namespaces": []any{"team-a", "b2"}}), ""},
		{"empty namespace", with(addr("10.0.0.0/24"), "allocation", map[string]any{"namespaces": []any{""}}), "spec.allocation.namespaces[0]"},
		{"uppercase namespace", with(addr("10.0.0.0/24"), "allocation", map[string]any{"namespaces": []any{"Team"}}), "spec.allocation.namespaces[0]"},
		{"In with values", merge(addr("10.0.0.0/24"), sel(expr("tier", "In", "web"))), ""},
		{"Exists", merge(addr("10.0.0.0/24"), sel(expr("tier", "Exists"))), ""},
		{"In without values", merge(addr("10.0.0.0/24"), sel(expr("tier", "In"))), "spec.allocation.namespaceSelectors[0].matchExpressions[0]"},
		{"NotIn with empty values", merge(addr("10.0.0.0/24"), sel(expr("tier", "NotIn", []any{}...))), "spec.allocation.namespaceSelectors[0].matchExpressions[0]"},
		{"Exists with values", merge(addr("10.0.0.0/24"), sel(expr("tier", "Exists", "x"))), "spec.allocation.namespaceSelectors[0].matchExpressions[0]"},
		{"empty key", merge(addr("10.0.0.0/24"), sel(expr("", "Exists"))), "spec.allocation.namespaceSelectors[0].matchExpressions[0]"},
		{"unknown operator", merge(addr("10.0.0.0/24"), sel(expr("tier", "Gt", "1"))), "spec.allocation.namespaceSelectors[0].matchExpressions[0]"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
				"metadata": map[string]any{"name": fmt.Sprintf("parity-%d", i)},
				"spec":     tc.spec,
			}}
			_, apiErr := env.Dynamic.Resource(poolsGVR).Create(context.Background(), u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			obj, err := convert.IPPool(u)
			if err != nil {
				t.Fatal(err)
			}
			_, parseErr := allocator.ParsePool(u.GetName(), objects.PoolSpec(obj))
			if tc.field == "" {
				if apiErr != nil || parseErr != nil {
					t.Fatalf("valid spec refused: API server: %v; ipam: %v", apiErr, parseErr)
				}
				return
			}
			if apiErr == nil || parseErr == nil {
				t.Fatalf("invalid spec accepted: API server: %v; ipam: %v", apiErr, parseErr)
			}
			if !strings.Contains(apiErr.Error(), tc.field) || !strings.HasPrefix(parseErr.Error(), tc.field) {
				t.Fatalf("errors do not both name %s:\n  API server: %v\n  ipam: %v", tc.field, apiErr, parseErr)
			}
		})
	}
}

func addr(entries ...string) map[string]any {
	var list []any
	for _, e := range entries {
		list = append(list, e)
	}
	return map[string]any{"addresses": list}
}

func excl(spec map[string]any, entries ...string) map[string]any {
	var list []any
	for _, e := range entries {
		list = append(list, e)
	}
	spec["exclude"] = list
	return spec
}

func with(spec map[string]any, key string, v any) map[string]any {
	spec[key] = v
	return spec
}

func merge(a, b map[string]any) map[string]any {
	for k, v := range b {
		a[k] = v
	}
	return a
}

// TestRangesPolicyRatchets: a pool stored with a reversed range before the
// admission policy existed can still be updated (ipam adds its finalizer,
// an operator relabels it) as long as the update keeps that entry; a new
// reversed entry is refused.
func TestRangesPolicyRatchets(t *testing.T) {
	env := testenv.Get(t)
	ctx := context.Background()
	bindings := env.Client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	if err := bindings.Delete(ctx, "ipledger-ippool-ranges", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	pools := env.Dynamic.Resource(poolsGVR)
	old := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
		"metadata": map[string]any{"name": "ratchet"},
		"spec":     map[string]any{"addresses": []any{"10.0.1.20-10.0.1.10"}},
	}}
	testenv.Eventually(t, time.Minute, func() error { // the API server unloads the policy asynchronously
		_, err := pools.Create(ctx, old, metav1.CreateOptions{})
		return err
	})
	t.Cleanup(func() { _ = pools.Delete(context.Background(), "ratchet", metav1.DeleteOptions{}) })
	if err := env.Install(ctx); err != nil { // the binding back, and enforced
		t.Fatal(err)
	}
	if _, err := pools.Patch(ctx, "ratchet", types.MergePatchType, []byte(`{"metadata":{"finalizers":["ipledger.io/pool-protection"],"labels":{"team":"a"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("an update keeping the stored entry was refused: %v", err)
	}
	_, err := pools.Patch(ctx, "ratchet", types.MergePatchType, []byte(`{"spec":{"addresses":["10.0.1.20-10.0.1.10","10.0.2.9-10.0.2.1"]}}`), metav1.PatchOptions{})
	if err == nil || !strings.Contains(err.Error(), `spec.addresses[1] "10.0.2.9-10.0.2.1"`) {
		t.Fatalf("a new reversed entry: err = %v, want refused naming spec.addresses[1]", err)
	}
	if _, err := pools.Patch(ctx, "ratchet", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestExclusionsFitTheCostBudget: the largest spec the CRD admits (64
// IPv6 ranges, 64 exclusions each in the last of them) is decided by
// ipledger-ippool-ranges within the API server's CEL cost budget, and one
// exclusion outside them is refused by name.
func TestExclusionsFitTheCostBudget(t *testing.T) {
	env := testenv.Get(t)
	var addresses, exclude []string
	for i := range 64 {
		addresses = append(addresses, fmt.Sprintf("2001:db8:%x::1-2001:db8:%x::ffff", i, i))
		exclude = append(exclude, fmt.Sprintf("2001:db8:3f::%x-2001:db8:3f::%x", i+2, i+2))
	}
	create := func(exclude []string) error {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "ipledger.io/v1alpha1", "kind": "IPPool",
			"metadata": map[string]any{"name": "budget"}, "spec": excl(addr(addresses...), exclude...),
		}}
		_, err := env.Dynamic.Resource(poolsGVR).Create(context.Background(), u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	if err := create(exclude); err != nil {
		t.Fatalf("the largest valid spec was refused: %v", err)
	}
	exclude[63] = "2001:db8:ffff::1"
	if err := create(exclude); err == nil || !strings.Contains(err.Error(), `spec.exclude[63] "2001:db8:ffff::1": outside every entry of spec.addresses`) {
		t.Fatalf("an exclusion outside the pool: err = %v", err)
	}
}
