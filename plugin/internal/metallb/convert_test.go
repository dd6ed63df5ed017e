package metallb

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func decodeString(t *testing.T, s string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := Decode(strings.NewReader(s), "test")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// pool is an IPAddressPool "p" in metallb-system with the given spec (YAML,
// indented by 2).
func pool(spec string) string {
	return "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p, namespace: metallb-system}\nspec:\n" + spec
}

const obj = "IPAddressPool metallb-system/p"

// TestConvert: one case per field and per warning. want is the IPPool spec
// (nil: the pool is not converted); warnings are "field: part of the
// message", and every warning Convert gives must be listed.
func TestConvert(t *testing.T) {
	sel := func(k string, op metav1.LabelSelectorOperator, v ...string) metav1.LabelSelector {
		return metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: k, Operator: op, Values: v}}}
	}
	for _, tc := range []struct {
		name     string
		in       string
		want     *IPPoolSpec
		warnings []string
	}{
		{
			name: "IPv4 CIDR, defaults",
			in:   pool("  addresses: [192.0.2.0/24]\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true},
		},
		{
			name: "IPv4 range, spaces trimmed",
			in:   pool("  addresses: ['192.0.2.10 - 192.0.2.20']\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.10-192.0.2.20"}, AutoAssign: true},
		},
		{
			name: "IPv6 range, canonical spelling",
			in:   pool("  addresses: ['2001:0db8::0010-2001:db8:0:0::20']\n"),
			want: &IPPoolSpec{Addresses: []string{"2001:db8::10-2001:db8::20"}, AutoAssign: true},
		},
		{
			name:     "IPv6 CIDR: leading zeros dropped, the anycast address noted",
			in:       pool("  addresses: [fc00:f853:0ccd:e799::/124]\n"),
			want:     &IPPoolSpec{Addresses: []string{"fc00:f853:ccd:e799::/124"}, AutoAssign: true},
			warnings: []string{"spec.addresses[0]: never hands out fc00:f853:ccd:e799::, the Subnet-Router anycast address"},
		},
		{
			name: "IPv6 /127 and /128 have no anycast address",
			in:   pool("  addresses: ['2001:db8::/127', '2001:db8::8/128']\n"),
			want: &IPPoolSpec{Addresses: []string{"2001:db8::/127", "2001:db8::8/128"}, AutoAssign: true},
		},
		{
			name:     "host bits: masked as MetalLB does",
			in:       pool("  addresses: [192.0.2.77/24]\n"),
			want:     &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true},
			warnings: []string{`spec.addresses[0]: "192.0.2.77/24" has host bits set; MetalLB uses the network 192.0.2.0/24`},
		},
		{
			name:     "IPv4-mapped range ends: read as IPv4, as MetalLB does",
			in:       pool("  addresses: ['::ffff:192.0.2.1-192.0.2.9']\n"),
			want:     &IPPoolSpec{Addresses: []string{"192.0.2.1-192.0.2.9"}, AutoAssign: true},
			warnings: []string{"spec.addresses[0]: ::ffff:192.0.2.1 is an IPv4-mapped IPv6 address, which MetalLB reads as 192.0.2.1"},
		},
		{
			name:     "unusable addresses: converted, and noted",
			in:       pool("  addresses: [127.0.0.0/30, 224.0.0.0-224.0.0.1]\n"),
			want:     &IPPoolSpec{Addresses: []string{"127.0.0.0/30", "224.0.0.0-224.0.0.1"}, AutoAssign: true},
			warnings: []string{"spec.addresses[0]: never hands out 127.0.0.0-127.0.0.3 (loopback)", "spec.addresses[1]: never hands out 224.0.0.0-224.0.0.1 (multicast)"},
		},
		{
			name:     "a repeated entry is written once",
			in:       pool("  addresses: [192.0.2.0/24, 192.0.2.0/24]\n"),
			want:     &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true},
			warnings: []string{`spec.addresses[1]: "192.0.2.0/24" repeats an earlier entry`},
		},
		{
			name:     "reversed range: not converted",
			in:       pool("  addresses: [192.0.2.20-192.0.2.10]\n"),
			warnings: []string{"spec.addresses[0]: not converted: \"192.0.2.20-192.0.2.10\" starts after it ends"},
		},
		{
			name:     "range across families: not converted",
			in:       pool("  addresses: [192.0.2.1-2001:db8::1]\n"),
			warnings: []string{"spec.addresses[0]: not converted: \"192.0.2.1-2001:db8::1\" mixes IPv4 and IPv6"},
		},
		{
			name:     "not an address: not converted",
			in:       pool("  addresses: [192.0.2.0/24, banana]\n"),
			warnings: []string{"spec.addresses[1]: not converted: \"banana\" is neither a CIDR"},
		},
		{
			name:     "a bare IP is not a CIDR (MetalLB wants /32)",
			in:       pool("  addresses: [192.0.2.1]\n"),
			warnings: []string{"spec.addresses[0]: not converted: \"192.0.2.1\" is neither a CIDR"},
		},
		{
			name:     "zone in a range: not converted",
			in:       pool("  addresses: ['fe80::1%eth0-fe80::9']\n"),
			warnings: []string{"spec.addresses[0]: not converted: \"fe80::1%eth0-fe80::9\" starts with \"fe80::1%eth0\""},
		},
		{
			name:     "IPv4-mapped CIDR: not converted, with the IPv4 CIDR to write",
			in:       pool("  addresses: ['::ffff:192.0.2.0/120']\n"),
			warnings: []string{"spec.addresses[0]: not converted: \"::ffff:192.0.2.0/120\" is an IPv4-mapped IPv6 prefix, which the IPPool CRD refuses; write it as an IPv4 CIDR (192.0.2.0/24)"},
		},
		{
			name:     "no addresses: not converted",
			in:       pool("  autoAssign: false\n"),
			warnings: []string{"spec.addresses: not converted: the pool has no addresses"},
		},
		{
			name:     "addresses of the wrong type: not converted",
			in:       pool("  addresses: 192.0.2.0/24\n"),
			warnings: []string{"spec: not converted: field addresses is a string, expected []string"},
		},
		{
			name:     "more addresses than an IPPool holds: not converted",
			in:       pool("  addresses: [" + manyCIDRs(65) + "]\n"),
			warnings: []string{"spec.addresses: not converted: 65 entries, and an IPPool holds at most 64"},
		},
		{
			name: "autoAssign false, avoidBuggyIPs true",
			in:   pool("  addresses: [192.0.2.0/24]\n  autoAssign: false\n  avoidBuggyIPs: true\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AvoidBuggyIPs: true},
		},
		{
			name: "autoAssign true written",
			in:   pool("  addresses: [192.0.2.0/24]\n  autoAssign: true\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true},
		},
		{
			name: "priority",
			in:   pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {priority: 50}\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true, Allocation: &Allocation{Priority: 50}},
		},
		{
			name: "priority 0 is none in both; an empty serviceAllocation serves everyone in both",
			in:   pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {priority: 0, namespaces: []}\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true},
		},
		{
			name:     "negative priority: not carried over",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {priority: -3, namespaces: [a]}\n"),
			want:     &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true, Allocation: &Allocation{Namespaces: []string{"a"}}},
			warnings: []string{"spec.serviceAllocation.priority: not carried over: -3 is outside ipledger's range"},
		},
		{
			name:     "priority beyond int32: not carried over",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {priority: 3000000000}\n"),
			want:     &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true},
			warnings: []string{"spec.serviceAllocation.priority: not carried over: 3000000000 is outside"},
		},
		{
			name:     "namespaces sorted, repeats written once",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {namespaces: [team-b, team-a, team-b]}\n"),
			want:     &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true, Allocation: &Allocation{Namespaces: []string{"team-a", "team-b"}}},
			warnings: []string{`spec.serviceAllocation.namespaces[2]: "team-b" repeats an earlier entry`},
		},
		{
			name:     "a name that cannot be a namespace: not carried over",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {namespaces: [Team_A, team-b]}\n"),
			want:     &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true, Allocation: &Allocation{Namespaces: []string{"team-b"}}},
			warnings: []string{`spec.serviceAllocation.namespaces[0]: not carried over: "Team_A" cannot name a namespace`},
		},
		{
			name: "no valid namespace left: not converted (it would widen the pool)",
			in:   pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {namespaces: [Team_A]}\n"),
			warnings: []string{
				`spec.serviceAllocation.namespaces[0]: not carried over: "Team_A"`,
				"spec.serviceAllocation.namespaces: not converted: no entry names a namespace",
			},
		},
		{
			name: "namespace and service selectors, In values sorted",
			in: pool("  addresses: [192.0.2.0/24]\n  serviceAllocation:\n    namespaceSelectors: [{matchLabels: {foo: bar}}]\n" +
				"    serviceSelectors: [{matchExpressions: [{key: app, operator: In, values: [web, api]}]}, {matchExpressions: [{key: tier, operator: Exists}]}]\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true, Allocation: &Allocation{
				NamespaceSelectors: []metav1.LabelSelector{{MatchLabels: map[string]string{"foo": "bar"}}},
				ServiceSelectors:   []metav1.LabelSelector{sel("app", metav1.LabelSelectorOpIn, "api", "web"), sel("tier", metav1.LabelSelectorOpExists)},
			}},
		},
		{
			name: "an empty selector (matches everything) is kept",
			in:   pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {serviceSelectors: [{}]}\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true, Allocation: &Allocation{ServiceSelectors: []metav1.LabelSelector{{}}}},
		},
		{
			name:     "In without values: not converted",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {serviceSelectors: [{matchExpressions: [{key: app, operator: In}]}]}\n"),
			warnings: []string{"spec.serviceAllocation.serviceSelectors[0].matchExpressions[0]: not converted: operator In needs at least one value"},
		},
		{
			name:     "Exists with values: not converted",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {namespaceSelectors: [{matchExpressions: [{key: app, operator: Exists, values: [x]}]}]}\n"),
			warnings: []string{"spec.serviceAllocation.namespaceSelectors[0].matchExpressions[0]: not converted: operator Exists takes no values"},
		},
		{
			name:     "unknown operator: not converted",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {serviceSelectors: [{matchExpressions: [{key: app, operator: Gt, values: ['1']}]}]}\n"),
			warnings: []string{`spec.serviceAllocation.serviceSelectors[0].matchExpressions[0]: not converted: operator "Gt" is not In`},
		},
		{
			name:     "empty key: not converted",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {serviceSelectors: [{matchExpressions: [{key: '', operator: Exists}]}]}\n"),
			warnings: []string{"spec.serviceAllocation.serviceSelectors[0].matchExpressions[0]: not converted: the key is empty"},
		},
		{
			name:     "more selectors than an IPPool holds: not converted",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {serviceSelectors: [" + strings.Repeat("{}, ", 16) + "{}]}\n"),
			warnings: []string{"spec.serviceAllocation.serviceSelectors: not converted: 17 selectors, and an IPPool holds at most 16"},
		},
		{
			name: "unknown fields: not carried over",
			in:   pool("  addresses: [192.0.2.0/24]\n  color: blue\n  serviceAllocation: {priority: 1, weight: 3}\n"),
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true, Allocation: &Allocation{Priority: 1}},
			warnings: []string{
				"spec.color: not carried over: ipledger's IPPool has no equivalent",
				"spec.serviceAllocation.weight: not carried over",
			},
		},
		{
			name: "labels and annotations: not carried over (kubectl's own are ignored)",
			in: "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: p\n  namespace: metallb-system\n" +
				"  labels: {zone: b, adv: bgp}\n  annotations: {owner: netops, kubectl.kubernetes.io/last-applied-configuration: '{}'}\nspec: {addresses: [192.0.2.0/24]}\n",
			want: &IPPoolSpec{Addresses: []string{"192.0.2.0/24"}, AutoAssign: true},
			warnings: []string{
				"metadata.labels: not carried over (adv=bgp, zone=b): ipam does not read IPPool labels",
				"metadata.annotations: not carried over: owner",
			},
		},
		{
			name:     "more namespaces than an IPPool lists: not converted",
			in:       pool("  addresses: [192.0.2.0/24]\n  serviceAllocation: {namespaces: [" + manyNames(257) + "]}\n"),
			warnings: []string{"spec.serviceAllocation.namespaces: not converted: 257 namespaces, and an IPPool lists at most 256"},
		},
		{
			name:     "another version: not converted",
			in:       "apiVersion: metallb.io/v1alpha1\nkind: IPAddressPool\nmetadata: {name: p, namespace: metallb-system}\nspec: {addresses: [192.0.2.0/24]}\n",
			warnings: []string{"apiVersion: not converted: metallb.io/v1alpha1 is not a version this converter knows"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := Convert(decodeString(t, tc.in))
			switch {
			case tc.want == nil && len(res.Pools) != 0:
				t.Errorf("converted to %+v, want not converted", res.Pools[0].Spec)
			case tc.want == nil && !slices.Equal(res.NotConverted, []string{obj}):
				t.Errorf("NotConverted = %v, want [%s]", res.NotConverted, obj)
			case tc.want != nil && len(res.Pools) != 1:
				t.Errorf("got %d pools (not converted: %v), want 1", len(res.Pools), res.NotConverted)
			case tc.want != nil && !reflect.DeepEqual(res.Pools[0].Spec, *tc.want):
				t.Errorf("spec = %+v\nwant   %+v", res.Pools[0].Spec, *tc.want)
			}
			checkWarnings(t, res.Warnings, obj, tc.warnings)
		})
	}
}

