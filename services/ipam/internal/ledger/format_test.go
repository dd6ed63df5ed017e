package ledger

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func alloc(ip, pool, svc string) Allocation {
	ns, name, _ := strings.Cut(svc, "/")
	return Allocation{IP: netip.MustParseAddr(ip), Pool: pool, Service: ServiceRef{Namespace: ns, Name: name, UID: "uid-" + name}, AllocatedAt: t0}
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		shard Shard
	}{
		{"empty head", Shard{Name: HeadName, Term: "a/1/x"}},
		{"head with index and entries", Shard{Name: HeadName, Epoch: 7, Term: "a/1/x",
			Index:        []IndexEntry{{Name: "ipledger-ledger-3", From: netip.MustParseAddr("10.0.1.0")}, {Name: "ipledger-ledger-1", From: netip.MustParseAddr("2001:db8::")}},
			Allocations:  []Allocation{alloc("10.0.0.2", "blue", "b/web"), alloc("10.0.0.1", "blue", "a/web"), alloc("10.0.0.1", "blue", "a/dns")},
			Reservations: []Reservation{{IP: netip.MustParseAddr("10.0.0.9"), Note: "lab DNS", ForService: &ServiceRef{Namespace: "lab", Name: "dns", UID: "u"}, CreatedAt: t0}},
		}},
		{"ipv6 and sharing key", Shard{Name: "ipledger-ledger-7", Epoch: 18446744073709551615, Term: "b/2/y",
			Allocations: []Allocation{{IP: netip.MustParseAddr("2001:db8::1"), Pool: "v6", Service: ServiceRef{Namespace: "n", Name: "s"}, SharingKey: "k1", AllocatedAt: t0}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := Encode(tc.shard)
			got, err := Decode(tc.shard.Name, data)
			if err != nil {
				t.Fatalf("Decode(Encode(x)): %v\n%v", err, data)
			}
			again := Encode(got)
			if !reflect.DeepEqual(data, again) {
				t.Fatalf("encoding is not stable:\n%v\n%v", data, again)
			}
			if got.Epoch != tc.shard.Epoch || got.Term != tc.shard.Term {
				t.Fatalf("epoch %d term %q, want %d %q", got.Epoch, got.Term, tc.shard.Epoch, tc.shard.Term)
			}
			if len(got.Allocations) != len(tc.shard.Allocations) || len(got.Reservations) != len(tc.shard.Reservations) || len(got.Index) != len(tc.shard.Index) {
				t.Fatalf("lost entries: %+v", got)
			}
			for i := 1; i < len(got.Allocations); i++ {
				if CompareAllocations(got.Allocations[i-1], got.Allocations[i]) >= 0 {
					t.Fatalf("allocations not sorted: %+v", got.Allocations)
				}
			}
		})
	}
}

func TestEncodeIsReadable(t *testing.T) {
	data := Encode(Shard{Name: HeadName, Epoch: 3, Term: "ipam-0/1/2026", Allocations: []Allocation{alloc("10.0.0.1", "blue", "default/web")}})
	want := `{"ip":"10.0.0.1","pool":"blue","service":"default/web","uid":"uid-web","allocatedAt":"2026-11-30T12:00:00Z"}` + "\n"
	if data["allocations.jsonl"] != want {
		t.Fatalf("allocations.jsonl = %q, want %q", data["allocations.jsonl"], want)
	}
	if data["format"] != Format || data["epoch"] != "3" || data["term"] != "ipam-0/1/2026" {
		t.Fatalf("header = %v", data)
	}
}

