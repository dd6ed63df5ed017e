package cilium

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

func TestConvertBlock(t *testing.T) {
	tests := []struct {
		name    string
		b       block
		want    string
		wide    bool
		note    string
		wantErr string
	}{
		{name: "cidr", b: block{Cidr: "10.0.10.0/24"}, want: "10.0.10.0/24", wide: true},
		{name: "cidr with host bits", b: block{Cidr: "10.0.10.7/24"}, want: "10.0.10.0/24", wide: true, note: "Cilium allocates from the network 10.0.10.0/24"},
		{name: "/31 is not wide", b: block{Cidr: "10.0.10.0/31"}, want: "10.0.10.0/31"},
		{name: "/30 is wide", b: block{Cidr: "10.0.10.0/30"}, want: "10.0.10.0/30", wide: true},
		{name: "ipv6 /64", b: block{Cidr: "2004::0/64"}, want: "2004::/64", wide: true, note: "Subnet-Router anycast address of 2004::/64"},
		{name: "ipv6 /127 is not wide", b: block{Cidr: "2001:db8::/127"}, want: "2001:db8::/127"},
		{name: "cidr wins over start and stop", b: block{Cidr: "10.0.0.0/28", Start: "10.0.1.1", Stop: "10.0.1.9"}, want: "10.0.0.0/28", wide: true, note: "ignored, as Cilium ignores them"},
		{name: "range", b: block{Start: "20.0.20.100", Stop: "20.0.20.200"}, want: "20.0.20.100-20.0.20.200"},
		{name: "start alone is one address", b: block{Start: "1.2.3.4"}, want: "1.2.3.4/32"},
		{name: "ipv6 start alone", b: block{Start: "2001:db8::9"}, want: "2001:db8::9/128"},
		{name: "start equals stop", b: block{Start: "1.2.3.4", Stop: "1.2.3.4"}, want: "1.2.3.4/32"},
		{name: "range over loopback", b: block{Start: "127.0.0.250", Stop: "128.0.0.2"}, want: "127.0.0.250-128.0.0.2", note: "never hands out 127.0.0.250-127.255.255.255 (loopback)"},
		{name: "stop without start", b: block{Stop: "1.2.3.4"}, wantErr: "stop \"1.2.3.4\" without start"},
		{name: "empty block", b: block{}, wantErr: "neither cidr nor start"},
		{name: "bad cidr", b: block{Cidr: "10.0.0.0/33"}, wantErr: "is not a CIDR"},
		{name: "bad start", b: block{Start: "banana"}, wantErr: "start \"banana\" is not an IP address"},
		{name: "reversed", b: block{Start: "10.0.0.9", Stop: "10.0.0.1"}, wantErr: "start 10.0.0.9 is after stop 10.0.0.1"},
		{name: "mixed families", b: block{Start: "10.0.0.1", Stop: "2001:db8::1"}, wantErr: "different families"},
		{name: "mapped cidr", b: block{Cidr: "::ffff:10.0.0.0/120"}, wantErr: "IPv4-mapped"},
		{name: "zone", b: block{Start: "fe80::1%eth0"}, wantErr: "not an IP address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, notes, wide, err := convertBlock(tt.b)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want || wide != tt.wide {
				t.Fatalf("= %q wide %t, %v; want %q wide %t", got, wide, err, tt.want, tt.wide)
			}
			if joined := strings.Join(notes, "\n"); tt.note == "" && joined != "" || !strings.Contains(joined, tt.note) {
				t.Errorf("notes %q, want one saying %q", notes, tt.note)
			}
		})
	}
}

