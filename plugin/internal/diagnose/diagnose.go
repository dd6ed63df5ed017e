// Package diagnose turns the errors of ipam's API into messages that say
// what to do: which ClusterRole to bind, which replica leads, whether ipam
// was reached at all. It is pure: the commands hand it the error and what
// they know.
package diagnose

import (
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/pkg/install"
)

// Call is what a command knows about the call that failed.
type Call struct {
	// Method is the RPC's name, e.g. "ListAllocations".
	Method string
	// Pod is the ipam Pod reached, "" with --ipam-address.
	Pod string
	// Where names how ipam was reached, e.g. "ipam Pod ipledger-system/ipledger-ipam-0" or "ipam at 10.0.0.1:9443".
	Where string
	// Aggregated: the call went through the aggregated API as the
	// kubeconfig's own user, not as a ServiceAccount.
	Aggregated bool
}

// roles says which ClusterRole of deploy/kustomize/base/rbac/grpc-roles.yaml
// grants each method (services/ipam's authorization table).
var roles = map[string]string{
	"ListAllocations":    "ipledger:viewer (list allocations.ipledger.io)",
	"ListPools":          "ipledger:viewer (list allocations.ipledger.io)",
	"GetAllocation":      "ipledger:viewer (get allocations.ipledger.io)",
	"ExplainService":     "ipledger:viewer (get allocations.ipledger.io)",
	"PreviewPool":        "ipledger:viewer (get allocations.ipledger.io)",
	"AddressHistory":     "ipledger:viewer (get history.ipledger.io), or a Role granting it in your namespaces",
	"ReserveAddress":     "ipledger:operator (create reservations.ipledger.io)",
	"ReleaseReservation": "ipledger:operator (delete reservations.ipledger.io)",
}

// Explain wraps err, a gRPC status from ipam, with the fix.
func Explain(err error, call Call) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	msg := st.Message()
	switch st.Code() {
	case codes.PermissionDenied:
		role := roles[call.Method]
		if role == "" {
			role = "ipledger:viewer or ipledger:operator"
		}
		if call.Aggregated {
			return fmt.Errorf("no permission: %s\nfix: bind the ClusterRole %s to yourself (the kubeconfig's user or one of its groups), e.g.\n  kubectl create clusterrolebinding NAME --clusterrole=%s --user=YOU",
				msg, role, strings.Fields(role)[0])
		}
		return fmt.Errorf("no permission: %s\nfix: bind the ClusterRole %s to that ServiceAccount, e.g.\n  kubectl create clusterrolebinding NAME --clusterrole=%s --serviceaccount=NAMESPACE:NAME",
			msg, role, strings.Fields(role)[0])
	case codes.Unauthenticated:
		return fmt.Errorf("ipam refused the token: %s\nfix: pass --service-account (the plugin requests a token for it) or a current --token-file for audience ipledger.io/ipam", msg)
	case codes.FailedPrecondition:
		if strings.Contains(msg, "not the leader") {
			fix := "retry: the plugin goes to the holder of ipam's Lease, and leadership has just moved"
			if call.Pod == "" {
				fix = "drop --ipam-address (the plugin then goes to the Lease holder itself), or point it at the leader"
			}
			return fmt.Errorf("%s is a standby: %s\nfix: %s", call.Where, msg, fix)
		}
		return fmt.Errorf("ipam refused: %s", msg)
	case codes.Unavailable:
		return fmt.Errorf("ipam unreachable (%s): %s\nfix: check that ipam is running and Ready (kubectl -n %s get pods -l app.kubernetes.io/name=ipledger-ipam), that --ipam-address is right, and that TLS matches (--ipam-ca-file when ipam serves TLS)", call.Where, msg, install.DefaultNamespace)
	case codes.DeadlineExceeded:
		return fmt.Errorf("ipam did not answer in time (%s): %s", call.Where, msg)
	case codes.NotFound, codes.InvalidArgument:
		return fmt.Errorf("%s", msg)
	}
	return fmt.Errorf("ipam: %s: %s", st.Code(), msg)
}
