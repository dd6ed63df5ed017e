package e2e

import (
	"context"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/certsigner"
)

// certManagerInstall is an install with components/tls and
// components/cert-manager; it is rendered, never applied (no cert-manager
// CRDs in the tests' API servers, none on the test node).
const certManagerInstall = "testdata/cert-manager"

// renderDir renders a kustomization outside deploy/kustomize.
func renderDir(t *testing.T, dir string) []byte {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	out, err := testenv.Get(t).Kubectl(context.Background(), "kustomize", abs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// privateKeySecrets returns, for each Secret of the Deployment's pods whose
// volume carries a private key (the whole Secret, or an item tls.key or
// ca.key), the keys it carries ("*" for all).
func privateKeySecrets(d appsv1.Deployment) map[string]string {
	out := map[string]string{}
	carries := func(name string, items []string) {
		if len(items) == 0 {
			out[name] = "*"
			return
		}
		for _, k := range items {
			if k == "tls.key" || k == "ca.key" {
				out[name] = k
			}
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if s := v.Secret; s != nil {
			var items []string
			for _, i := range s.Items {
				items = append(items, i.Key)
			}
			carries(s.SecretName, items)
		}
		if p := v.Projected; p != nil {
			for _, src := range p.Sources {
				if s := src.Secret; s != nil {
					var items []string
					for _, i := range s.Items {
						items = append(items, i.Key)
					}
					carries(s.Name, items)
				}
			}
		}
	}
	return out
}

// TestOnlyItsServerMountsAPrivateKey: in every install, a volume that
// carries a private key (a whole Secret, or its tls.key or ca.key) is
// mounted only by the Deployment whose server the Secret names —
// ipledger-ipam-tls by ipledger-ipam — so endpoints, which dials addresses
// tenants give it, never holds a key, and the CA's Secret is mounted by
// nobody. In the TLS installs every server mounts its own.
func TestOnlyItsServerMountsAPrivateKey(t *testing.T) {
	for _, k := range append(slices.Clone(kustomizations), certManagerInstall) {
		t.Run(k, func(t *testing.T) {
			var rendered []byte
			if k == certManagerInstall {
				rendered = renderDir(t, k)
			} else {
				rendered = render(t, k)
			}
			tlsInstall := strings.Contains(string(rendered), "--grpc-tls-key-file")
			for _, d := range deployments(t, rendered) {
				for secret, key := range privateKeySecrets(d) {
					if secret != d.Name+"-tls" {
						t.Errorf("Deployment %s mounts Secret %s (%s), which carries a private key not its own", d.Name, secret, key)
					}
				}
				if !tlsInstall {
					continue
				}
				serves := false
				for _, a := range d.Spec.Template.Spec.Containers[0].Args {
					serves = serves || strings.HasPrefix(a, "--grpc-tls-key-file=")
				}
				if _, mounted := privateKeySecrets(d)[d.Name+"-tls"]; serves != mounted {
					t.Errorf("Deployment %s: serves TLS %v, mounts %s-tls %v", d.Name, serves, d.Name, mounted)
				}
			}
		})
	}
}

// certificate is what the test reads of a cert-manager Certificate.
type certificate struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec struct {
		IsCA       bool     `json:"isCA"`
		SecretName string   `json:"secretName"`
		DNSNames   []string `json:"dnsNames"`
		Usages     []string `json:"usages"`
		IssuerRef  struct {
			Name string `json:"name"`
			Kind string `json:"kind"`
		} `json:"issuerRef"`
		// Issuer fields.
		SelfSigned *struct{} `json:"selfSigned"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca"`
	} `json:"spec"`
}

// TestCertManagerIssuesTheSecretsTLSMounts renders components/cert-manager
// beside components/tls and checks, without a cert-manager to run it, that
// its Certificates produce exactly the Secrets the Deployments mount, each
// for the names its clients dial (the host of every --watcher-addr for the
// watcher; ipledger-<server>.<namespace>.svc, what kubectl ipledger and
// grpcurl dial, for each server), issued by a CA Issuer whose CA is a
// self-signed Certificate no Pod mounts.
func TestCertManagerIssuesTheSecretsTLSMounts(t *testing.T) {
	rendered := renderDir(t, certManagerInstall)
	ds := deployments(t, rendered)
	issuers := map[string]certificate{}
	certs := map[string]certificate{} // by secretName
	for _, c := range objectsOf[certificate](t, rendered, "Issuer") {
		issuers[c.Metadata.Name] = c
	}
	for _, c := range objectsOf[certificate](t, rendered, "Certificate") {
		if c.Metadata.Namespace != "ipledger-system" {
			t.Errorf("Certificate %s is in namespace %q, want ipledger-system", c.Metadata.Name, c.Metadata.Namespace)
		}
		certs[c.Spec.SecretName] = c
	}

	// Which names each server's certificate must carry.
	want := map[string][]string{}
	mounted := map[string]bool{}
	for _, d := range ds {
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Secret != nil {
				mounted[v.Secret.SecretName] = true
			}
			if v.Projected != nil {
				for _, s := range v.Projected.Sources {
					if s.Secret != nil {
						mounted[s.Secret.Name] = true
					}
				}
			}
		}
		for _, a := range d.Spec.Template.Spec.Containers[0].Args {
			if addr, ok := strings.CutPrefix(a, "--watcher-addr="); ok {
				u, err := url.Parse(addr)
				if err != nil {
					t.Fatal(err)
				}
				host := strings.TrimPrefix(u.Path, "/")
				if i := strings.LastIndex(host, ":"); i > 0 {
					host = host[:i]
				}
				want["ipledger-watcher-tls"] = append(want["ipledger-watcher-tls"], host)
			}
			if strings.HasPrefix(a, "--grpc-tls-key-file=") {
				want[d.Name+"-tls"] = append(want[d.Name+"-tls"], d.Name+".ipledger-system.svc")
			}
		}
	}
	if len(want) != 3 {
		t.Fatalf("servers with TLS: %v, want the watcher, ipam and eipd", want)
	}
	for secret := range mounted {
		c, ok := certs[secret]
		if !ok {
			t.Errorf("a Deployment mounts Secret %s, which no Certificate issues", secret)
			continue
		}
		for _, n := range want[secret] {
			if !slices.Contains(c.Spec.DNSNames, n) {
				t.Errorf("Certificate %s (Secret %s) has dnsNames %v, lacks %s", c.Metadata.Name, secret, c.Spec.DNSNames, n)
			}
		}
		if !slices.Contains(c.Spec.Usages, "server auth") {
			t.Errorf("Certificate %s has usages %v, want server auth", c.Metadata.Name, c.Spec.Usages)
		}
		issuer, ok := issuers[c.Spec.IssuerRef.Name]
		if !ok || c.Spec.IssuerRef.Kind != "Issuer" || issuer.Spec.CA == nil {
			t.Errorf("Certificate %s is issued by %+v, want a CA Issuer of the component", c.Metadata.Name, c.Spec.IssuerRef)
			continue
		}
		ca, ok := certs[issuer.Spec.CA.SecretName]
		if !ok || !ca.Spec.IsCA || issuers[ca.Spec.IssuerRef.Name].Spec.SelfSigned == nil {
			t.Errorf("Issuer %s's CA Secret %s is not a self-signed CA Certificate of the component", issuer.Metadata.Name, issuer.Spec.CA.SecretName)
		}
		if mounted[issuer.Spec.CA.SecretName] {
			t.Errorf("a Deployment mounts the CA's Secret %s", issuer.Spec.CA.SecretName)
		}
	}
	for secret := range want {
		if !mounted[secret] {
			t.Errorf("no Deployment mounts %s", secret)
		}
	}
	if len(certs) != len(mounted)+1 {
		t.Errorf("Certificates for Secrets %v; want one per mounted Secret %v and the CA", slices.Sorted(maps.Keys(certs)), mounted)
	}
}

// TestSignerNamesWhatItsPolicySigns: in overlays/production
// (components/tls-signer) each server asks for exactly the names
// ipledger-signer's policy signs for its ServiceAccount — a server asking
// for one name more or less would be denied and never become Ready — and
// those names hold the host of every --watcher-addr its clients dial; the
// signer runs as the ServiceAccount its RBAC is bound to and no Deployment
// mounts a Secret.
func TestSignerNamesWhatItsPolicySigns(t *testing.T) {
	policy := certsigner.DefaultPolicy("ipledger-system", "cluster.local")
	var watcherHosts []string
	for _, tc := range []struct {
		name     string
		rendered []byte
		servers  []string // the Deployments that ask the signer
	}{
		{"overlays/production", render(t, "overlays/production"), []string{"ipledger-ipam", "ipledger-watcher"}},
		{"base with components/eip and tls-signer", renderDir(t, "testdata/eip-tls-signer"), []string{"ipledger-eipd", "ipledger-ipam", "ipledger-watcher"}},
	} {
		var servers []string
		for _, d := range deployments(t, tc.rendered) {
			if len(privateKeySecrets(d)) > 0 {
				t.Errorf("Deployment %s mounts Secrets %v; with the signer no key is in a volume", d.Name, privateKeySecrets(d))
			}
			var signer string
			var names []string
			for _, a := range d.Spec.Template.Spec.Containers[0].Args {
				if v, ok := strings.CutPrefix(a, "--grpc-tls-signer="); ok {
					signer = v
				}
				if v, ok := strings.CutPrefix(a, "--grpc-tls-dns-names="); ok {
					names = strings.Split(v, ",")
				}
				if addr, ok := strings.CutPrefix(a, "--watcher-addr="); ok {
					u, err := url.Parse(addr)
					if err != nil {
						t.Fatal(err)
					}
					host := strings.TrimPrefix(u.Path, "/")
					watcherHosts = append(watcherHosts, host[:strings.LastIndex(host, ":")])
				}
			}
			if d.Name == "ipledger-signer" && d.Spec.Template.Spec.ServiceAccountName != "ipledger-signer" {
				t.Errorf("the signer runs as %q, not the ServiceAccount its RBAC is bound to", d.Spec.Template.Spec.ServiceAccountName)
			}
			if signer == "" {
				continue
			}
			servers = append(servers, d.Name)
			if signer != certsigner.SignerName {
				t.Errorf("Deployment %s asks signer %q, want %q", d.Name, signer, certsigner.SignerName)
			}
			user := "system:serviceaccount:ipledger-system:" + d.Spec.Template.Spec.ServiceAccountName
			if want := policy[user]; !slices.Equal(slices.Sorted(slices.Values(names)), slices.Sorted(slices.Values(want))) {
				t.Errorf("Deployment %s (%s) asks for %q; the signer signs exactly %q", d.Name, user, names, want)
			}
		}
		slices.Sort(servers)
		if !slices.Equal(servers, tc.servers) {
			t.Errorf("%s: Deployments %v use the signer, want %v", tc.name, servers, tc.servers)
		}
	}
	for _, h := range watcherHosts {
		if !slices.Contains(policy["system:serviceaccount:ipledger-system:ipledger-watcher"], h) {
			t.Errorf("clients dial the watcher at %q, a name its certificate does not carry", h)
		}
	}
}
