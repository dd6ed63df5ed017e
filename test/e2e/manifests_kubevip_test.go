package e2e

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	"github.com/ipledger/ipledger/lab/testenv"
)

// kubeVIPKustomization is the base with components/kube-vip.
const kubeVIPKustomization = "testdata/kube-vip"

// TestKubeVIPComponentRenders: components/kube-vip renders on the base and
// applies (server-side dry run); it turns on ipam's
// --write-kube-vip-annotation and ships its policy with a binding that
// denies and fails closed, exempting exactly the ServiceAccount the ipam
// Deployment runs as (test/e2e/permissions proves what the policy refuses).
func TestKubeVIPComponentRenders(t *testing.T) {
	rendered := renderDir(t, kubeVIPKustomization)
	var ipamUser string
	for _, d := range deployments(t, rendered) {
		if d.Name != "ipledger-ipam" {
			continue
		}
		ipamUser = "system:serviceaccount:" + d.Namespace + ":" + d.Spec.Template.Spec.ServiceAccountName
		if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--write-kube-vip-annotation=true") {
			t.Errorf("ipam's args %v lack --write-kube-vip-annotation=true", args)
		}
	}
	const name = "ipledger-kube-vip-addresses"
	var found bool
	for _, p := range objectsOf[admissionregistrationv1.ValidatingAdmissionPolicy](t, rendered, "ValidatingAdmissionPolicy") {
		if p.Name != name {
			continue
		}
		found = true
		if p.Spec.FailurePolicy == nil || *p.Spec.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("policy %s: failurePolicy %v, want Fail", name, p.Spec.FailurePolicy)
		}
		if !slices.ContainsFunc(p.Spec.MatchConditions, func(c admissionregistrationv1.MatchCondition) bool {
			return strings.Contains(c.Expression, "'"+ipamUser+"'")
		}) {
			t.Errorf("policy %s exempts no %s, the user ipam runs as: an install in another namespace must patch it", name, ipamUser)
		}
	}
	if !found {
		t.Errorf("no ValidatingAdmissionPolicy %s", name)
	}
	var bound bool
	for _, b := range objectsOf[admissionregistrationv1.ValidatingAdmissionPolicyBinding](t, rendered, "ValidatingAdmissionPolicyBinding") {
		if b.Name == name {
			bound = b.Spec.PolicyName == name && slices.Equal(b.Spec.ValidationActions, []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny}) &&
				b.Spec.ParamRef == nil && b.Spec.MatchResources == nil
		}
	}
	if !bound {
		t.Errorf("no ValidatingAdmissionPolicyBinding %s that denies with its policy, unnarrowed", name)
	}

	env := testenv.Get(t)
	abs, err := filepath.Abs(kubeVIPKustomization)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(env.CP.BinDir, "kubectl"), "--kubeconfig", env.CP.KubeconfigPath,
		"apply", "--server-side", "--force-conflicts", "--dry-run=server", "--validate=strict", "-k", abs)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if out, err := cmd.Output(); err != nil {
		t.Fatalf("apply: %v\n%s", err, stderr.String())
	} else if !strings.Contains(string(out), name) {
		t.Errorf("the policy was not applied:\n%s", out)
	}
}