func TestFirstLastIPs(t *testing.T) {
	str := func(s string) *string { return &s }
	tests := []struct {
		name     string
		allow    *string
		wideCIDR bool
		skip     bool
		note     string
	}{
		{name: "No skips them", allow: str("No"), wideCIDR: true, skip: true},
		{name: "Yes hands them out", allow: str("Yes"), wideCIDR: true},
		{name: "unset with a wide CIDR: as Cilium 1.16, and warned", wideCIDR: true, note: "Cilium 1.15 and older did not"},
		{name: "unset with ranges only: nothing to say"},
		{name: "a value the CRD refuses: as Cilium's code reads it", allow: str("no"), note: `"no" is neither "Yes" nor "No"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skip, note := FirstLastIPs(tt.allow, tt.wideCIDR)
			if skip != tt.skip || (tt.note == "") != (note == "") || !strings.Contains(note, tt.note) {
				t.Fatalf("= %t, %q; want %t, a note saying %q", skip, note, tt.skip, tt.note)
			}
		})
	}
}

func TestNamespaces(t *testing.T) {
	req := func(op metav1.LabelSelectorOperator, vals ...string) metav1.LabelSelectorRequirement {
		return metav1.LabelSelectorRequirement{Key: ServiceNamespaceKey, Operator: op, Values: vals}
	}
	nameSel := func(reqs ...metav1.LabelSelectorRequirement) *metav1.LabelSelector {
		for i := range reqs {
			reqs[i].Key = NamespaceNameLabel
		}
		return &metav1.LabelSelector{MatchExpressions: reqs}
	}
	tests := []struct {
		name  string
		reqs  []metav1.LabelSelectorRequirement
		names []string
		sel   *metav1.LabelSelector
		why   string
	}{
		{name: "one namespace", reqs: []metav1.LabelSelectorRequirement{req("In", "tenant-a")}, names: []string{"tenant-a"}},
		{name: "In lists, sorted", reqs: []metav1.LabelSelectorRequirement{req("In", "b", "a", "b")}, names: []string{"a", "b"}},
		{name: "In lists intersect (AND)", reqs: []metav1.LabelSelectorRequirement{req("In", "a", "b"), req("In", "b", "c")}, names: []string{"b"}},
		{name: "invalid names never matched a namespace", reqs: []metav1.LabelSelectorRequirement{req("In", "Team_A", "team-b")}, names: []string{"team-b"}},
		{name: "NotIn becomes a selector on the name label", reqs: []metav1.LabelSelectorRequirement{req("NotIn", "kube-system")}, sel: nameSel(req("NotIn", "kube-system"))},
		{name: "In and NotIn together stay ANDed in one selector", reqs: []metav1.LabelSelectorRequirement{req("In", "a", "b"), req("NotIn", "b")},
			sel: nameSel(req("In", "a", "b"), req("NotIn", "b"))},
		{name: "Exists is every namespace", reqs: []metav1.LabelSelectorRequirement{req("Exists")}},
		{name: "DoesNotExist matches nothing", reqs: []metav1.LabelSelectorRequirement{req("DoesNotExist")}, why: "matches no Service"},
		{name: "disjoint In lists match nothing", reqs: []metav1.LabelSelectorRequirement{req("In", "a"), req("In", "b")}, why: "admit no valid namespace"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names, sel, why := Namespaces(tt.reqs)
			if !slices.Equal(names, tt.names) || !reflect.DeepEqual(sel, tt.sel) || (tt.why == "") != (why == "") || !strings.Contains(why, tt.why) {
				t.Fatalf("= %v, %+v, %q; want %v, %+v, %q", names, sel, why, tt.names, tt.sel, tt.why)
			}
		})
	}
}

// TestConvert converts whole pools: what each field becomes and which
// warnings say what did not carry over.
func TestConvert(t *testing.T) {
	tests := []struct {
		name string
		in   string
		// want is the IPPool's spec as YAML; "" when the pool is not converted.
		want     string
		warnings []string
	}{
		{
			name: "v2 with everything that carries over",
			in: `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: prod}
spec:
  allowFirstLastIPs: "No"
  blocks: [{cidr: 192.168.180.0/24}, {start: 192.168.181.10, stop: 192.168.181.60}]
  serviceSelector:
    matchLabels: {io.kubernetes.service.namespace: prod, tier: web}
    matchExpressions: [{key: exposure, operator: NotIn, values: [internal]}]`,
			want: `addresses: [192.168.180.0/24, 192.168.181.10-192.168.181.60]
allocation:
  namespaces: [prod]
  serviceSelectors:
  - matchLabels: {tier: web}
    matchExpressions: [{key: exposure, operator: NotIn, values: [internal]}]
autoAssign: true
avoidBuggyIPs: false
skipFirstLastIPs: true`,
		},
		{
			name: "v2alpha1 with the deprecated cidrs, and blocks",
			in: `apiVersion: cilium.io/v2alpha1
kind: CiliumLoadBalancerIPPool
metadata: {name: old}
spec:
  allowFirstLastIPs: "Yes"
  cidrs: [{cidr: 10.1.0.0/28}]
  blocks: [{cidr: 10.2.0.0/28}, {cidr: 10.1.0.0/28}]`,
			want:     `{addresses: [10.1.0.0/28, 10.2.0.0/28], autoAssign: true, avoidBuggyIPs: false}`,
			warnings: []string{"spec.blocks[1]: 10.1.0.0/28 repeats an earlier block; written once"},
		},
		{
			name: "disabled",
			in: `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: paused, labels: {team: a}}
spec: {disabled: true, allowFirstLastIPs: "Yes", blocks: [{cidr: 10.3.0.0/28}], bogus: 1}`,
			want:     `{addresses: [10.3.0.0/28], autoAssign: false, avoidBuggyIPs: false}`,
			warnings: []string{"spec.bogus: not carried over", "spec.disabled: ipledger has no disabled pool; written as autoAssign: false", "metadata.labels: not carried over (team=a)"},
		},
		{
			name: "namespace NotIn",
			in: `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: shared}
spec:
  blocks: [{start: 10.4.0.1, stop: 10.4.0.9}]
  serviceSelector: {matchExpressions: [{key: io.kubernetes.service.namespace, operator: NotIn, values: [kube-system]}]}`,
			want: `addresses: [10.4.0.1-10.4.0.9]
allocation:
  namespaceSelectors: [{matchExpressions: [{key: kubernetes.io/metadata.name, operator: NotIn, values: [kube-system]}]}]