// checkWarnings checks that every warning is on obj and matches exactly one
// of want ("field: part of the message"), and every want matches one.
func checkWarnings(t *testing.T, got []Warning, obj string, want []string) {
	t.Helper()
	used := make([]bool, len(want))
next:
	for _, w := range got {
		for i, s := range want {
			field, msg, _ := strings.Cut(s, ": ")
			if !used[i] && w.Object == obj && w.Field == field && strings.Contains(w.Message, msg) {
				used[i] = true
				continue next
			}
		}
		t.Errorf("unexpected warning: %s", w)
	}
	for i, s := range want {
		if !used[i] {
			t.Errorf("missing warning on %s: %s", obj, s)
		}
	}
}

func manyNames(n int) string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprintf("ns-%d", i))
	}
	return strings.Join(s, ", ")
}

func manyCIDRs(n int) string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprintf("10.0.%d.0/24", i))
	}
	return strings.Join(s, ", ")
}

// TestConvertObjects: the metadata written, and every object that is not an
// IPAddressPool gets a warning saying why it is not converted.
func TestConvertObjects(t *testing.T) {
	in := `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: b, namespace: metallb-system, labels: {adv: l2}}
spec: {addresses: [192.0.2.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: a, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: a, namespace: other}
spec: {addresses: [203.0.113.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: by-label, namespace: metallb-system}
spec: {ipAddressPoolSelectors: [{matchLabels: {adv: l2}}]}
---
apiVersion: metallb.io/v1beta1
kind: BGPAdvertisement
metadata: {name: by-list, namespace: metallb-system}
spec: {ipAddressPools: [a]}
---
apiVersion: metallb.io/v1beta2
kind: BGPPeer
metadata: {name: peer, namespace: metallb-system}
spec: {myASN: 64500, peerASN: 64501, peerAddress: 10.0.0.1}
---
apiVersion: metallb.io/v1beta1
kind: AddressPool
metadata: {name: old, namespace: metallb-system}
spec: {protocol: layer2, addresses: [10.1.0.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {namespace: metallb-system}
spec: {addresses: [10.2.0.0/24]}
---
apiVersion: metallb.io/v1beta1
kind: ServiceL2Status
metadata: {name: l2-status, namespace: metallb-system}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: unreadable, namespace: metallb-system}
spec: {ipAddressPoolSelectors: [{matchLabels: [adv]}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: config, namespace: metallb-system}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
`
	res := Convert(decodeString(t, in))
	var names []string
	for _, p := range res.Pools {
		names = append(names, p.Metadata.Name)
	}
	if want := []string{"a", "b"}; !slices.Equal(names, want) {
		t.Fatalf("pools %v, want %v", names, want)
	}
	a := res.Pools[0]
	if a.APIVersion != "ipledger.io/v1alpha1" || a.Kind != "IPPool" || a.Metadata.Labels[LabelConvertedFrom] != "metallb" ||
		a.Metadata.Annotations[AnnotationConvertedFrom] != "IPAddressPool metallb-system/a" || a.Spec.Addresses[0] != "198.51.100.0/24" {
		t.Errorf("pool a = %+v", a)
	}
	if !slices.Equal(res.NotConverted, []string{"IPAddressPool metallb-system/(no name)", "IPAddressPool other/a"}) {
		t.Errorf("NotConverted = %v", res.NotConverted)
	}
	want := map[string][]string{
		"IPAddressPool other/a":                    {"metadata.name: not converted: IPAddressPool metallb-system/a already becomes IPPool \"a\""},
		"IPAddressPool metallb-system/a":           {": announced by BGPAdvertisement metallb-system/by-list"},
		"IPAddressPool metallb-system/b":           {": announced by L2Advertisement metallb-system/by-label", "metadata.labels: not carried over (adv=l2)"},
		"L2Advertisement metallb-system/by-label":  {": not converted (it announces IPAddressPools b): announcing is reachability"},
		"BGPAdvertisement metallb-system/by-list":  {": not converted (it announces IPAddressPools a)"},
		"BGPPeer metallb-system/peer":              {": not converted: BGP sessions announce addresses"},
		"AddressPool metallb-system/old":           {": not converted: AddressPool is MetalLB's deprecated pool kind"},
		"IPAddressPool metallb-system/(no name)":   {"metadata.name: not converted: the pool has no name"},
		"ServiceL2Status metallb-system/l2-status": {": not converted: ServiceL2Status is not address configuration"},
		"L2Advertisement metallb-system/unreadable": {
			"spec.ipAddressPoolSelectors: cannot be read",
			": not converted (which IPAddressPools it announces is unknown)",
		},
		"ConfigMap metallb-system/config": {": not converted: MetalLB's ConfigMap configuration"},
		"Service shop/web":                {": not converted: not a MetalLB object"},
	}
	for o, ws := range want {
		var mine []Warning
		for _, w := range res.Warnings {
			if w.Object == o {
				mine = append(mine, w)
			}
		}
		checkWarnings(t, mine, o, ws)
	}
	for _, w := range res.Warnings {
		if want[w.Object] == nil {
			t.Errorf("unexpected warning: %s", w)
		}
	}
	if !slices.IsSortedFunc(res.Warnings, func(a, b Warning) int { return strings.Compare(a.Object, b.Object) }) {
		t.Errorf("warnings not sorted by object")
	}
}

