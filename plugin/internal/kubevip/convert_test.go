package kubevip

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

// TestServingKey is kube-vip-cloud-provider's ranking (pkg/provider,
// discoverPool and getConfig): the namespace's cidr key, then the global
// cidr, then the namespace's range, then the global range; the first key
// present wins even when kube-vip cannot read it.
func TestServingKey(t *testing.T) {
	tests := []struct {
		name string
		data map[string]string
		ns   string
		want string
	}{
		{name: "own cidr over global", data: map[string]string{"cidr-a": "x", "cidr-global": "y"}, ns: "a", want: "cidr-a"},
		{name: "global cidr for another namespace", data: map[string]string{"cidr-a": "x", "cidr-global": "y"}, ns: "b", want: "cidr-global"},
		{name: "global cidr over own range", data: map[string]string{"range-a": "x", "cidr-global": "y"}, ns: "a", want: "cidr-global"},
		{name: "own range over global range", data: map[string]string{"range-a": "x", "range-global": "y"}, ns: "a", want: "range-a"},
		{name: "own cidr over own range", data: map[string]string{"range-a": "x", "cidr-a": "y"}, ns: "a", want: "cidr-a"},
		{name: "global range", data: map[string]string{"range-global": "y"}, ns: "a", want: "range-global"},
		{name: "an empty value still wins", data: map[string]string{"cidr-a": "", "cidr-global": "y"}, ns: "a", want: "cidr-a"},
		{name: "nothing", data: map[string]string{"allow-share-a": "true"}, ns: "a", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ServingKey(tt.data, tt.ns); got != tt.want {
				t.Errorf("ServingKey(%v, %q) = %q, want %q", tt.data, tt.ns, got, tt.want)
			}
		})
	}
}

func TestShareKey(t *testing.T) {
	tests := []struct {
		data  map[string]string
		ns    string
		key   string
		share bool
	}{
		{data: map[string]string{"allow-share-global": "true", "allow-share-a": "false"}, ns: "a", key: "allow-share-a"},
		{data: map[string]string{"allow-share-global": "true", "allow-share-a": "false"}, ns: "b", key: "allow-share-global", share: true},
		{data: map[string]string{"allow-share-a": "1"}, ns: "a", key: "allow-share-a", share: true},
		{data: map[string]string{"allow-share-a": "yes"}, ns: "a", key: "allow-share-a"},
		{data: map[string]string{}, ns: "a"},
	}
	for _, tt := range tests {
		key, share := ShareKey(tt.data, tt.ns)
		if key != tt.key || share != tt.share {
			t.Errorf("ShareKey(%v, %q) = %q, %t; want %q, %t", tt.data, tt.ns, key, share, tt.key, tt.share)
		}
	}
}

func TestParsePool(t *testing.T) {
	tests := []struct {
		name     string
		key, val string
		skipEnds bool
		want     []string
		skip     bool
		note     string
		wantErr  string
	}{
		{name: "cidr", key: "cidr-global", val: "192.168.0.220/29", want: []string{"192.168.0.216/29"}, note: "host bits"},
		{name: "cidrs of two families", key: "cidr-a", val: "192.168.0.200/30,2001::10/127", want: []string{"192.168.0.200/30", "2001::10/127"}},
		{name: "ipv6 cidr loses its first address", key: "cidr-a", val: "2001:db8::/120", want: []string{"2001:db8::/120"}, note: "Subnet-Router anycast"},
		{name: "skip-end-ips: merged as kube-vip merges them", key: "cidr-a", val: "10.0.0.0/26,10.0.0.64/26", skipEnds: true,
			want: []string{"10.0.0.0/25"}, skip: true},
		{name: "skip-end-ips: a /31 keeps both", key: "cidr-a", val: "10.0.0.0/31", skipEnds: true, want: []string{"10.0.0.0/31"}, skip: true},
		{name: "skip-end-ips and a wide ipv6 cidr", key: "cidr-a", val: "10.0.0.0/29,2001:db8::/64", skipEnds: true,
			want: []string{"10.0.0.0/29", "2001:db8::/64"}, note: "exclude"},
		{name: "skip-end-ips does not touch ranges", key: "range-a", val: "10.0.0.1-10.0.0.9", skipEnds: true, want: []string{"10.0.0.1-10.0.0.9"}},
		{name: "ranges", key: "range-global", val: "192.168.0.10-192.168.0.11,2001::10-2001::11", want: []string{"192.168.0.10-192.168.0.11", "2001::10-2001::11"}},
		{name: "one-address range", key: "range-a", val: "10.0.0.5-10.0.0.5", want: []string{"10.0.0.5/32"}},
		{name: "repeated entry written once", key: "range-a", val: "10.0.0.1-10.0.0.2,10.0.0.1-10.0.0.2", want: []string{"10.0.0.1-10.0.0.2"}, note: "repeats"},
		{name: "reversed range is dropped, as kube-vip drops it", key: "range-a", val: "10.0.0.9-10.0.0.1,10.0.0.20-10.0.0.21", want: []string{"10.0.0.20-10.0.0.21"}, note: "ignores it"},
		{name: "only a reversed range", key: "range-a", val: "10.0.0.9-10.0.0.1", wantErr: "no address"},
		{name: "DHCP", key: "cidr-a", val: "0.0.0.0/32", wantErr: "DHCP"},
		{name: "empty", key: "cidr-a", val: "", wantErr: "empty"},
		{name: "a space kube-vip cannot read", key: "cidr-a", val: "10.0.0.0/24, 10.0.1.0/24", wantErr: "cannot read"},
		{name: "range without dash", key: "range-a", val: "10.0.0.1", wantErr: "cannot read"},
		{name: "mapped", key: "cidr-a", val: "::ffff:10.0.0.0/120", wantErr: "IPv4-mapped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, skip, notes, err := parsePool(tt.key, tt.val, tt.skipEnds)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got.Addresses, tt.want) || skip != tt.skip {
				t.Fatalf("= %q skip %t, %v; want %q skip %t", got.Addresses, skip, err, tt.want, tt.skip)
			}
			if joined := strings.Join(notes, "\n"); tt.note == "" && joined != "" || !strings.Contains(joined, tt.note) {
				t.Errorf("notes %q, want one saying %q", notes, tt.note)
			}
		})
	}
}

