package decide

import (
	"strings"
	"testing"
	"time"
)

func TestParseReservations(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		wantErr string // substring; "" = valid
	}{
		{name: "one set", file: `
sets:
- name: partner-a
  addresses: {tags: {partner: a}}
  instances: {zones: [us-east-1a], tags: {node-group: egress}}
  order: tag:rank
`},
		{name: "by allocation IDs, allocate for the others", file: `
sets:
- name: b
  addresses: {allocationIDs: [eipalloc-0123]}
otherNodes: allocate
`},
		{name: "no sets: never allocate", file: `sets: []`},
		{name: "unknown field", file: "sets:\n- name: a\n  adresses: {tags: {x: y}}\n", wantErr: `unknown field "adresses"`},
		{name: "selects everything", file: "sets:\n- name: a\n", wantErr: "sets[0].addresses: selects every managed address"},
		{name: "bad name", file: "sets:\n- name: Partner_A\n  addresses: {tags: {x: y}}\n", wantErr: `sets[0].name: "Partner_A" is not a DNS label`},
		{name: "two sets one name", file: "sets:\n- name: a\n  addresses: {tags: {x: y}}\n- name: a\n  addresses: {tags: {x: z}}\n", wantErr: `sets[1].name: "a" names two sets`},
		{name: "not an allocation ID", file: "sets:\n- name: a\n  addresses: {allocationIDs: [203.0.113.7]}\n", wantErr: `sets[0].addresses.allocationIDs: "203.0.113.7" is not an allocation ID`},
		{name: "eipd's own tag", file: "sets:\n- name: a\n  addresses: {tags: {ipledger.io/node: n1}}\n", wantErr: "ipledger.io/node is eipd's own tag"},
		{name: "bad order", file: "sets:\n- name: a\n  addresses: {tags: {x: y}}\n  order: newest\n", wantErr: `sets[0].order: "newest"; want allocated-at or tag:<key>`},
		{name: "bad otherNodes", file: "otherNodes: always\n", wantErr: `otherNodes: "always" is neither none nor allocate`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseReservations([]byte(tt.file))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("error %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			case tt.wantErr == "" && !r.Configured():
				t.Fatal("a parsed file must count as configured")
			}
		})
	}
}

func TestReservationsMatch(t *testing.T) {
	r, err := ParseReservations([]byte(`
sets:
- name: egress-a
  addresses: {tags: {partner: x, zone: a}}
  instances: {zones: [us-east-1a], tags: {node-group: egress}}
- name: egress
  addresses: {tags: {partner: x}}
  instances: {tags: {node-group: egress}}
- name: pinned
  addresses: {allocationIDs: [eipalloc-7], tags: {pinned: "yes"}}
  instances: {tags: {node-group: pinned}}
`))
	if err != nil {
		t.Fatal(err)
	}
	addr := func(id string, tags map[string]string) Address { return Address{AllocationID: id, Tags: tags} }
	for _, tt := range []struct {
		a    Address
		want string
	}{
		{addr("eipalloc-1", map[string]string{"partner": "x", "zone": "a"}), "egress-a"}, // first set that selects it
		{addr("eipalloc-2", map[string]string{"partner": "x", "zone": "b"}), "egress"},
		{addr("eipalloc-3", map[string]string{"partner": "y"}), ""},
		{addr("eipalloc-7", map[string]string{"pinned": "yes"}), "pinned"},
		{addr("eipalloc-8", map[string]string{"pinned": "yes"}), ""}, // not one of the IDs
		{addr("eipalloc-7", nil), ""},                                // the ID, but not the tag
	} {
		if got := r.AddressSet(tt.a); got != tt.want {
			t.Errorf("AddressSet(%s %v) = %q, want %q", tt.a.AllocationID, tt.a.Tags, got, tt.want)
		}
		if got := r.NeverReleased(tt.a); got != (tt.want != "") {
			t.Errorf("NeverReleased(%s) = %v", tt.a.AllocationID, got)
		}
	}
	inst := func(zone string, tags map[string]string) Instance { return Instance{ID: "i-1", Zone: zone, Tags: tags} }
	for _, tt := range []struct {
		inst Instance
		want string
	}{
		{inst("us-east-1a", map[string]string{"node-group": "egress"}), "egress-a"},
		{inst("us-east-1b", map[string]string{"node-group": "egress"}), "egress"},
		{inst("us-east-1a", map[string]string{"node-group": "pinned"}), "pinned"},
		{inst("us-east-1a", map[string]string{"node-group": "web"}), ""},
		{inst("us-east-1a", nil), ""},
	} {
		if got := r.InstanceSet(tt.inst); got != tt.want {
			t.Errorf("InstanceSet(%s %v) = %q, want %q", tt.inst.Zone, tt.inst.Tags, got, tt.want)
		}
	}
}

