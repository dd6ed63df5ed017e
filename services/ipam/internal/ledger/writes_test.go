package ledger

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

// describe renders a shard as "name e<epoch> <term> a=[ip svc …] r=[ip …] i=[name@from …]".
func describe(s Shard) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s e%d %s a=[", s.Name, s.Epoch, s.Term)
	for i, a := range s.Allocations {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s %s/%s", a.IP, a.Service.Key(), a.Pool)
	}
	b.WriteString("] r=[")
	for i, r := range s.Reservations {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s %s", r.IP, r.Note)
	}
	b.WriteString("] i=[")
	for i, e := range s.Index {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s@%s", e.Name, e.From)
	}
	b.WriteString("]")
	return b.String()
}

func res(ip, note string) Reservation {
	return Reservation{IP: netip.MustParseAddr(ip), Note: note, CreatedAt: t0}
}

// twoShards is a head holding 10.0.0.0/24 and below and ipledger-ledger-1
// holding 10.0.1.0 on, both of epoch 1, term "old".
func twoShards() Layout {
	return Layout{
		{Name: HeadName, Epoch: 1, Term: "old", Index: []IndexEntry{{Name: ShardName(1), From: netip.MustParseAddr("10.0.1.0")}},
			Allocations: []Allocation{alloc("10.0.0.1", "p", "a/one")}, Reservations: []Reservation{res("10.0.0.9", "dns")}},
		{Name: ShardName(1), Epoch: 1, Term: "old",
			Allocations: []Allocation{alloc("10.0.1.1", "p", "a/two"), alloc("10.0.1.2", "p", "a/three")}},
	}
}

// bigShard is a head of n allocations from 10.0.0.0.
func bigShard(n int) Shard {
	s := Shard{Name: HeadName, Epoch: 1, Term: "old"}
	for i := range n {
		s.Allocations = append(s.Allocations, alloc(netip.AddrFrom4([4]byte{10, 0, byte(i / 200), byte(i % 200)}).String(), "p", fmt.Sprintf("a/s%d", i)))
	}
	return s
}