func TestDecodeErrors(t *testing.T) {
	good := `{"ip":"10.0.0.1","pool":"blue","service":"default/web","allocatedAt":"2026-11-30T12:00:00Z"}`
	for _, tc := range []struct {
		name string
		data map[string]string
		want string // substring of the error
	}{
		{"no format", map[string]string{"allocations.jsonl": good}, "format: missing"},
		{"future format", map[string]string{"format": "ipledger.io/ledger/v2"}, "not \"ipledger.io/ledger/v1\""},
		{"unknown key", map[string]string{"format": Format, "notes": "x"}, "notes: unknown key"},
		{"truncated json", map[string]string{"format": Format, "allocations.jsonl": good + "\n" + good[:20]}, "allocations.jsonl line 2"},
		{"bad ip", map[string]string{"format": Format, "allocations.jsonl": strings.Replace(good, "10.0.0.1", "10.0.0.300", 1)}, "ip:"},
		{"zone ip", map[string]string{"format": Format, "allocations.jsonl": strings.Replace(good, "10.0.0.1", "fe80::1%eth0", 1)}, "not a plain"},
		{"no pool", map[string]string{"format": Format, "allocations.jsonl": strings.Replace(good, `"blue"`, `""`, 1)}, "pool is empty"},
		{"service without namespace", map[string]string{"format": Format, "allocations.jsonl": strings.Replace(good, "default/web", "web", 1)}, "not namespace/name"},
		{"unknown field", map[string]string{"format": Format, "allocations.jsonl": strings.Replace(good, `"pool"`, `"pol":"x","pool"`, 1)}, "unknown field"},
		{"duplicate", map[string]string{"format": Format, "allocations.jsonl": good + "\n" + good}, "recorded twice"},
		{"bad time", map[string]string{"format": Format, "allocations.jsonl": strings.Replace(good, "2026-11-30T12:00:00Z", "yesterday", 1)}, "allocatedAt"},
		{"reserved twice", map[string]string{"format": Format, "reservations.jsonl": `{"ip":"10.0.0.9","note":"a","createdAt":""}` + "\n" + `{"ip":"10.0.0.9","note":"b","createdAt":""}`}, "reserved twice"},
		{"index outside head", map[string]string{"format": Format, "shards.jsonl": ""}, "only ipledger-ledger-0"},
		{"epoch not a number", map[string]string{"format": Format, "epoch": "seven"}, "epoch: \"seven\" is not a decimal counter"},
		{"negative epoch", map[string]string{"format": Format, "epoch": "-1"}, "epoch:"},
		{"epoch with leading zero", map[string]string{"format": Format, "epoch": "07"}, "epoch:"},
		{"epoch with sign", map[string]string{"format": Format, "epoch": "+7"}, "epoch:"},
		{"empty epoch", map[string]string{"format": Format, "epoch": ""}, "epoch:"},
		{"epoch beyond 64 bits", map[string]string{"format": Format, "epoch": "18446744073709551616"}, "epoch:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("ipledger-ledger-1", tc.data)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Decode() error = %v, want one containing %q", err, tc.want)
			}
		})
	}
	t.Run("index out of order", func(t *testing.T) {
		_, err := Decode(HeadName, map[string]string{"format": Format, "shards.jsonl": `{"name":"ipledger-ledger-1","from":"10.0.2.0"}` + "\n" + `{"name":"ipledger-ledger-2","from":"10.0.1.0"}`})
		if err == nil || !strings.Contains(err.Error(), "increasing order") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestParseAndAssemble(t *testing.T) {
	head := Shard{Name: HeadName, Term: "t", Index: []IndexEntry{{Name: "ipledger-ledger-2", From: netip.MustParseAddr("10.0.1.0")}},
		Allocations: []Allocation{alloc("10.0.0.1", "p", "a/a"),
			alloc("10.0.1.5", "p", "a/leftover")}} // outside the head's range: ignored
	s2 := Shard{Name: "ipledger-ledger-2", Term: "t", Allocations: []Allocation{alloc("10.0.1.5", "p", "a/b")}}
	orphan := Shard{Name: "ipledger-ledger-9", Term: "old", Allocations: []Allocation{alloc("10.0.0.7", "p", "a/ghost")}}
	for _, tc := range []struct {
		name    string
		cms     map[string]map[string]string
		want    []string // service keys in order
		corrupt string   // shard named by the CorruptError
	}{
		{"empty", map[string]map[string]string{}, nil, ""},
		{"two shards, leftover and orphan ignored",
			map[string]map[string]string{HeadName: Encode(head), s2.Name: Encode(s2), orphan.Name: Encode(orphan), "unrelated": {"x": "y"}},
			[]string{"a/a", "a/b"}, ""},
		{"corrupt orphan is ignored",
			map[string]map[string]string{HeadName: Encode(head), s2.Name: Encode(s2), orphan.Name: {"format": "garbage"}},
			[]string{"a/a", "a/b"}, ""},
		{"listed shard missing", map[string]map[string]string{HeadName: Encode(head)}, nil, "ipledger-ledger-2"},
		{"listed shard corrupt", map[string]map[string]string{HeadName: Encode(head), s2.Name: {"format": Format, "allocations.jsonl": "{"}}, nil, "ipledger-ledger-2"},
		{"head missing", map[string]map[string]string{s2.Name: Encode(s2)}, nil, HeadName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _, err := Parse(tc.cms)
			if tc.corrupt != "" {
				ce, ok := err.(*CorruptError)
				if !ok || ce.Shard != tc.corrupt {
					t.Fatalf("Parse() error = %v, want CorruptError for %s", err, tc.corrupt)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range st.Allocations {
				got = append(got, a.Service.Key())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("allocations = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestShardFor(t *testing.T) {
	head := Shard{Name: HeadName, Index: []IndexEntry{
		{Name: "ipledger-ledger-1", From: netip.MustParseAddr("10.0.1.0")},
		{Name: "ipledger-ledger-2", From: netip.MustParseAddr("10.0.2.0")},
		{Name: "ipledger-ledger-3", From: netip.MustParseAddr("::1")},
	}}
	for ip, want := range map[string]int{"1.1.1.1": 0, "10.0.0.255": 0, "10.0.1.0": 1, "10.0.1.9": 1, "10.0.2.0": 2, "255.255.255.255": 2, "::": 2, "::1": 3, "2001:db8::1": 3} {
		if got := ShardFor(head, netip.MustParseAddr(ip)); got != want {
			t.Errorf("ShardFor(%s) = %d, want %d", ip, got, want)
		}
	}
}

func TestSplit(t *testing.T) {
	var s = Shard{Name: "ipledger-ledger-4", Term: "t"}
	for i := 0; i < 1000; i++ {
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i / 250), byte(i % 250)})
		s.Allocations = append(s.Allocations, alloc(ip.String(), "pool", fmt.Sprintf("ns/svc-%d", i)))
		if i%100 == 0 { // a shared IP: both Services must land in one piece
			s.Allocations = append(s.Allocations, alloc(ip.String(), "pool", fmt.Sprintf("ns/shared-%d", i)))
		}
	}
	s.Reservations = []Reservation{{IP: netip.MustParseAddr("10.0.3.200"), Note: "held", CreatedAt: t0}}
	limit := Size(Encode(s)) / 3
	next := 10
	first, rest, from := Split(s, limit, func() string { next++; return ShardName(next) })
	if first.Name != s.Name || len(rest) < 2 || len(rest) != len(from) {
		t.Fatalf("Split gave %s + %d pieces, %d bounds", first.Name, len(rest), len(from))
	}
	pieces := append([]Shard{first}, rest...)
	total := 0
	for i, p := range pieces {
		if size := Size(Encode(p)); size > limit/2+200 {
			t.Errorf("piece %d is %d bytes, want about %d", i, size, limit/2)
		}
		if i > 0 {
			if p.Allocations[0].IP != from[i-1] && (len(p.Reservations) == 0 || p.Reservations[0].IP != from[i-1]) {
				t.Errorf("piece %d starts at %s, bound says %s", i, p.Allocations[0].IP, from[i-1])
			}
			last := pieces[i-1].Allocations[len(pieces[i-1].Allocations)-1].IP
			if last.Compare(from[i-1]) >= 0 {
				t.Errorf("piece %d ends at %s, not below the next bound %s", i-1, last, from[i-1])
			}
		}
		total += len(p.Allocations) + len(p.Reservations)
	}
	if want := len(s.Allocations) + len(s.Reservations); total != want {
		t.Fatalf("pieces hold %d entries, want %d", total, want)
	}
	// Within the limit: unchanged.
	if first, rest, _ := Split(s, Size(Encode(s)), nil); len(rest) != 0 || len(first.Allocations) != len(s.Allocations) {
		t.Fatal("a shard within the limit was split")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Format, "4", `{"ip":"10.0.0.1","pool":"blue","service":"default/web","uid":"u","allocatedAt":"2026-11-30T12:00:00Z"}`,
		`{"ip":"10.0.0.9","note":"n","forService":"a/b","createdAt":"2026-11-30T12:00:00Z"}`, `{"name":"ipledger-ledger-1","from":"10.0.1.0"}`)
	f.Add(Format, "", "", "", "")
	f.Add("v0", "x", "{", "}", "\n\n")
	f.Fuzz(func(t *testing.T, format, epoch, allocs, res, index string) {
		data := map[string]string{"format": format, "allocations.jsonl": allocs, "reservations.jsonl": res, "shards.jsonl": index}
		if epoch != "" { // "" stands for a shard written before epochs existed
			data["epoch"] = epoch
		}
		s, err := Decode(HeadName, data)
		if err != nil {
			return
		}
		// Whatever decodes must survive a round trip unchanged.
		again, err := Decode(HeadName, Encode(s))
		if err != nil {
			t.Fatalf("re-decoding the encoding of an accepted shard failed: %v", err)
		}
		if !reflect.DeepEqual(Encode(s), Encode(again)) {
			t.Fatalf("round trip changed the shard")
		}
		if e, ok := data["epoch"]; ok && Encode(s)["epoch"] != e {
			t.Fatalf("epoch %q encodes back as %q", e, Encode(s)["epoch"])
		}
	})
}

// A ledger written before epochs existed reads as epoch 0, and its first
// term under epochs fences it at 1.
func TestDecodeWithoutEpoch(t *testing.T) {
	s, err := Decode(HeadName, map[string]string{"format": Format, "term": "a/9/2026-11-30T12:00:00Z"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Epoch != 0 {
		t.Fatalf("epoch %d, want 0", s.Epoch)
	}
	if e, err := FenceEpoch(Layout{s}, "b/0/2026-12-01T00:00:00Z"); err != nil || e != 1 {
		t.Fatalf("FenceEpoch = %d, %v; want 1", e, err)
	}
}

func TestFenceEpoch(t *testing.T) {
	const me, other = "b/0/2026-12-01T00:00:00Z", "a/9/2026-11-30T12:00:00Z"
	shard := func(name string, epoch uint64, term string) Shard { return Shard{Name: name, Epoch: epoch, Term: term} }
	for _, tc := range []struct {
		name    string
		layout  Layout
		want    uint64
		wantErr bool
	}{
		{"no ledger", nil, 1, false},
		{"ledger from before epochs", Layout{shard(HeadName, 0, other)}, 1, false},
		// The Lease's count restarted (b/0 after a/9): the epoch does not care.
		{"another term's epoch", Layout{shard(HeadName, 5, other), shard("ipledger-ledger-1", 5, other)}, 6, false},
		{"the highest epoch on any shard counts", Layout{shard(HeadName, 5, other), shard("ipledger-ledger-1", 8, "c/1/x")}, 9, false},
		{"our own epoch: opening again keeps it", Layout{shard(HeadName, 6, me), shard("ipledger-ledger-1", 6, me)}, 6, false},
		{"our own epoch on a half-fenced ledger", Layout{shard(HeadName, 6, me), shard("ipledger-ledger-1", 5, other)}, 6, false},
		{"our term, but a higher epoch elsewhere", Layout{shard(HeadName, 6, me), shard("ipledger-ledger-1", 7, other)}, 8, false},
		{"our term at epoch 0 is not ours", Layout{shard(HeadName, 0, me)}, 1, false},
		{"exhausted", Layout{shard(HeadName, math.MaxUint64, other)}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FenceEpoch(tc.layout, me)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("FenceEpoch = %d, %v; want %d (error %v)", got, err, tc.want, tc.wantErr)
			}
		})
	}
}

func TestHandedOver(t *testing.T) {
	shard := func(name string, epoch uint64) Shard { return Shard{Name: name, Epoch: epoch} }
	for _, tc := range []struct {
		name     string
		layout   Layout
		released uint64
		want     bool
	}{
		{"released at the head's epoch", Layout{shard(HeadName, 6), shard("ipledger-ledger-1", 6)}, 6, true},
		{"released; a shard not written since an earlier handover", Layout{shard(HeadName, 6), shard("ipledger-ledger-1", 4)}, 6, true},
		{"nothing released", Layout{shard(HeadName, 6), shard("ipledger-ledger-1", 6)}, 0, false},
		{"an older epoch released: a later term wrote the head", Layout{shard(HeadName, 7), shard("ipledger-ledger-1", 6)}, 6, false},
		{"a shard of a higher epoch: a later term is fencing", Layout{shard(HeadName, 6), shard("ipledger-ledger-1", 7)}, 6, false},
		{"a ledger from before epochs", Layout{shard(HeadName, 0)}, 0, false},
		{"no ledger", nil, 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := handedOver(tc.layout, tc.released); got != tc.want {
				t.Fatalf("handedOver = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOwnershipOf(t *testing.T) {
	const me, other = "b/0/2026-12-01T00:00:00Z", "a/9/2026-11-30T12:00:00Z"
	shard := func(name string, epoch uint64, term string) Shard { return Shard{Name: name, Epoch: epoch, Term: term} }
	for _, tc := range []struct {
		name      string
		layout    Layout
		unchanged map[string]bool
		want      ownership
		shard     string
	}{
		{"ours", Layout{shard(HeadName, 6, me), shard("ipledger-ledger-1", 6, me)}, nil, owned, ""},
		{"taken over from a clean release, not written since", Layout{shard(HeadName, 6, me), shard("ipledger-ledger-1", 5, other)},
			map[string]bool{"ipledger-ledger-1": true}, owned, ""},
		{"taken over from a clean release, changed since", Layout{shard(HeadName, 6, me), shard("ipledger-ledger-1", 5, other)},
			nil, rewritten, "ipledger-ledger-1"},
		{"unchanged does not hide a later term", Layout{shard(HeadName, 6, me), shard("ipledger-ledger-1", 7, other)},
			map[string]bool{"ipledger-ledger-1": true}, overtaken, "ipledger-ledger-1"},
		{"a later term fenced the head", Layout{shard(HeadName, 7, other), shard("ipledger-ledger-1", 6, me)}, nil, overtaken, HeadName},
		{"a later term fenced one shard so far", Layout{shard(HeadName, 6, me), shard("ipledger-ledger-1", 7, other)}, nil, overtaken, "ipledger-ledger-1"},
		{"a higher epoch wins over a rewrite", Layout{shard(HeadName, 3, other), shard("ipledger-ledger-1", 9, other)}, nil, overtaken, "ipledger-ledger-1"},
		{"restored from an older backup", Layout{shard(HeadName, 4, other)}, nil, rewritten, HeadName},
		{"our epoch under another term", Layout{shard(HeadName, 6, other)}, nil, rewritten, HeadName},
		{"deleted", nil, nil, rewritten, HeadName},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, s := ownershipOf(tc.layout, 6, me, tc.unchanged)
			if got != tc.want || s.Name != tc.shard {
				t.Fatalf("ownershipOf = %d (shard %q), want %d (shard %q)", got, s.Name, tc.want, tc.shard)
			}
		})
	}
}

// TestLinesAreEncodingJSON: the ledger's lines are byte for byte what
// encoding/json's Encoder writes for their structs, whatever the values
// (0.2 and later read them; an edited entry may hold anything).
func TestLinesAreEncodingJSON(t *testing.T) {
	values := []string{"", "10.0.0.1", "ns/web", "3f1c0a9e-2b4d-4e8f-9a7b-1c2d3e4f5a6b", "2026-12-06T03:00:00Z",
		`quote " and \ backslash`, "<html> & more", "tab\tnewline\n", "ünïcödé", "line\u2028sep", "bad \xff utf-8", "del\x7f"}
	encode := func(v any) string {
		var b strings.Builder
		if err := json.NewEncoder(&b).Encode(v); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	for i, v := range values {
		w := values[(i+3)%len(values)]
		for _, tc := range []struct {
			name      string
			got, want string
		}{
			{"allocation", string(allocationLine{IP: v, Pool: w, Service: v, UID: w, SharingKey: v, AllocatedAt: w}.append(nil)),
				encode(allocationLine{IP: v, Pool: w, Service: v, UID: w, SharingKey: v, AllocatedAt: w})},
			{"reservation", string(reservationLine{IP: w, Note: v, ForService: w, ForUID: v, CreatedAt: v}.append(nil)),
				encode(reservationLine{IP: w, Note: v, ForService: w, ForUID: v, CreatedAt: v})},
			{"index", string(indexLine{Name: v, From: w}.append(nil)), encode(indexLine{Name: v, From: w})},
		} {
			if tc.got != tc.want {
				t.Errorf("%s line of %q, %q:\n got %q\nwant %q", tc.name, v, w, tc.got, tc.want)
			}
		}
	}
}

// Lines kept from earlier encodings change nothing: encoding with the cache
// gives Encode's bytes as shards gain and lose entries, alternate, and
// outnumber the shards it keeps.
func TestEncodeWithCachedLinesIsEncode(t *testing.T) {
	var c lineCache
	shards := []Shard{{Name: ShardName(1), Term: "t"}, {Name: ShardName(2), Term: "t"}, {Name: ShardName(3), Term: "t"}}
	for i := range 300 {
		s := &shards[i%7%3]
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		s.Allocations = append(s.Allocations, Allocation{IP: ip, Pool: "p", Service: ServiceRef{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i), UID: "u"},
			SharingKey: map[bool]string{true: "k<&>"}[i%5 == 0], AllocatedAt: t0.Add(time.Duration(i) * time.Second)})
		if i%4 == 0 && len(s.Allocations) > 2 {
			s.Allocations = slices.Delete(s.Allocations, 1, 2)
		}
		if i%9 == 0 && len(s.Allocations) > 0 {
			s.Allocations[0].AllocatedAt = s.Allocations[0].AllocatedAt.Add(time.Hour) // same IP, another line
		}
		s.Epoch = uint64(i)
		if got, want := encode(*s, &c), Encode(*s); !maps.Equal(got, want) {
			t.Fatalf("step %d, shard %s: the cached encoding differs:\n%s\nwant\n%s", i, s.Name, got[keyAllocations], want[keyAllocations])
		}
		if len(c.shards) > lineCacheShards {
			t.Fatalf("step %d: %d shards' lines kept, at most %d", i, len(c.shards), lineCacheShards)
		}
	}
}
