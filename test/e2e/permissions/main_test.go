// Package permissions proves, against a real kube-apiserver, what each
// ipledger ServiceAccount may write under the RBAC and the
// ValidatingAdmissionPolicies that deploy/kustomize/base ships (applied by
// testenv from base/crds and base/rbac): each component only its own
// objects, and the ledger only ipam (docs/security.md). The tests act as each
// ServiceAccount by impersonation.
package permissions

import (
	"testing"

	"github.com/ipledger/ipledger/lab/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