func TestChooseFromReservedSet(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r, err := ParseReservations([]byte(`
sets:
- name: allow
  addresses: {tags: {allow: "true"}}
- name: ranked
  addresses: {tags: {ranked: "true"}}
  order: tag:rank
`))
	if err != nil {
		t.Fatal(err)
	}
	set := func(id, ip string, age int, tags ...string) Address {
		a := Address{AllocationID: id, PublicIP: ip, Tags: map[string]string{}}
		if age >= 0 {
			a.AllocatedAt = t0.Add(time.Duration(age) * time.Minute)
		}
		for i := 0; i+1 < len(tags); i += 2 {
			a.Tags[tags[i]] = tags[i+1]
		}
		return a
	}
	allow := []Address{
		set("eipalloc-c", "198.51.100.3", 2, "allow", "true"),
		set("eipalloc-a", "198.51.100.1", 1, "allow", "true"),
		set("eipalloc-b", "198.51.100.10", -1, "allow", "true"), // no allocated-at: after those with one
		set("eipalloc-o", "198.51.100.9", 0),                    // an orphan in no set
	}
	tagged := func(a Address, node string) Address { a.Node = node; return a }
	tests := []struct {
		name       string
		in         Input
		wantAction Action
		wantAddr   string
	}{
		{name: "first of the set's order", in: Input{Node: "n1", Set: "allow", Addresses: allow}, wantAction: ClaimOrphan, wantAddr: "eipalloc-a"},
		{name: "second waiter takes the second", in: Input{Node: "n2", Set: "allow", Ahead: 1, Addresses: allow}, wantAction: ClaimOrphan, wantAddr: "eipalloc-c"},
		{name: "without allocated-at last", in: Input{Node: "n3", Set: "allow", Ahead: 2, Addresses: allow}, wantAction: ClaimOrphan, wantAddr: "eipalloc-b"},
		{name: "more waiters than addresses: wait, never allocate, never the orphan outside the set",
			in: Input{Node: "n4", Set: "allow", Ahead: 3, Addresses: allow}, wantAction: Wait},
		{name: "taken addresses are not free", in: Input{Node: "n2", Set: "allow", Addresses: []Address{
			tagged(allow[1], "n1"), allow[0], allow[3]}}, wantAction: ClaimOrphan, wantAddr: "eipalloc-c"},
		{name: "unavailable (another Node claims it) is not free", in: Input{Node: "n2", Set: "allow", Addresses: allow,
			Unavailable: map[string]bool{"eipalloc-a": true}}, wantAction: ClaimOrphan, wantAddr: "eipalloc-c"},
		{name: "an empty set: wait", in: Input{Node: "n1", Set: "ranked", Addresses: allow}, wantAction: Wait},
		{name: "a Node keeps what it has, even outside its set", in: Input{Node: "n1", Set: "allow", Addresses: []Address{
			tagged(allow[3], "n1"), allow[1]}}, wantAction: UseTagged, wantAddr: "eipalloc-o"},
		{name: "order by tag, integers numerically, untagged last", in: Input{Node: "n1", Set: "ranked", Addresses: []Address{
			set("eipalloc-1", "203.0.113.1", 0, "ranked", "true"),
			set("eipalloc-2", "203.0.113.2", 0, "ranked", "true", "rank", "10"),
			set("eipalloc-3", "203.0.113.3", 0, "ranked", "true", "rank", "9"),
		}}, wantAction: ClaimOrphan, wantAddr: "eipalloc-3"},
		{name: "no set: an orphan outside every set", in: Input{Node: "n1", Reservations: r, Addresses: allow}, wantAction: ClaimOrphan, wantAddr: "eipalloc-o"},
		{name: "no set, no orphan, otherNodes none: wait", in: Input{Node: "n1", Reservations: r, Addresses: allow[:3]}, wantAction: Wait},
		{name: "no file: allocate as ever", in: Input{Node: "n1", Addresses: nil}, wantAction: Allocate},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.in
			if in.Set != "" {
				in.Reservations = r
			}
			p := Choose(in)
			if p.Action != tt.wantAction || p.Address.AllocationID != tt.wantAddr {
				t.Fatalf("Choose = %v %s (%s), want %v %s", p.Action, p.Address.AllocationID, p.Reason, tt.wantAction, tt.wantAddr)
			}
			if p.Action == Wait && p.Reason == "" {
				t.Fatal("a wait must say why")
			}
		})
	}
	allocating := r
	allocating.OtherNodes = OtherNodesAllocate
	if p := Choose(Input{Node: "n1", Reservations: allocating, Addresses: allow[:3]}); p.Action != Allocate {
		t.Fatalf("otherNodes: allocate, nothing outside the sets free: %v, want Allocate", p.Action)
	}
}