// TestConvertDeterministic: the order objects come in changes nothing.
func TestConvertDeterministic(t *testing.T) {
	objs := decodeString(t, `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: z, namespace: metallb-system}
spec: {addresses: [192.0.2.0/24, banana]}
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata: {name: y, namespace: metallb-system}
spec: {addresses: [198.51.100.0/24], serviceAllocation: {namespaces: [c, a, b]}}
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata: {name: all, namespace: metallb-system}
`)
	want := Convert(objs)
	slices.Reverse(objs)
	if got := Convert(objs); !reflect.DeepEqual(got, want) {
		t.Errorf("reversed input:\n%+v\nwant\n%+v", got, want)
	}
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		kinds    []string
		err      string
	}{
		{"multi-document, empty documents skipped", "---\nkind: A\n---\n\n---\nkind: B\n", []string{"A", "B"}, ""},
		{"a List's items", "apiVersion: v1\nkind: List\nitems:\n- {kind: A}\n- {kind: B}\n", []string{"A", "B"}, ""},
		{"JSON", `{"kind": "A"}`, []string{"A"}, ""},
		{"no kind", "metadata: {name: x}\n", nil, "test: document 1 has no kind"},
		{"not YAML", "kind: A\n---\n: [\n", nil, "test: document 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode(strings.NewReader(tc.in), "test")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, o.GetKind())
			}
			if !slices.Equal(kinds, tc.kinds) {
				t.Errorf("kinds %v, want %v", kinds, tc.kinds)
			}
		})
	}
}

