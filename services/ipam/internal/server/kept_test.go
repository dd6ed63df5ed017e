package server

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	watcherv1 "github.com/ipledger/ipledger/proto/ipledger/watcher/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

var keptAt = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// keptRes is the ledger's record of ip kept for ns/name, released at
// keptAt, held under key.
func keptRes(ip, ns, name, key string) ledger.Reservation {
	return ledger.Reservation{IP: netip.MustParseAddr(ip), Note: ledger.KeptNote(key), CreatedAt: keptAt,
		ForService: &ledger.ServiceRef{Namespace: ns, Name: name, UID: "uid-" + name}}
}

func heldAlloc(ip, pool, ns, name string) ledger.Allocation {
	return ledger.Allocation{IP: netip.MustParseAddr(ip), Pool: pool, Service: ledger.ServiceRef{Namespace: ns, Name: name, UID: "uid-" + name},
		AllocatedAt: keptAt.Add(-time.Hour)}
}

// keptWorld: pool big (10.0.0.0/24) keeps released addresses for an hour,
// pool small (10.0.1.0/28) sets nothing (the server's default: 0). Services
// a/web and b/db hold addresses of big; addresses are kept for a/gone (in
// big, under sharing key k), b/old (in small) and a/far (outside every
// pool); 10.0.0.4 is an operator's reservation.
func keptWorld(t *testing.T) *Server {
	big := poolObj("big", "10.0.0.0/24")
	hour := int64(3600)
	big.GetIpPool().Allocation = &watcherv1.IPPoolAllocation{KeepReleasedSeconds: &hour}
	return newWorld(t, big, poolObj("small", "10.0.1.0/28"), ledgerObj(
		[]ledger.Allocation{heldAlloc("10.0.0.1", "big", "a", "web"), heldAlloc("10.0.0.3", "big", "b", "db")},
		keptRes("10.0.0.2", "a", "gone", "k"), keptRes("10.0.1.5", "b", "old", ""), keptRes("10.9.9.9", "a", "far", ""),
		ledger.Reservation{IP: netip.MustParseAddr("10.0.0.4"), Note: "DNS for the lab", CreatedAt: keptAt},
	)).server()
}

// render is an entry as "ip ns/name pool=P [key=K] [kept until T]".
func render(a *ipamv1.Allocation) string {
	s := fmt.Sprintf("%s %s/%s pool=%s", a.GetIp(), a.GetService().GetNamespace(), a.GetService().GetName(), a.GetPool())
	if a.GetSharingKey() != "" {
		s += " key=" + a.GetSharingKey()
	}
	if a.GetKeptUntil() != "" {
		s += " kept until " + a.GetKeptUntil()
	}
	return s
}

// ListAllocations and GetAllocation show the addresses kept for Services
// that released them beside the held ones, in IP order, with their pool and
// the end of their pool's grace period, filtered and paged like the others.
func TestKeptAddressesAreListed(t *testing.T) {
	s := keptWorld(t)
	ctx := context.Background()
	all := []string{
		"10.0.0.1 a/web pool=big",
		"10.0.0.2 a/gone pool=big key=k kept until 2026-12-01T11:00:00Z",
		"10.0.0.3 b/db pool=big",
		"10.0.1.5 b/old pool=small kept until 2026-12-01T10:00:00Z",
		"10.9.9.9 a/far pool= kept until 2026-12-01T10:00:00Z",
	}
	for _, tc := range []struct {
		name string
		req  *ipamv1.ListAllocationsRequest
		want []string
	}{
		{"all", &ipamv1.ListAllocationsRequest{}, all},
		{"namespace a", &ipamv1.ListAllocationsRequest{Namespace: "a"}, []string{all[0], all[1], all[4]}},
		{"pool big", &ipamv1.ListAllocationsRequest{Pool: "big"}, all[:3]},
		{"pool small", &ipamv1.ListAllocationsRequest{Pool: "small"}, all[3:4]},
	} {
		for _, size := range []int32{0, 1, 2, 3} {
			t.Run(fmt.Sprintf("%s/page %d", tc.name, size), func(t *testing.T) {
				req := &ipamv1.ListAllocationsRequest{Namespace: tc.req.Namespace, Pool: tc.req.Pool, PageSize: size}
				var got []string
				for pages := 0; ; pages++ {
					if pages > 10 {
						t.Fatal("no end of pages")
					}
					resp, err := s.ListAllocations(ctx, req)
					if err != nil {
						t.Fatal(err)
					}
					if size > 0 && len(resp.Allocations) > int(size) {
						t.Fatalf("a page of %d, asked for %d", len(resp.Allocations), size)
					}
					for _, a := range resp.Allocations {
						got = append(got, render(a))
					}
					if req.PageToken = resp.NextPageToken; req.PageToken == "" {
						break
					}
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("listed\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
				}
			})
		}
	}

	// By IP: the kept entry and the reservation that records it.
	g, err := s.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Ip{Ip: "10.0.0.2"}})
	if err != nil || len(g.Allocations) != 1 || render(g.Allocations[0]) != all[1] ||
		g.Allocations[0].GetAllocatedAt() != "2026-12-01T10:00:00Z" || g.Allocations[0].GetService().GetUid() != "uid-gone" ||
		g.GetReservation().GetOwnerNote() != ledger.KeptNote("k") || g.GetReservation().GetForService().GetName() != "gone" {
		t.Errorf("GetAllocation(10.0.0.2) = %v, %v", g, err)
	}
	// An operator's reservation is not a kept address.
	g, err = s.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Ip{Ip: "10.0.0.4"}})
	if err != nil || len(g.Allocations) != 0 || g.GetReservation().GetOwnerNote() != "DNS for the lab" {
		t.Errorf("GetAllocation(10.0.0.4) = %v, %v", g, err)
	}
	// By Service: what is kept for it, and what it holds.
	for svc, want := range map[string][]string{"a/gone": {all[1]}, "a/web": {all[0]}, "a/far": {all[4]}} {
		ns, name, _ := strings.Cut(svc, "/")
		g, err := s.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Service{Service: &ipamv1.ServiceRef{Namespace: ns, Name: name}}})
		var got []string
		for _, a := range g.GetAllocations() {
			got = append(got, render(a))
		}
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("GetAllocation(%s) = %v, %v; want %v", svc, got, err, want)
		}
	}
	_, err = s.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Service{Service: &ipamv1.ServiceRef{Namespace: "a", Name: "nobody"}}})
	if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), "none is kept for it") {
		t.Errorf("GetAllocation(a/nobody) = %v, want NotFound", err)
	}

	// ListPools counts each pool's kept addresses, used as they are (big:
	// two held, one kept, one reserved).
	pools := readClient{t: t, s: s}.pools()
	for name, want := range map[string]string{"big": "kept 1 used 4", "small": "kept 1 used 1"} {
		if got := fmt.Sprintf("kept %d used %s", pools[name].GetKept(), pools[name].GetIpv4().GetUsed()); got != want {
			t.Errorf("pool %s: %s, want %s", name, got, want)
		}
	}

	// The kept entries were built once for all those calls.
	if n := testutil.ToFloat64(s.m.rebuilds.WithLabelValues(partKept)); n != 1 {
		t.Errorf("kept entries built %v times, want 1", n)
	}
}