func TestSkipEndsAsExclusions(t *testing.T) {
	got, skip, _, err := parsePool("cidr-a", "10.0.0.8/29,2001:db8::/64", true)
	if err != nil || skip {
		t.Fatalf("skip %t, %v", skip, err)
	}
	if want := []string{"10.0.0.8", "10.0.0.15"}; !reflect.DeepEqual(got.Exclude, want) {
		t.Errorf("exclude = %q, want %q (the IPv4 ends only: kube-vip keeps the IPv6 ones)", got.Exclude, want)
	}
}

func configMap(t *testing.T, data string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kubevip, namespace: kube-system}\ndata:\n"+data), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestConvert(t *testing.T) {
	res := Convert([]*unstructured.Unstructured{configMap(t, `
  cidr-global: 10.1.0.0/24
  range-global: 10.2.0.1-10.2.0.9
  cidr-team-a: 10.3.0.0/28
  range-team-a: 10.4.0.1-10.4.0.9
  range-team-b: 10.5.0.1-10.5.0.9
  cidr-team-c: ""
  allow-share-global: "true"
  search-order: desc
  interface-global: eth1
  vip-mode: arp
`)})
	var names []string
	byName := map[string]metallb.IPPool{}
	for _, p := range res.Pools {
		names = append(names, p.Metadata.Name)
		byName[p.Metadata.Name] = p
	}
	if want := []string{"kube-vip-global", "kube-vip-team-a"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("pools %q, want %q", names, want)
	}
	g := byName["kube-vip-global"]
	if !reflect.DeepEqual(g.Spec.Addresses, []string{"10.1.0.0/24"}) || !g.Spec.AvoidBuggyIPs || !g.Spec.AutoAssign {
		t.Errorf("global spec %+v", g.Spec)
	}
	// team-a is served by its own pool, team-c by none (its key wins and
	// is empty): kube-vip never falls back to the global pool for them.
	a := g.Spec.Allocation
	if a == nil || len(a.NamespaceSelectors) != 1 || !reflect.DeepEqual(a.NamespaceSelectors[0].MatchExpressions[0].Values, []string{"team-a", "team-c"}) ||
		a.NamespaceSelectors[0].MatchExpressions[0].Operator != "NotIn" || a.NamespaceSelectors[0].MatchExpressions[0].Key != "kubernetes.io/metadata.name" {
		t.Errorf("global allocation %+v, want a NotIn [team-a team-c] namespace selector", a)
	}
	ta := byName["kube-vip-team-a"]
	if !reflect.DeepEqual(ta.Spec.Allocation.Namespaces, []string{"team-a"}) || ta.Metadata.Labels[metallb.LabelConvertedFrom] != ConvertedFrom {
		t.Errorf("team-a %+v", ta)
	}
	if !reflect.DeepEqual(res.NotConverted, []string{"ConfigMap kube-system/kubevip: cidr-team-c"}) {
		t.Errorf("not converted %q", res.NotConverted)
	}
	all := metallb.Warnings(res.Warnings)
	for _, want := range []string{
		"range-global: not converted: kube-vip-cloud-provider reads cidr-global first",
		"range-team-a: not converted: kube-vip-cloud-provider reads cidr-team-a first",
		"range-team-b: not converted: kube-vip-cloud-provider reads cidr-global first",
		"allow-share-global: not carried over",
		"search-order: not carried over",
		"interface-global: not carried over",
		"vip-mode: not carried over",
		"cidr-team-c: not converted",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
}

func TestConvertOverlapAndObjects(t *testing.T) {
	other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"name": "s", "namespace": "x"}}}
	res := Convert([]*unstructured.Unstructured{configMap(t, `
  cidr-a: 10.0.0.0/29
  cidr-b: 10.0.0.4/30
`), other})
	all := metallb.Warnings(res.Warnings)
	for _, want := range []string{"Service x/s: not converted: not a ConfigMap", "shares addresses (10.0.0.4, …) with IPPool kube-vip-a"} {
		if !strings.Contains(all, want) {
			t.Errorf("warnings lack %q:\n%s", want, all)
		}
	}
	if res := Convert([]*unstructured.Unstructured{configMap(t, "  cidr-a: 10.0.0.0/29\n"), configMap(t, "  cidr-b: 10.0.1.0/29\n")}); len(res.Pools) != 0 || len(res.NotConverted) != 2 {
		t.Errorf("two ConfigMaps: %d pools, not converted %q; want none and both", len(res.Pools), res.NotConverted)
	}
}
