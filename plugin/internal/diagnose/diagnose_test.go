package diagnose

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

func TestExplain(t *testing.T) {
	viaPod := Call{Method: "ReserveAddress", Pod: "ipledger-ipam-1", Where: "ipam Pod ipledger-system/ipledger-ipam-1"}
	direct := Call{Method: "ListPools", Where: "ipam at 10.0.0.1:9443"}
	for _, tc := range []struct {
		name string
		err  error
		call Call
		want []string
	}{
		{"a reader without the binding", status.Error(codes.PermissionDenied, `user "system:serviceaccount:ops:me" may not list allocations.ipledger.io`), direct,
			[]string{"no permission: user", "ClusterRole ipledger:viewer (list allocations.ipledger.io)", "--clusterrole=ipledger:viewer --serviceaccount=NAMESPACE:NAME"}},
		{"a person through the aggregated API", status.Error(codes.PermissionDenied, `reservations.api.ipledger.io is forbidden: User "grace" cannot create resource "reservations"`),
			Call{Method: "ReserveAddress", Aggregated: true},
			[]string{`User "grace" cannot create`, "ClusterRole ipledger:operator (create reservations.ipledger.io) to yourself", "--clusterrole=ipledger:operator --user=YOU"}},
		{"a writer without the binding", status.Error(codes.PermissionDenied, "may not create reservations.ipledger.io"), viaPod,
			[]string{"ipledger:operator (create reservations.ipledger.io)", "--clusterrole=ipledger:operator "}},
		{"a method the table lacks", status.Error(codes.PermissionDenied, "may not"), Call{Method: "Future"},
			[]string{"ipledger:viewer or ipledger:operator", "--clusterrole=ipledger:viewer "}},
		{"a refused token", status.Error(codes.Unauthenticated, "bearer token rejected"), direct,
			[]string{"ipam refused the token: bearer token rejected", "--service-account", "--token-file"}},
		{"a standby behind --ipam-address", status.Error(codes.FailedPrecondition, `this replica is not the leader; send reservations to the leader, "ipam-a"`), Call{Method: "ReserveAddress", Where: "ipam at 10.0.0.2:9443"},
			[]string{`ipam at 10.0.0.2:9443 is a standby: this replica is not the leader; send reservations to the leader, "ipam-a"`, "drop --ipam-address"}},
		{"a standby through the port-forward: leadership moved", status.Error(codes.FailedPrecondition, "this replica is not the leader; ..."), viaPod,
			[]string{"ipam Pod ipledger-system/ipledger-ipam-1 is a standby", "fix: retry"}},
		{"another precondition", status.Error(codes.FailedPrecondition, "ip: 10.0.0.5 is held by shop/web"), viaPod,
			[]string{"ipam refused: ip: 10.0.0.5 is held by shop/web"}},
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), direct,
			[]string{"ipam unreachable (ipam at 10.0.0.1:9443): connection refused", "--ipam-address is right"}},
		{"not found is the server's words", status.Error(codes.NotFound, "ip: 10.0.0.5 is not reserved"), viaPod,
			[]string{"ip: 10.0.0.5 is not reserved"}},
		{"not a gRPC status", errors.New("plain"), direct, []string{"plain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Explain(tc.err, tc.call).Error()
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("Explain: %q lacks %q", got, w)
				}
			}
		})
	}
}

// Every method of IPAMService has a role to name, so no refusal falls back
// to a guess; a new RPC fails here until the table names its role.
func TestEveryMethodHasARole(t *testing.T) {
	methods := ipamv1.File_ipledger_ipam_v1_ipam_service_proto.Services().ByName("IPAMService").Methods()
	for i := range methods.Len() {
		if name := string(methods.Get(i).Name()); roles[name] == "" {
			t.Errorf("roles has no entry for IPAMService.%s: add the ClusterRole services/ipam's authorization table gives it", name)
		}
	}
}
