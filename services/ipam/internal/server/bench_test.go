package server

import (
	"fmt"
	"net/netip"
	"testing"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

func ledgerOf(n int) []ledger.Allocation {
	allocs := make([]ledger.Allocation, n)
	for i := range allocs {
		allocs[i] = ledger.Allocation{
			IP:      netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)}),
			Pool:    "pool",
			Service: ledger.ServiceRef{Namespace: fmt.Sprintf("ns-%d", i%50), Name: fmt.Sprintf("svc-%06d", i), UID: "0b0f3a3e-6c1b-4d8e-9a55-3f1f6a1d2c3b"},
		}
	}
	return allocs
}

// BenchmarkListAllocations pages through ledgers of 5,000 and 50,000
// allocations: B/op and allocs/op must follow the page size, not the ledger.
func BenchmarkListAllocations(b *testing.B) {
	for _, n := range []int{5000, 50000} {
		allocs := ledgerOf(n)
		for _, size := range []int{100, 500, 5000} {
			b.Run(fmt.Sprintf("ledger=%d/page=%d", n, size), func(b *testing.B) {
				// A page from the middle of the ledger, reached by its token.
				token := pageToken(position{Allocation: allocs[n/2]})
				b.ReportAllocs()
				for b.Loop() {
					resp, err := listPage(allocs, nil, &ipamv1.ListAllocationsRequest{PageToken: token}, size)
					if err != nil || len(resp.Allocations) != min(size, n-n/2-1) {
						b.Fatalf("page of %d: %v", len(resp.GetAllocations()), err)
					}
				}
			})
		}
	}
}

// TestListPageFollowsTokens walks a ledger page by page with a namespace
// filter and checks that every matching allocation comes exactly once.
func TestListPageFollowsTokens(t *testing.T) {
	allocs := ledgerOf(1000)
	seen := map[string]bool{}
	req := &ipamv1.ListAllocationsRequest{Namespace: "ns-7"}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatal("no end of pages")
		}
		resp, err := listPage(allocs, nil, req, 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.Allocations {
			if a.Service.Namespace != "ns-7" || seen[a.Ip] {
				t.Fatalf("unexpected or repeated %v", a)
			}
			seen[a.Ip] = true
		}
		if resp.NextPageToken == "" {
			break
		}
		req.PageToken = resp.NextPageToken
	}
	if len(seen) != 20 {
		t.Fatalf("saw %d allocations of ns-7, want 20", len(seen))
	}
}