func TestAhead(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ws := []Waiter{{"c", t0}, {"b", t0.Add(time.Second)}, {"a", t0.Add(time.Second)}, {"d", t0.Add(time.Minute)}}
	for _, tt := range []struct {
		w    Waiter
		want int
	}{
		{ws[0], 0}, {ws[2], 1}, {ws[1], 2}, {ws[3], 3},
		{Waiter{"new", t0.Add(time.Hour)}, 4}, // not among them yet: behind all
	} {
		if got := Ahead(tt.w, ws); got != tt.want {
			t.Errorf("Ahead(%s) = %d, want %d", tt.w.Node, got, tt.want)
		}
	}
}

// FuzzChooseFromReservations: whatever file parses, Choose for a Node of
// any of its sets takes only a free address of that set or waits, and
// never allocates.
func FuzzChooseFromReservations(f *testing.F) {
	f.Add("sets:\n- name: a\n  addresses: {tags: {k: v}}\n  order: tag:rank\n", "v", "3", 1)
	f.Add("sets:\n- name: a\n  addresses: {allocationIDs: [eipalloc-1]}\n- name: b\n  addresses: {tags: {k: v}}\n", "v", "x", 0)
	f.Fuzz(func(t *testing.T, file, tagValue, rank string, ahead int) {
		r, err := ParseReservations([]byte(file))
		if err != nil || len(r.Sets) == 0 || ahead < 0 {
			return
		}
		var addrs []Address
		for i, node := range []string{"", "", "other", ""} {
			addrs = append(addrs, Address{AllocationID: "eipalloc-" + string(rune('1'+i)), PublicIP: "192.0.2." + string(rune('1'+i)),
				Node: node, Tags: map[string]string{"k": tagValue, "rank": rank}})
		}
		for _, s := range r.Sets {
			p := Choose(Input{Node: "n1", Reservations: r, Set: s.Name, Ahead: ahead, Addresses: addrs})
			switch p.Action {
			case Wait:
			case ClaimOrphan:
				if r.AddressSet(p.Address) != s.Name || p.Address.Node != "" || p.Address.Associated() {
					t.Fatalf("set %s: took %+v, not a free address of the set", s.Name, p.Address)
				}
			default:
				t.Fatalf("set %s: %v, want ClaimOrphan or Wait", s.Name, p.Action)
			}
		}
	})
}
