package e2e

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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
			for _, p := range objectsOf[admissionregistrationv1.ValidatingAdmissionPolicy](t, rendered, "ValidatingAdmissionPolicy") {
				policies[p.Name] = p
			}
			for _, b := range objectsOf[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, rendered, "ValidatingAdmissionPolicyBinding") {
				bindings[b.Name] = b
			}
			for _, r := range objectsOf[rbacv1.Role](t, rendered, "Role") {
				roles[r.Name] = r
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
				if component == "watcher" || component == "signer" { // not leader-elected
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