// TestAdvertisementNamesWhatItAnnounces: the warning on an advertisement
// says which pools it announces, as MetalLB selects them.
func TestAdvertisementNamesWhatItAnnounces(t *testing.T) {
	const p = "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {name: p, namespace: metallb-system, labels: {adv: x}}\nspec: {addresses: [192.0.2.0/24]}\n---\n"
	for _, tc := range []struct{ name, spec, want string }{
		{"no pools named: every pool", "{}", "it announces every IPAddressPool"},
		{"no pools named, none given", "", "it announces every IPAddressPool"},
		{"by name, given or not", "{ipAddressPools: [p, other]}", "it announces IPAddressPools other, p"},
		{"by label", "{ipAddressPoolSelectors: [{matchLabels: {adv: x}}]}", "it announces IPAddressPools p"},
		{"by label, none given", "{ipAddressPoolSelectors: [{matchLabels: {adv: z}}]}", "the IPAddressPools its ipAddressPoolSelectors select, none of those given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := p + "apiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {name: a, namespace: metallb-system}\n"
			if tc.spec != "" {
				in += "spec: " + tc.spec + "\n"
			}
			if tc.name == "no pools named, none given" {
				in = in[len(p):]
			}
			var found bool
			for _, w := range Convert(decodeString(t, in)).Warnings {
				if w.Object == "L2Advertisement metallb-system/a" {
					found = true
					if !strings.Contains(w.Message, tc.want) {
						t.Errorf("warning %q, want it to say %q", w.Message, tc.want)
					}
				}
			}
			if !found {
				t.Error("no warning on the advertisement")
			}
		})
	}
}