func TestPlanCommit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layout Layout
		ch     Change
		// want describes each write, in order; encoded lists the
		// positions whose write carries its data.
		want    []string
		encoded []int
	}{
		{"allocate in the head", twoShards(), Change{Allocate: []Allocation{alloc("10.0.0.2", "p", "b/new")}},
			[]string{"ipledger-ledger-0 e2 new a=[10.0.0.1 a/one/p 10.0.0.2 b/new/p] r=[10.0.0.9 dns] i=[ipledger-ledger-1@10.0.1.0]"}, []int{0}},
		{"release in the second shard leaves the head alone", twoShards(), Change{Release: []Allocation{alloc("10.0.1.1", "x", "a/two")}},
			[]string{"ipledger-ledger-1 e2 new a=[10.0.1.2 a/three/p] r=[] i=[]"}, []int{1}},
		{"allocating again replaces the entry of the same IP and Service, kept in order", twoShards(), Change{Allocate: []Allocation{alloc("10.0.1.1", "q", "a/two")}},
			[]string{"ipledger-ledger-1 e2 new a=[10.0.1.1 a/two/q 10.0.1.2 a/three/p] r=[] i=[]"}, []int{1}},
		{"release and allocate in one change", twoShards(), Change{Release: []Allocation{alloc("10.0.0.1", "p", "a/one")}, Allocate: []Allocation{alloc("10.0.1.7", "p", "c/c")}},
			[]string{"ipledger-ledger-0 e2 new a=[] r=[10.0.0.9 dns] i=[ipledger-ledger-1@10.0.1.0]", "ipledger-ledger-1 e2 new a=[10.0.1.1 a/two/p 10.0.1.2 a/three/p 10.0.1.7 c/c/p] r=[] i=[]"}, []int{0, 1}},
		{"reserve replaces the reservation of the IP", twoShards(), Change{Reserve: []Reservation{res("10.0.0.9", "ntp"), res("10.0.1.9", "lab")}},
			[]string{"ipledger-ledger-0 e2 new a=[10.0.0.1 a/one/p] r=[10.0.0.9 ntp] i=[ipledger-ledger-1@10.0.1.0]", "ipledger-ledger-1 e2 new a=[10.0.1.1 a/two/p 10.0.1.2 a/three/p] r=[10.0.1.9 lab] i=[]"}, []int{0, 1}},
		{"unreserve, then reserve again", twoShards(), Change{Unreserve: []netip.Addr{netip.MustParseAddr("10.0.0.9")}, Reserve: []Reservation{res("10.0.0.9", "back")}},
			[]string{"ipledger-ledger-0 e2 new a=[10.0.0.1 a/one/p] r=[10.0.0.9 back] i=[ipledger-ledger-1@10.0.1.0]"}, []int{0}},
		{"releasing what is not there still rewrites the shard", twoShards(), Change{Release: []Allocation{alloc("10.0.1.5", "p", "z/z")}},
			[]string{"ipledger-ledger-1 e2 new a=[10.0.1.1 a/two/p 10.0.1.2 a/three/p] r=[] i=[]"}, []int{1}},
		{"empty change writes nothing", twoShards(), Change{}, []string{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprint(tc.layout)
			p := layOutCommit(tc.layout, tc.ch, 2, "new", DefaultShardLimit, 1, nil)
			if fmt.Sprint(tc.layout) != before {
				t.Fatalf("layOutCommit changed its layout")
			}
			got := []string{}
			var encoded []int
			for _, w := range p.writes {
				got = append(got, describe(w.shard))
				if w.data != nil {
					if !reflect.DeepEqual(w.data, Encode(w.shard)) {
						t.Errorf("write of %s carries data that is not its shard encoded", w.shard.Name)
					}
					encoded = append(encoded, w.pos)
				}
				if tc.layout[w.pos].Name != w.shard.Name {
					t.Errorf("write of %s at position %d, which is %s", w.shard.Name, w.pos, tc.layout[w.pos].Name)
				}
			}
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(encoded, tc.encoded) {
				t.Fatalf("writes:\n%s\nwant:\n%s\nencoded %v, want %v", strings.Join(got, "\n"), strings.Join(tc.want, "\n"), encoded, tc.encoded)
			}
			if len(p.creates) != 0 || p.index != nil || p.maxNum != 1 {
				t.Fatalf("creates %d, index %v, maxNum %d: nothing was split", len(p.creates), p.index, p.maxNum)
			}
		})
	}
}

