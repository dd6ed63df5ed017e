// Package integration tests pkg/certsigner and pkg/servingcert together
// against a real API server, each as the ServiceAccount and under the RBAC
// components/tls-signer ships: the first CA and certificate (bootstrap),
// refusals, and the rotation of a serving certificate and of the CA.
package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/certsigner"
	"github.com/ipledger/ipledger/pkg/servingcert"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const ns = testenv.SystemNamespace

// install applies components/tls-signer's objects and RBAC (its Deployment
// is stored and never runs: the signer runs in the test) and empties the CA
// Secret and bundle as the install ships them.
func install(t *testing.T, env *testenv.Env) {
	t.Helper()
	ctx := context.Background()
	if out, err := env.Kubectl(ctx, "apply", "--server-side", "-f",
		filepath.Join(env.Root, "deploy/kustomize/components/tls-signer/signer.yaml")); err != nil {
		t.Fatalf("apply signer.yaml: %v\n%s", err, out)
	}
	empty := []byte(`{"data": null}`)
	if _, err := env.Client.CoreV1().Secrets(ns).Patch(ctx, certsigner.DefaultSecretName, types.MergePatchType, empty, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().ConfigMaps(ns).Patch(ctx, certsigner.DefaultConfigMapName, types.MergePatchType, empty, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// clientAs is a client authenticating as ServiceAccount ipledger-system/name.
func clientAs(t *testing.T, env *testenv.Env, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", env.ServiceAccountKubeconfig(t, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// run starts fn until the test ends.
func run(t *testing.T, fn func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := fn(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func startSigner(t *testing.T, env *testenv.Env, cfg certsigner.Config) *certsigner.Signer {
	cfg.Namespace = ns
	s := certsigner.New(cfg, clientAs(t, env, "ipledger-signer"), slog.Default().With("component", "signer"))
	run(t, s.Run)
	return s
}

func startServer(t *testing.T, env *testenv.Env, server string) *servingcert.Source {
	src, err := servingcert.New(servingcert.Config{SignerName: certsigner.SignerName,
		DNSNames: certsigner.DNSNames(server, ns, "cluster.local")}, clientAs(t, env, "ipledger-"+server), slog.Default().With("server", server))
	if err != nil {
		t.Fatal(err)
	}
	run(t, src.Run)
	return src
}

// bundle is the published CA bundle, parsed.
func bundle(env *testenv.Env) ([]*x509.Certificate, error) {
	cm, err := env.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), certsigner.DefaultConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var out []*x509.Certificate
	for rest := []byte(cm.Data[certsigner.BundleKey]); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return out, nil
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
}

// verifies is nil when src's certificate verifies, for its first name,
// against the published bundle, as a client of the server would check it.
func verifies(env *testenv.Env, src *servingcert.Source, server string) (*x509.Certificate, error) {
	cert, err := src.GetCertificate(nil)
	if err != nil {
		return nil, err
	}
	cas, err := bundle(env)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range cas {
		pool.AddCert(c)
	}
	_, err = cert.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: certsigner.DNSNames(server, ns, "cluster.local")[0],
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return cert.Leaf, err
}

// TestBootstrap: from the empty Secret and ConfigMap the install ships, the
// signer makes a CA and publishes it, the watcher is not ready until its
// CSR is signed and then serves a certificate for its names that the bundle
// verifies; CSRs outside the policy are denied.
func TestBootstrap(t *testing.T) {
	env := testenv.Get(t)
	install(t, env)
	ctx := context.Background()
	watcher := startServer(t, env, "watcher")
	if err := watcher.Ready(); !errors.Is(err, servingcert.ErrNoCertificate) {
		t.Fatalf("before any signer, Ready() = %v, want ErrNoCertificate", err)
	}
	signer := startSigner(t, env, certsigner.Config{})
	testenv.Eventually(t, time.Minute, signer.Ready)
	testenv.Eventually(t, time.Minute, func() error { _, err := verifies(env, watcher, "watcher"); return err })
	if err := watcher.Ready(); err != nil {
		t.Fatalf("with a certificate, Ready() = %v", err)
	}
	leaf, _ := verifies(env, watcher, "watcher")
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got > certsigner.DefaultMaxValidity+certsigner.Backdate {
		t.Errorf("certificate valid for %s, more than the cap %s", got, certsigner.DefaultMaxValidity)
	}

	// ipam asking for the watcher's names, and the admin (not an ipledger
	// server) asking for ipam's, are denied.
	ipamClient := clientAs(t, env, "ipledger-ipam")
	for _, c := range []struct {
		who    string
		client kubernetes.Interface
		names  []string
	}{
		{"ipam for the watcher's names", ipamClient, certsigner.DNSNames("watcher", ns, "cluster.local")},
		{"the admin for ipam's names", env.Client, certsigner.DNSNames("ipam", ns, "cluster.local")},
	} {
		name := createCSR(t, c.client, c.names)
		testenv.Eventually(t, time.Minute, func() error {
			csr, err := env.Client.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range csr.Status.Conditions {
				if cond.Type == certv1.CertificateDenied && cond.Status == corev1.ConditionTrue {
					if len(csr.Status.Certificate) > 0 {
						t.Fatalf("%s: denied and signed", c.who)
					}
					return nil
				}
			}
			return fmt.Errorf("%s: CSR %s not denied yet: %+v", c.who, name, csr.Status.Conditions)
		})
	}
}

func createCSR(t *testing.T, client kubernetes.Interface, names []string) string {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{DNSNames: names}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := client.CertificatesV1().CertificateSigningRequests().Create(context.Background(), &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "ipledger-test-"},
		Spec: certv1.CertificateSigningRequestSpec{SignerName: certsigner.SignerName,
			Request: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}),
			Usages:  []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return csr.Name
}

// TestRotation: with lifetimes of seconds, ipam's certificate is replaced
// before it ends, the CA is replaced when a third of its life is left, the
// bundle holds the old and the new CA while both may have signed a live
// certificate, the new CA signs only after the propagation delay, and an
// ended CA leaves the bundle. The server verifies against the bundle
// throughout.
func TestRotation(t *testing.T) {
	env := testenv.Get(t)
	install(t, env)
	startSigner(t, env, certsigner.Config{CAValidity: 12 * time.Second, MaxValidity: 3 * time.Second,
		Propagation: 2 * time.Second, CAInterval: 200 * time.Millisecond})
	ipam := startServer(t, env, "ipam")
	var first *x509.Certificate
	testenv.Eventually(t, time.Minute, func() (err error) { first, err = verifies(env, ipam, "ipam"); return err })
	firstCAs, err := bundle(env)
	if err != nil || len(firstCAs) != 1 {
		t.Fatalf("bundle after bootstrap: %d CAs, %v; want 1", len(firstCAs), err)
	}
	testenv.Eventually(t, time.Minute, func() error {
		leaf, err := verifies(env, ipam, "ipam")
		if err != nil {
			return err
		}
		if leaf.SerialNumber.Cmp(first.SerialNumber) == 0 {
			return errors.New("still the first certificate")
		}
		return nil
	})
	// The next CA: in the bundle beside the first, then signing.
	testenv.Eventually(t, time.Minute, func() error {
		cas, err := bundle(env)
		if err != nil {
			return err
		}
		if len(cas) != 2 {
			return fmt.Errorf("bundle holds %d CAs, want the new and the old", len(cas))
		}
		leaf, err := verifies(env, ipam, "ipam")
		if err != nil {
			return err
		}
		if err := leaf.CheckSignatureFrom(cas[0]); err != nil {
			return fmt.Errorf("the serving certificate is not signed by the new CA yet: %w", err)
		}
		if !cas[1].Equal(firstCAs[0]) {
			t.Fatalf("the old CA left the bundle before it ended")
		}
		return nil
	})
	// The first CA ends and leaves the bundle; ipam still verifies.
	testenv.Eventually(t, time.Minute, func() error {
		cas, err := bundle(env)
		if err != nil {
			return err
		}
		for _, c := range cas {
			if c.Equal(firstCAs[0]) {
				return errors.New("the first CA is still in the bundle")
			}
		}
		_, err = verifies(env, ipam, "ipam")
		return err
	})
}
