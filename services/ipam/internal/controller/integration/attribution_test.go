package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// TestReservationEventsNameTheCaller: a reservation made and released by a
// caller (a person the aggregated API authenticated, or a gRPC caller's
// ServiceAccount) is recorded in Events on the ledger naming them.
func TestReservationEventsNameTheCaller(t *testing.T) {
	h := newHarness(t)
	ctx := authz.WithUser(context.Background(), authenticationv1.UserInfo{Username: "alice@example.com"})
	h.pool("tattr-one", "10.77.9.0/30")
	leader := h.start("ipam-0")
	h.waitForHolder("ipam-0")
	srv := h.api(leader)
	testenv.Eventually(t, wait, func() error {
		_, err := srv.ReserveAddress(ctx, &ipamv1.ReserveAddressRequest{Ip: "10.77.9.2", OwnerNote: "router VIP"})
		return err
	})
	if _, err := srv.ReleaseReservation(ctx, &ipamv1.ReleaseReservationRequest{Ip: "10.77.9.2"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"AddressReserved":     "alice@example.com reserved 10.77.9.2: router VIP",
		"ReservationReleased": "alice@example.com released the reservation of 10.77.9.2 (router VIP)",
	}
	testenv.Eventually(t, wait, func() error {
		evs, err := h.env.Client.CoreV1().Events(h.ledgerNS).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + ledger.HeadName})
		if err != nil {
			return err
		}
		for reason, msg := range want {
			found := false
			for _, e := range evs.Items {
				found = found || e.Reason == reason && strings.Contains(e.Message, msg)
			}
			if !found {
				return fmt.Errorf("no %s Event %q among %d", reason, msg, len(evs.Items))
			}
		}
		return nil
	})
}
