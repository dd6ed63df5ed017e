package integration

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/lab/testenv"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/server"
)

func (h *harness) api(r *ipam) *server.Server {
	s, err := server.New(server.Config{Namespace: h.ledgerNS, LeaseName: h.lease, LBClass: h.class}, r.src.Store, h.env.Client, r.ctrl, slog.New(slog.DiscardHandler))
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func wantCode(t *testing.T, err error, code codes.Code, field string) {
	t.Helper()
	if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), field) {
		t.Errorf("error = %v, want %s naming %q", err, code, field)
	}
}

// Reads are answered by every replica from the streamed ledger; a standby
// refuses reservations naming the leader.
func TestAPI(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.pool("tapi-one", "10.77.6.0/29") // 8 addresses
	for i := range 10 {
		h.service(fmt.Sprintf("s%d", i), nil)
	}
	leaderReplica := h.start("ipam-leader")
	want := map[string]string{"s8": "PoolExhausted", "s9": "PoolExhausted"}
	for i := range 8 {
		want[fmt.Sprintf("s%d", i)] = fmt.Sprintf("10.77.6.%d", i)
	}
	h.expect(wait, want)
	standby := h.start("ipam-standby")
	if err := standby.src.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		srv  *server.Server
	}{{"leader", h.api(leaderReplica)}, {"standby", h.api(standby)}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := tc.srv
			// Pages of 3 chain through all 8 allocations, equal to the statuses.
			var got []string
			testenv.Eventually(t, wait, func() error {
				got = nil
				tok := ""
				for {
					resp, err := srv.ListAllocations(ctx, &ipamv1.ListAllocationsRequest{PageSize: 3, PageToken: tok, Namespace: h.ns})
					if err != nil {
						return err
					}
					if len(resp.Allocations) > 3 {
						return fmt.Errorf("page of %d", len(resp.Allocations))
					}
					for _, a := range resp.Allocations {
						got = append(got, a.Service.Name+"="+a.Ip)
					}
					if tok = resp.NextPageToken; tok == "" {
						break
					}
				}
				if len(got) != 8 {
					return fmt.Errorf("listed %v", got)
				}
				return nil
			})
			st := h.state()
			var statuses []string
			for name, ips := range st.ips {
				for _, ip := range ips {
					statuses = append(statuses, name+"="+ip)
				}
			}
			sort.Strings(statuses)
			sort.Strings(got)
			if strings.Join(got, " ") != strings.Join(statuses, " ") {
				t.Errorf("ListAllocations %v != statuses %v", got, statuses)
			}

			_, err := srv.ListAllocations(ctx, &ipamv1.ListAllocationsRequest{PageSize: 6000})
			wantCode(t, err, codes.InvalidArgument, "page_size")
			_, err = srv.ListAllocations(ctx, &ipamv1.ListAllocationsRequest{PageToken: "!!"})
			wantCode(t, err, codes.InvalidArgument, "page_token")

			g, err := srv.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Ip{Ip: "10.77.6.3"}})
			if err != nil || len(g.Allocations) != 1 || g.Allocations[0].Service.Name != "s3" || g.Allocations[0].Pool != "tapi-one" {
				t.Errorf("GetAllocation(ip) = %v, %v", g, err)
			}
			g, err = srv.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Service{Service: &ipamv1.ServiceRef{Namespace: h.ns, Name: "s5"}}})
			if err != nil || len(g.Allocations) != 1 || g.Allocations[0].Ip != "10.77.6.5" {
				t.Errorf("GetAllocation(service) = %v, %v", g, err)
			}
			_, err = srv.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Ip{Ip: "nope"}})
			wantCode(t, err, codes.InvalidArgument, "ip")
			_, err = srv.GetAllocation(ctx, &ipamv1.GetAllocationRequest{Selector: &ipamv1.GetAllocationRequest_Service{Service: &ipamv1.ServiceRef{Name: "s5"}}})
			wantCode(t, err, codes.InvalidArgument, "service.namespace")

			pools, err := srv.ListPools(ctx, &ipamv1.ListPoolsRequest{})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, p := range pools.Pools {
				if p.Name == "tapi-one" {
					found = true
					if p.Ipv4.Total != "8" || p.Ipv4.Used != "8" {
						t.Errorf("pool usage = %v", p.Ipv4)
					}
				}
			}
			if !found {
				t.Errorf("ListPools has no tapi-one: %v", pools)
			}

			x, err := srv.ExplainService(ctx, &ipamv1.ExplainServiceRequest{Service: &ipamv1.ServiceRef{Namespace: h.ns, Name: "s9"}})
			if err != nil || x.Reason != "PoolExhausted" || len(x.Verdicts) == 0 || !strings.Contains(x.Decision, "tapi-one") {
				t.Errorf("ExplainService(s9) = %v, %v", x, err)
			}
			_, err = srv.ReserveAddress(ctx, &ipamv1.ReserveAddressRequest{Ip: "10.77.6.9"})
			wantCode(t, err, codes.InvalidArgument, "owner_note")
			_, err = srv.ReserveAddress(ctx, &ipamv1.ReserveAddressRequest{Ip: "10.77.6.1", OwnerNote: "taken"})
			if tc.name == "standby" {
				wantCode(t, err, codes.FailedPrecondition, "ipam-leader")
			} else {
				wantCode(t, err, codes.FailedPrecondition, "s1")
			}
		})
	}
}