func TestPlanCommitSplits(t *testing.T) {
	big := bigShard(600)
	limit := Size(Encode(big)) / 2
	second := netip.MustParseAddr("10.1.0.0")
	for _, tc := range []struct {
		name   string
		layout Layout
		ch     Change
		// wantWrites are the names of the shards written, in order.
		wantWrites []string
	}{
		{"the head outgrows the limit", Layout{big}, Change{Allocate: []Allocation{alloc("10.0.9.1", "p", "b/b")}},
			[]string{HeadName}},
		{"another shard outgrows it: the head is written for its index alone",
			Layout{{Name: HeadName, Epoch: 1, Term: "old", Index: []IndexEntry{{Name: ShardName(4), From: second}},
				Allocations: []Allocation{alloc("10.0.0.1", "p", "h/h")}},
				{Name: ShardName(4), Epoch: 1, Term: "old", Allocations: shifted(big.Allocations, 1)}},
			Change{Allocate: []Allocation{alloc("10.1.9.1", "p", "b/b")}},
			[]string{HeadName, ShardName(4)}},
		{"another shard outgrows it while the head is edited too: the head's encoding is stale",
			Layout{{Name: HeadName, Epoch: 1, Term: "old", Index: []IndexEntry{{Name: ShardName(4), From: second}},
				Allocations: []Allocation{alloc("10.0.0.1", "p", "h/h")}},
				{Name: ShardName(4), Epoch: 1, Term: "old", Allocations: shifted(big.Allocations, 1)}},
			Change{Allocate: []Allocation{alloc("10.1.9.1", "p", "b/b")}, Release: []Allocation{alloc("10.0.0.1", "p", "h/h")}},
			[]string{HeadName, ShardName(4)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := layOutCommit(tc.layout, tc.ch, 2, "new", limit, 4, nil)
			var names []string
			for _, w := range p.writes {
				names = append(names, w.shard.Name)
				if w.data != nil {
					t.Errorf("%s: a split shard and the head that lists new shards are encoded when written", w.shard.Name)
				}
			}
			if !reflect.DeepEqual(names, tc.wantWrites) {
				t.Fatalf("writes %v, want %v", names, tc.wantWrites)
			}
			if len(p.creates) == 0 || p.maxNum != 4+len(p.creates) {
				t.Fatalf("%d shards created, maxNum %d", len(p.creates), p.maxNum)
			}
			head := p.writes[0].shard
			if !reflect.DeepEqual(head.Index, p.index) || len(p.index) != len(tc.layout)-1+len(p.creates) {
				t.Fatalf("head index %v, laid-out index %v", head.Index, p.index)
			}
			if head.Epoch != 2 || head.Term != "new" {
				t.Fatalf("head %s", describe(head))
			}
			// Every created shard is listed, in order, and no entry is
			// lost or duplicated.
			total := 0
			for k, s := range p.creates {
				if s.Name != ShardName(5+k) || s.Epoch != 2 || s.Term != "new" || s.Index != nil {
					t.Errorf("created %s", describe(s))
				}
				if !indexed(p.index, s.Name) {
					t.Errorf("%s is not in the index %v", s.Name, p.index)
				}
				total += len(s.Allocations)
			}
			for _, w := range p.writes {
				total += len(w.shard.Allocations)
			}
			want := len(tc.ch.Allocate) - len(tc.ch.Release)
			for _, s := range tc.layout {
				want += len(s.Allocations)
			}
			if total != want {
				t.Fatalf("%d allocations after the split, want %d", total, want)
			}
			for i := 1; i < len(p.index); i++ {
				if p.index[i-1].From.Compare(p.index[i].From) >= 0 {
					t.Fatalf("index not sorted: %v", p.index)
				}
			}
		})
	}
}

// shifted returns allocs moved from 10.0.x.y to 10.<by>.x.y.
func shifted(allocs []Allocation, by byte) []Allocation {
	out := make([]Allocation, len(allocs))
	for i, a := range allocs {
		b := a.IP.As4()
		b[1] += by
		a.IP = netip.AddrFrom4(b)
		out[i] = a
	}
	return out
}

func indexed(index []IndexEntry, name string) bool {
	for _, e := range index {
		if e.Name == name {
			return true
		}
	}
	return false
}

func TestCommitPlanRename(t *testing.T) {
	big := bigShard(600)
	p := layOutCommit(Layout{big}, Change{Allocate: []Allocation{alloc("10.0.9.1", "p", "b/b")}}, 2, "new", Size(Encode(big))/2, 0, nil)
	if len(p.creates) < 2 {
		t.Fatalf("%d shards created, want 2 or more", len(p.creates))
	}
	old := p.creates[1].Name
	p.rename(1, ShardName(99))
	if p.creates[1].Name != ShardName(99) || indexed(p.index, old) || !indexed(p.index, ShardName(99)) {
		t.Fatalf("after rename: created %s, index %v", p.creates[1].Name, p.index)
	}
	if !reflect.DeepEqual(p.writes[0].shard.Index, p.index) {
		t.Fatalf("the head publishes %v, the writes %v", p.writes[0].shard.Index, p.index)
	}
}

