package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// fences are the ValidatingAdmissionPolicies every install must carry
// (docs/security.md): without one, RBAC alone lets a component, or anyone
// with edit in ipledger-system, write what it should not.
var fences = []string{"ipledger-ippool-ranges", "ipledger-ledger-writers", "ipledger-endpoints-own-slices", "ipledger-eipd-node-labels", "ipledger-own-leases"}

// TestEveryInstallShipsTheFences: every kustomization ships each policy with
// a binding that denies (not only warns or audits) and fails closed, and
// each leader-elected component's Role names the Lease its Deployment
// campaigns for, and only that one, for get and update.
// test/e2e/permissions proves what the policies and rules refuse.
func TestEveryInstallShipsTheFences(t *testing.T) {
	for _, k := range kustomizations {
		t.Run(k, func(t *testing.T) {
			rendered := render(t, k)
			policies := map[string]admissionregistrationv1.ValidatingAdmissionPolicy{}
			bindings := map[string]admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
			roles := map[string]rbacv1.Role{}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(rendered), 4096)
			for {
				var doc json.RawMessage
				err := dec.Decode(&doc)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				var kind struct {
					Kind string `json:"kind"`
				}
				unmarshal(t, doc, &kind)
				switch kind.Kind {
				case "ValidatingAdmissionPolicy":
					var p admissionregistrationv1.ValidatingAdmissionPolicy
					unmarshal(t, doc, &p)
					policies[p.Name] = p
				case "ValidatingAdmissionPolicyBinding":
					var b admissionregistrationv1.ValidatingAdmissionPolicyBinding
					unmarshal(t, doc, &b)
					bindings[b.Name] = b
				case "Role":
					var r rbacv1.Role
					unmarshal(t, doc, &r)
					roles[r.Name] = r
				}
			}
			for _, name := range fences {
				p, ok := policies[name]
				if !ok {
					t.Errorf("no ValidatingAdmissionPolicy %s", name)
					continue
				}
				if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
					t.Errorf("policy %s: failurePolicy %v, want Fail", name, p.Spec.FailurePolicy)
				}
				b, ok := bindings[name]
				switch {
				case !ok:
					t.Errorf("no ValidatingAdmissionPolicyBinding %s", name)
				case b.Spec.PolicyName != name || !slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}):
					t.Errorf("binding %s: policy %q, actions %v; want %s, [Deny]", name, b.Spec.PolicyName, b.Spec.ValidationActions, name)
				case b.Spec.ParamRef != nil || b.Spec.MatchResources != nil:
					t.Errorf("binding %s narrows its policy (paramRef %v, matchResources %v)", name, b.Spec.ParamRef, b.Spec.MatchResources)
				}
			}
			for _, d := range deployments(t, rendered) {
				component := strings.TrimPrefix(d.Name, "ipledger-")
				if component == "watcher" {
					continue
				}
				lease := d.Name // each app's default Lease name is its binary's
				for _, a := range d.Spec.Template.Spec.Containers[0].Args {
					if v, ok := strings.CutPrefix(a, "--leader-elect-lease-name="); ok {
						lease = v
					}
				}
				role, ok := roles["ipledger:"+component]
				if !ok {
					t.Errorf("no Role ipledger:%s", component)
					continue
				}
				var named []string
				for _, r := range role.Rules {
					if !slices.Contains(r.Resources, "leases") {
						continue
					}
					if slices.Contains(r.Verbs, "get") || slices.Contains(r.Verbs, "update") || slices.Contains(r.Verbs, "*") {
						if len(r.ResourceNames) == 0 {
							t.Errorf("Role ipledger:%s: %v on every Lease", component, r.Verbs)
						}
						named = append(named, r.ResourceNames...)
					}
				}
				if !slices.Equal(named, []string{lease}) {
					t.Errorf("Role ipledger:%s: get/update on Leases %v; Deployment %s campaigns for %s", component, named, d.Name, lease)
				}
			}
		})
	}
}

func unmarshal(t *testing.T, doc []byte, into any) {
	t.Helper()
	if err := json.Unmarshal(doc, into); err != nil {
		t.Fatal(err)
	}
}
