package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/lab/testenv"
)

// TestKubectlExplainDescribesFields: the API server serves the CRDs'
// descriptions, so `kubectl explain` of a field says what it is (every
// field has one: test/e2e/reference checks the schemas).
func TestKubectlExplainDescribesFields(t *testing.T) {
	env := testenv.Get(t)
	for field, want := range map[string]string{
		"ippool.spec.allocation.namespaces":            "Serve only Services of these namespaces",
		"ippool.status.conditions.reason":              "Why, in one CamelCase word",
		"externalworkload.spec.ports.port":             "The port number",
		"externalworkload.spec.readinessProbe.httpGet": "Succeeds when a GET answers",
	} {
		out, err := env.Kubectl(context.Background(), "explain", field)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(strings.Fields(string(out)), " "), want) {
			t.Errorf("kubectl explain %s does not say %q:\n%s", field, want, out)
		}
	}
}