func TestRelayout(t *testing.T) {
	ls := func(name string) *liveShard { return &liveShard{Shard: Shard{Name: name}} }
	from := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	for _, tc := range []struct {
		name    string
		shards  []*liveShard
		created []*liveShard
		index   []IndexEntry
		want    []string
	}{
		{"created before the old", []*liveShard{ls(HeadName), ls(ShardName(1))}, []*liveShard{ls(ShardName(2))},
			[]IndexEntry{{ShardName(2), from("10.0.0.5")}, {ShardName(1), from("10.0.1.0")}}, []string{HeadName, ShardName(2), ShardName(1)}},
		{"created after the old", []*liveShard{ls(HeadName), ls(ShardName(1))}, []*liveShard{ls(ShardName(3)), ls(ShardName(4))},
			[]IndexEntry{{ShardName(1), from("10.0.1.0")}, {ShardName(3), from("10.0.2.0")}, {ShardName(4), from("10.0.3.0")}},
			[]string{HeadName, ShardName(1), ShardName(3), ShardName(4)}},
		{"a head alone gains one", []*liveShard{ls(HeadName)}, []*liveShard{ls(ShardName(7))},
			[]IndexEntry{{ShardName(7), from("10.0.2.0")}}, []string{HeadName, ShardName(7)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range relayout(tc.shards, tc.created, tc.index) {
				got = append(got, s.Name)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("relayout = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCheckKeys(t *testing.T) {
	for _, tc := range []struct {
		name, shard string
		data        map[string]string
		key, err    string // "" err: accepted
	}{
		{"every key of the head", HeadName, map[string]string{"format": Format, "epoch": "1", "term": "t", "shards.jsonl": "", "allocations.jsonl": "", "reservations.jsonl": ""}, "", ""},
		{"format alone", ShardName(3), map[string]string{"format": Format}, "", ""},
		{"no data", HeadName, nil, "format", "missing; this ConfigMap is not a ledger shard"},
		{"another format", HeadName, map[string]string{"format": "v9"}, "format", `"v9" is not "ipledger.io/ledger/v1" (written by a newer ipam?)`},
		{"the format is checked before the keys", HeadName, map[string]string{"format": "v9", "x": ""}, "format", `"v9" is not "ipledger.io/ledger/v1" (written by a newer ipam?)`},
		{"unknown key", HeadName, map[string]string{"format": Format, "notes": ""}, "notes", "unknown key"},
		{"shards outside the head", ShardName(3), map[string]string{"format": Format, "shards.jsonl": ""}, "shards.jsonl", "only ipledger-ledger-0 lists shards"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, err := checkKeys(tc.shard, tc.data)
			if key != tc.key || fmt.Sprint(err) != map[bool]string{true: "<nil>", false: tc.err}[tc.err == ""] {
				t.Fatalf("checkKeys = %q, %v; want %q, %q", key, err, tc.key, tc.err)
			}
		})
	}
}

func TestDecodeEpoch(t *testing.T) {
	for _, tc := range []struct {
		data map[string]string
		want uint64
		err  string
	}{
		{map[string]string{}, 0, ""},
		{map[string]string{"epoch": "0"}, 0, ""},
		{map[string]string{"epoch": "42"}, 42, ""},
		{map[string]string{"epoch": ""}, 0, `"" is not a decimal counter`},
		{map[string]string{"epoch": "042"}, 0, `"042" is not a decimal counter`},
	} {
		got, err := decodeEpoch(tc.data)
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("decodeEpoch(%v) = %d, %v; want %d, %q", tc.data, got, err, tc.want, tc.err)
		}
	}
}

func TestParseAllocation(t *testing.T) {
	for _, tc := range []struct {
		line string
		want string // describe of a shard holding it, or the error
	}{
		{`{"ip":"10.0.0.1","pool":"p","service":"a/b","uid":"u","sharingKey":"k","allocatedAt":"2026-11-30T12:00:00Z"}`, "10.0.0.1 a/b/p"},
		{`{"ip":"2001:db8::1","pool":"p","service":"a/b","allocatedAt":""}`, "2001:db8::1 a/b/p"},
		{`{"ip":"10.0.0.1","pool":"","service":"a/b","allocatedAt":""}`, "pool is empty"},
		{`{"ip":"10.0.0.1","pool":"p","service":"b","allocatedAt":""}`, `service: "b" is not namespace/name`},
		{`{"ip":"::ffff:10.0.0.1","pool":"p","service":"a/b","allocatedAt":""}`, `ip "::ffff:10.0.0.1": not a plain IPv4 or IPv6 address`},
		{`{"ip":"10.0.0.1","pool":"p","service":"a/b","allocatedAt":"now"}`, `allocatedAt: parsing time "now" as "2006-01-02T15:04:05Z07:00": cannot parse "now" as "2006"`},
		{`{"ip":"10.0.0.1","pool":"p","service":"a/b","allocatedAt":"","x":1}`, `json: unknown field "x"`},
		{`{"ip":"10.0.0.1","pool":"p","service":"a/b","allocatedAt":""} {}`, "more than one JSON value on the line"},
	} {
		a, err := parseAllocation([]byte(tc.line))
		got := fmt.Sprint(err)
		if err == nil {
			got = strings.TrimSuffix(strings.TrimPrefix(describe(Shard{Allocations: []Allocation{a}}), " e0  a=["), "] r=[] i=[]")
		}
		if got != tc.want {
			t.Errorf("parseAllocation(%s) = %s, want %s", tc.line, got, tc.want)
		}
	}
	a, _ := parseAllocation([]byte(`{"ip":"10.0.0.1","pool":"p","service":"a/b","uid":"u","sharingKey":"k","allocatedAt":"2026-11-30T12:00:00Z"}`))
	if a.Service.UID != "u" || a.SharingKey != "k" || !a.AllocatedAt.Equal(t0) {
		t.Errorf("parseAllocation lost fields: %+v", a)
	}
}

func TestParseReservation(t *testing.T) {
	for _, tc := range []struct {
		line, err string
		forSvc    string
	}{
		{`{"ip":"10.0.0.9","note":"n","createdAt":""}`, "", ""},
		{`{"ip":"10.0.0.9","note":"n","forService":"a/b","forUid":"u","createdAt":""}`, "", "a/b u"},
		{`{"ip":"10.0.0.9","note":"n","forUid":"u","createdAt":""}`, "forUid without forService", ""},
		{`{"ip":"10.0.0.9","note":"n","forService":"ab","createdAt":""}`, `forService: "ab" is not namespace/name`, ""},
		{`{"ip":"10.0.0","note":"n","createdAt":""}`, `ip: ParseAddr("10.0.0"): IPv4 address too short`, ""},
		{`{"ip":"10.0.0.9","note":"n","createdAt":"x"}`, `createdAt: parsing time "x" as "2006-01-02T15:04:05Z07:00": cannot parse "x" as "2006"`, ""},
	} {
		r, err := parseReservation([]byte(tc.line))
		if (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("parseReservation(%s) error %v, want %q", tc.line, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		forSvc := ""
		if r.ForService != nil {
			forSvc = r.ForService.Key() + " " + r.ForService.UID
		}
		if r.IP != netip.MustParseAddr("10.0.0.9") || r.Note != "n" || forSvc != tc.forSvc {
			t.Errorf("parseReservation(%s) = %+v (for %q)", tc.line, r, forSvc)
		}
	}
}

func TestDecodeIndex(t *testing.T) {
	line := func(name, from string) string { return fmt.Sprintf(`{"name":%q,"from":%q}`, name, from) }
	for _, tc := range []struct {
		name, text string
		want       string // name@from… or the error
	}{
		{"empty", "", ""},
		{"two in order, blank lines skipped", line(ShardName(2), "10.0.1.0") + "\n\n" + line(ShardName(1), "10.0.2.0"), "ipledger-ledger-2@10.0.1.0 ipledger-ledger-1@10.0.2.0"},
		{"the head listed", line(HeadName, "10.0.1.0"), `line 1: name "ipledger-ledger-0" is not ipledger-ledger-<n> with n > 0`},
		{"not a shard name", line("x", "10.0.1.0"), `line 1: name "x" is not ipledger-ledger-<n> with n > 0`},
		{"bad from", line(ShardName(1), "x"), `line 1: from: ip: ParseAddr("x"): unable to parse IP`},
		{"listed twice", line(ShardName(1), "10.0.1.0") + "\n" + line(ShardName(1), "10.0.2.0"), "line 2: ipledger-ledger-1 is listed twice"},
		{"out of order", line(ShardName(1), "10.0.2.0") + "\n" + line(ShardName(2), "10.0.1.0"), "line 2: from 10.0.1.0 does not follow 10.0.2.0: shards must be listed in increasing order"},
		{"same from twice", line(ShardName(1), "10.0.2.0") + "\n\n" + line(ShardName(2), "10.0.2.0"), "line 3: from 10.0.2.0 does not follow 10.0.2.0: shards must be listed in increasing order"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			index, err := decodeIndex(tc.text)
			got := fmt.Sprint(err)
			if err == nil {
				got = strings.TrimSuffix(strings.TrimPrefix(describe(Shard{Index: index}), " e0  a=[] r=[] i=["), "]")
			}
			if got != tc.want {
				t.Fatalf("decodeIndex = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestDecodeEntries(t *testing.T) {
	a := `{"ip":"10.0.0.1","pool":"p","service":"a/b","allocatedAt":""}`
	r := `{"ip":"10.0.0.9","note":"n","createdAt":""}`
	for _, tc := range []struct {
		name, allocs, res string
		want              string // counts, or the error
	}{
		{"empty", "", "", "0 0"},
		{"one of each", a, r, "1 1"},
		{"the same IP for two Services", a + "\n" + strings.Replace(a, "a/b", "a/c", 1), "", "2 0"},
		{"the same Service on two IPs", a + "\n" + strings.Replace(a, "10.0.0.1", "10.0.0.2", 1), "", "2 0"},
		{"an allocation twice, whatever its pool", a + "\n \n" + strings.Replace(a, `"p"`, `"q"`, 1), "", "line 3: 10.0.0.1 is recorded twice for a/b"},
		{"a reservation twice", "", r + "\n" + strings.Replace(r, `"n"`, `"m"`, 1), "line 2: 10.0.0.9 is reserved twice"},
		{"a line too long", strings.Repeat("x", 1<<20+1), "", "line 1: bufio.Scanner: token too long"},
		{"broken JSON", "\n" + a[:10], "", "line 2: unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allocs, err := decodeAllocations(tc.allocs)
			var reservations []Reservation
			if err == nil {
				reservations, err = decodeReservations(tc.res)
			}
			got := fmt.Sprint(len(allocs), " ", len(reservations))
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestKeyError(t *testing.T) {
	inner := errors.New("pool is empty")
	for _, tc := range []struct {
		err  error
		want string
		line int
	}{
		{&lineError{line: 4, err: inner}, "ledger shard ipledger-ledger-2: allocations.jsonl line 4: pool is empty", 4},
		{inner, "ledger shard ipledger-ledger-2: allocations.jsonl: pool is empty", 0},
	} {
		se := keyError(ShardName(2), keyAllocations, tc.err)
		if se.Error() != tc.want || se.Line != tc.line || !errors.Is(se, inner) {
			t.Errorf("keyError(%v) = %q line %d, want %q line %d", tc.err, se, se.Line, tc.want, tc.line)
		}
	}
}
