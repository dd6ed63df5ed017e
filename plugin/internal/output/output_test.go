package output

import (
	"bytes"
	"strings"
	"testing"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func print(t *testing.T, f func(*bytes.Buffer) error) string {
	t.Helper()
	var b bytes.Buffer
	if err := f(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestAllocationsTable(t *testing.T) {
	allocs := []*ipamv1.Allocation{
		{Ip: "10.0.0.1", Pool: "public", Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "web", Uid: "u1"}, AllocatedAt: "2026-12-01T10:00:00Z"},
		{Ip: "2001:db8::1", Pool: "public-v6", SharingKey: "k", Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "web-dual"}},
		{Ip: "2001:db8::2", Pool: "public-v6", Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "old", Uid: "u3"},
			AllocatedAt: "2026-12-01T11:00:00Z", KeptUntil: "2026-12-02T11:00:00Z"},
		{Ip: "192.0.2.9", Service: &ipamv1.ServiceRef{Namespace: "shop", Name: "far"}, AllocatedAt: "2026-12-01T11:00:00Z", KeptUntil: "2026-12-01T11:00:00Z"},
	}
	for _, tc := range []struct {
		name string
		all  bool
		wide bool
		want string
	}{
		{"namespaced", false, false, `
SERVICE    IP            POOL        STATE
web        10.0.0.1      public      Held
web-dual   2001:db8::1   public-v6   Held
old        2001:db8::2   public-v6   Kept until 2026-12-02T11:00:00Z
far        192.0.2.9     <none>      Kept until 2026-12-01T11:00:00Z
`},
		{"all namespaces", true, false, `
NAMESPACE   SERVICE    IP            POOL        STATE
shop        web        10.0.0.1      public      Held
shop        web-dual   2001:db8::1   public-v6   Held
shop        old        2001:db8::2   public-v6   Kept until 2026-12-02T11:00:00Z
shop        far        192.0.2.9     <none>      Kept until 2026-12-01T11:00:00Z
`},
		{"wide", false, true, `
SERVICE    IP            POOL        STATE                             SHARING KEY   ALLOCATED              UID
web        10.0.0.1      public      Held                              <none>        2026-12-01T10:00:00Z   u1
web-dual   2001:db8::1   public-v6   Held                              k             <none>                 <none>
old        2001:db8::2   public-v6   Kept until 2026-12-02T11:00:00Z   <none>        2026-12-01T11:00:00Z   u3
far        192.0.2.9     <none>      Kept until 2026-12-01T11:00:00Z   <none>        2026-12-01T11:00:00Z   <none>
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := print(t, func(b *bytes.Buffer) error { return PrintTable(b, Allocations(allocs, tc.all), tc.wide) })
			if want := strings.TrimPrefix(tc.want, "\n"); got != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestPoolsTable(t *testing.T) {
	pools := []*ipamv1.Pool{
		{Name: "public", Addresses: []string{"10.0.0.0/30", "2001:db8::/126"}, AutoAssign: true, HeldOutside: 2, Kept: 1,
			Ipv4: &ipamv1.FamilyUsage{Total: "4", Used: "2", Held: "1", Available: "2"}, Ipv6: &ipamv1.FamilyUsage{Total: "4", Used: "0", Held: "0", Available: "4"},
			Conditions: []*ipamv1.PoolCondition{
				{Type: "Ready", Status: "True", Reason: "Serving", Message: "The pool serves Services"},
				{Type: "Conflicting", Status: "False", Reason: "NoOverlap"},
			}},
		{Name: "manual", Addresses: []string{"10.1.0.0/24"}, Priority: 10,
			Ipv4: &ipamv1.FamilyUsage{Total: "256", Used: "0"}, Ipv6: &ipamv1.FamilyUsage{Total: "0", Used: "0"}}, // an ipam before 0.3.0: no held, available
	}
	got := print(t, func(b *bytes.Buffer) error { return PrintTable(b, Pools(pools), false) })
	want := `NAME     IPV4    IPV6     HELD OUTSIDE   KEPT   AUTO ASSIGN   READY     REASON
public   2/4     0/4      2              1      true          True      Serving
manual   0/256   <none>   0              0      false         Unknown   <none>
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	wide := print(t, func(b *bytes.Buffer) error { return PrintTable(b, Pools(pools), true) })
	for _, w := range []string{"PRIORITY   ADDRESSES", "10.0.0.0/30,2001:db8::/126", "The pool serves Services", "10   "} {
		if !strings.Contains(wide, w) {
			t.Errorf("wide lacks %q:\n%s", w, wide)
		}
	}
	// REASON IPV4 HELD, IPV4 AVAILABLE, IPV6 HELD, IPV6 AVAILABLE, PRIORITY
	for _, l := range strings.Split(wide, "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 0:
		case f[0] == "NAME":
			if h := strings.Join(f[10:18], " "); h != "IPV4 HELD IPV4 AVAILABLE IPV6 HELD IPV6 AVAILABLE" {
				t.Errorf("wide header %q", h)
			}
		case f[0] == "public" && strings.Join(f[8:12], " ") != "1 2 0 4",
			f[0] == "manual" && strings.Join(f[8:12], " ") != "<none> <none> <none> <none>":
			t.Errorf("wide row %q", f)
		}
	}
}

func TestExplanation(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp *ipamv1.ExplainServiceResponse
		want string
	}{
		{"pending", &ipamv1.ExplainServiceResponse{
			Decision: "The Service gets no IP: no pool can serve it.", Reason: "NoPoolSelected",
			Verdicts: []*ipamv1.PoolVerdict{
				{Pool: "public", Reason: "NamespaceMismatch", Message: "namespace shop is not selected"},
				{Pool: "tiny", Reason: "Exhausted", Message: "no free address"},
			},
		}, `Service:   shop/web
Decision:  The Service gets no IP: no pool can serve it.
Reason:    NoPoolSelected
IPs:       <none>
Pools:
  public  not eligible  NamespaceMismatch  namespace shop is not selected
  tiny    not eligible  Exhausted          no free address
`},
		{"serving a Gateway", &ipamv1.ExplainServiceResponse{Decision: "Holds it.", Reason: "Allocated", Ips: []string{"10.0.0.9"}, Gateway: "shop/gw"}, `Service:   shop/web
Gateway:   shop/gw (its spec.addresses and GatewayClass are part of the request; docs/gateway-api.md)
Decision:  Holds it.
Reason:    Allocated
IPs:       10.0.0.9
`},
		{"not served", &ipamv1.ExplainServiceResponse{Decision: "ipam does not serve this Service."}, `Service:   shop/web
Decision:  ipam does not serve this Service.
IPs:       <none>
`},
		{"dual stack", &ipamv1.ExplainServiceResponse{Decision: "Holds both.", Reason: "Allocated", Ips: []string{"10.0.0.1", "2001:db8::1"},
			Verdicts: []*ipamv1.PoolVerdict{{Pool: "public", Eligible: true, Reason: "Selected", Message: "chosen"}}}, `Service:   shop/web
Decision:  Holds both.
Reason:    Allocated
IPs:       10.0.0.1, 2001:db8::1
Pools:
  public  eligible  Selected  chosen
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := print(t, func(b *bytes.Buffer) error { return Explanation(b, "shop", "web", tc.resp) })
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in      string
		allowed []Format
		want    Format
		err     string
	}{
		{"", []Format{Table, JSON}, Table, ""},
		{"json", []Format{Table, JSON, YAML}, JSON, ""},
		{"wide", []Format{Table, Wide}, Wide, ""},
		{"wide", []Format{Table, JSON, YAML}, "", "-o wide: unknown output format; use one of json, yaml"},
		{"name", []Format{Table, Wide, JSON, YAML}, "", "use one of wide, json, yaml"},
	} {
		got, err := Parse(tc.in, tc.allowed...)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q): %v, want an error with %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestMessage(t *testing.T) {
	resp := &ipamv1.ListAllocationsResponse{Allocations: []*ipamv1.Allocation{{Ip: "10.0.0.1", Pool: "public", SharingKey: "k"}}}
	yaml := print(t, func(b *bytes.Buffer) error { return Message(b, YAML, resp) })
	want := "allocations:\n- ip: 10.0.0.1\n  pool: public\n  sharingKey: k\n"
	if yaml != want {
		t.Errorf("yaml:\n%s\nwant\n%s", yaml, want)
	}
	json := print(t, func(b *bytes.Buffer) error { return Message(b, JSON, resp) })
	wantJSON := "{\n  \"allocations\": [\n    {\n      \"ip\": \"10.0.0.1\",\n      \"pool\": \"public\",\n      \"sharingKey\": \"k\"\n    }\n  ]\n}\n"
	if json != wantJSON {
		t.Errorf("json:\n%s\nwant\n%s", json, wantJSON)
	}
}