// A ledger that keeps nothing costs the listing no pool parse.
func TestListingWithoutKeptBuildsNothing(t *testing.T) {
	s := newWorld(t, allocatedWorld(10, 0)...).server()
	for range 3 {
		if resp, err := s.ListAllocations(context.Background(), &ipamv1.ListAllocationsRequest{}); err != nil || len(resp.Allocations) != 10 {
			t.Fatalf("ListAllocations = %d, %v", len(resp.GetAllocations()), err)
		}
	}
	if n := testutil.ToFloat64(s.m.rebuilds.WithLabelValues(partKept)); n != 0 {
		t.Errorf("kept entries built %v times with none kept, want 0", n)
	}
}

// listPage merges held and kept entries by IP, then Service, a held entry
// before a kept one of the same IP and Service; every page token resumes
// after the entry it names, whichever list it came from.
func TestListPageMergesKept(t *testing.T) {
	allocs := ledgerOf(30)
	var kept []entry
	for i := 0; i < 30; i += 3 { // at a held IP, of the same Service, and of another
		for _, svc := range []ledger.ServiceRef{allocs[i].Service, {Namespace: "zz", Name: "kept"}} {
			kept = append(kept, entry{position: position{Allocation: ledger.Allocation{IP: allocs[i].IP, Pool: "pool", Service: svc}, kept: true}, until: keptAt})
		}
	}
	kept = append(kept, entry{position: position{Allocation: ledger.Allocation{IP: netip.MustParseAddr("10.0.0.100"), Pool: "pool", Service: ledger.ServiceRef{Namespace: "ns-1", Name: "last"}}, kept: true}, until: keptAt})
	var want []string
	for i, a := range allocs {
		want = append(want, a.IP.String()+" "+a.Service.Key())
		if i%3 == 0 {
			want = append(want, a.IP.String()+" "+a.Service.Key()+" kept", a.IP.String()+" zz/kept kept")
		}
	}
	want = append(want, "10.0.0.100 ns-1/last kept")
	for size := 1; size <= 7; size++ {
		req := &ipamv1.ListAllocationsRequest{}
		var got []string
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("no end of pages")
			}
			resp, err := listPage(allocs, kept, req, size)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range resp.Allocations {
				s := a.Ip + " " + a.Service.Namespace + "/" + a.Service.Name
				if a.KeptUntil != "" {
					s += " kept"
				}
				got = append(got, s)
			}
			if req.PageToken = resp.NextPageToken; req.PageToken == "" {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("pages of %d:\n%s\nwant\n%s", size, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// Only ipam writes kept records: an operator's note in their form is
// refused before anything reaches the leader.
func TestReserveAddressRefusesAKeptNote(t *testing.T) {
	s, err := New(Config{}, nil, nil, nil, nil) // the refusal needs neither stream nor leader
	if err != nil {
		t.Fatal(err)
	}
	for _, note := range []string{ledger.KeptNote(""), ledger.KeptNote("k"), "  ipledger.io/kept by hand"} {
		_, err := s.ReserveAddress(context.Background(), &ipamv1.ReserveAddressRequest{Ip: "10.0.0.9", OwnerNote: note,
			ForService: &ipamv1.ServiceRef{Namespace: "a", Name: "web"}})
		if msg := status.Convert(err).Message(); status.Code(err) != codes.InvalidArgument ||
			!strings.HasPrefix(msg, "owner_note: ") || !strings.Contains(msg, "only ipam writes") || !strings.Contains(msg, "does not start") {
			t.Errorf("ReserveAddress(note %q) = %v, want InvalidArgument naming owner_note and the fix", note, err)
		}
	}
}