autoAssign: true
avoidBuggyIPs: false`,
			warnings: []string{"spec.serviceSelector: the io.kubernetes.service.namespace requirements become a namespace selector on kubernetes.io/metadata.name"},
		},
		{
			name: "a Service name selector is not converted: dropping it would widen the pool",
			in: `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: one}
spec:
  blocks: [{cidr: 10.5.0.0/28}]
  serviceSelector: {matchLabels: {io.kubernetes.service.name: ingress}}`,
			warnings: []string{"spec.serviceSelector.matchLabels[io.kubernetes.service.name]: not converted: io.kubernetes.service.name selects Services by name"},
		},
		{
			name:     "no blocks",
			in:       `{apiVersion: cilium.io/v2, kind: CiliumLoadBalancerIPPool, metadata: {name: empty}, spec: {}}`,
			warnings: []string{"spec.blocks: not converted: the pool has no blocks"},
		},
		{
			name:     "a bad block leaves the pool out",
			in:       `{apiVersion: cilium.io/v2, kind: CiliumLoadBalancerIPPool, metadata: {name: bad}, spec: {blocks: [{cidr: 10.6.0.0/28}, {stop: 10.6.1.1}]}}`,
			warnings: []string{"spec.blocks[1]: not converted: stop \"10.6.1.1\" without start"},
		},
		{
			name: "a conflicting pool is said so",
			in: `apiVersion: cilium.io/v2
kind: CiliumLoadBalancerIPPool
metadata: {name: late}
spec: {allowFirstLastIPs: "No", blocks: [{cidr: 10.7.0.0/28}]}
status: {conditions: [{type: cilium.io/PoolConflict, status: "True", message: "Pool conflicts since CIDR '10.7.0.0/28' overlaps"}]}`,
			want:     `{addresses: [10.7.0.0/28], autoAssign: true, avoidBuggyIPs: false, skipFirstLastIPs: true}`,
			warnings: []string{"status: Cilium marks this pool conflicting (Pool conflicts since CIDR '10.7.0.0/28' overlaps)"},
		},
		{
			name:     "an unknown version",
			in:       `{apiVersion: cilium.io/v3, kind: CiliumLoadBalancerIPPool, metadata: {name: future}, spec: {blocks: [{cidr: 10.8.0.0/28}]}}`,
			warnings: []string{"apiVersion: not converted: cilium.io/v3"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := metallb.Decode(strings.NewReader(tt.in), "test")
			if err != nil {
				t.Fatal(err)
			}
			res := Convert(objs)
			var all []string
			for _, w := range res.Warnings {
				all = append(all, w.String())
			}
			for _, w := range tt.warnings {
				if !slices.ContainsFunc(all, func(s string) bool { return strings.Contains(s, w) }) {
					t.Errorf("no warning says %q:\n%s", w, strings.Join(all, "\n"))
				}
			}
			if tt.want == "" {
				if len(res.Pools) != 0 || len(res.NotConverted) != 1 {
					t.Fatalf("pools %+v, not converted %v; want the pool left out", res.Pools, res.NotConverted)
				}
				return
			}
			if len(res.Pools) != 1 || len(res.NotConverted) != 0 {
				t.Fatalf("pools %+v, not converted %v; want one pool", res.Pools, res.NotConverted)
			}
			p := res.Pools[0]
			if p.Metadata.Name != objs[0].GetName() || p.Metadata.Labels[metallb.LabelConvertedFrom] != ConvertedFrom {
				t.Errorf("metadata %+v: want the Cilium pool's name and the label %s=%s", p.Metadata, metallb.LabelConvertedFrom, ConvertedFrom)
			}
			var want metallb.IPPoolSpec
			if err := yaml.Unmarshal([]byte(tt.want), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(p.Spec, want) {
				got, _ := yaml.Marshal(p.Spec)
				t.Errorf("spec:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

// TestOtherObjects: announcing objects and anything else are warned about
// by name, never converted.
func TestOtherObjects(t *testing.T) {
	objs := []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "cilium.io/v2alpha1", "kind": "CiliumL2AnnouncementPolicy", "metadata": map[string]any{"name": "l2"}}},
		{Object: map[string]any{"apiVersion": "cilium.io/v2", "kind": "CiliumBGPAdvertisement", "metadata": map[string]any{"name": "bgp"}}},
		{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "cilium-config", "namespace": "kube-system"}}},
	}
	res := Convert(objs)
	got := metallb.Warnings(res.Warnings)
	for _, w := range []string{
		"CiliumL2AnnouncementPolicy l2: not converted: announcing is reachability",
		"CiliumBGPAdvertisement bgp: not converted: announcing is reachability",
		"ConfigMap kube-system/cilium-config: not converted: not a CiliumLoadBalancerIPPool",
	} {
		if !strings.Contains(got, w) {
			t.Errorf("warnings do not say %q:\n%s", w, got)
		}
	}
	if len(res.Pools) != 0 || len(res.NotConverted) != 0 {
		t.Errorf("pools %v, not converted %v; want neither", res.Pools, res.NotConverted)
	}
}
