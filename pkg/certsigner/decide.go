package certsigner

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	certv1 "k8s.io/api/certificates/v1"
)

// SignerName is the spec.signerName of the CSRs of ipledger's gRPC servers:
// the only one this signer approves and signs, and the only one its RBAC
// names.
const SignerName = "ipledger.io/grpc-serving"

// Servers are the ipledger components that serve gRPC: each asks as its own
// ServiceAccount, ipledger-<server>, for the names of its own Service.
var Servers = []string{"watcher", "ipam", "eipd"}

// Policy is who may ask for which names: a ServiceAccount's user name
// (system:serviceaccount:<namespace>:<name>) and the exact DNS names it
// gets.
type Policy map[string][]string

// DefaultPolicy is the Policy of Servers in namespace: ipledger-<server>
// asks for ipledger-<server>.<namespace>.svc.<clusterDomain> (what the
// clients dial) and ipledger-<server>.<namespace>.svc (what kubectl
// ipledger and grpcurl use).
func DefaultPolicy(namespace, clusterDomain string) Policy {
	p := Policy{}
	for _, s := range Servers {
		svc := "ipledger-" + s + "." + namespace + ".svc"
		p["system:serviceaccount:"+namespace+":ipledger-"+s] = []string{svc + "." + clusterDomain, svc}
	}
	return p
}

// DNSNames is what a server asks for in namespace: DefaultPolicy's names.
func DNSNames(server, namespace, clusterDomain string) []string {
	return DefaultPolicy(namespace, clusterDomain)["system:serviceaccount:"+namespace+":ipledger-"+server]
}

// allowedUsages are the key usages a serving certificate may carry.
var allowedUsages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth}

// Review decides whether a CSR of SignerName is signed: nil when its
// requester is one of p's ServiceAccounts and it asks, with a valid
// signature, for exactly that account's names, server auth and an ECDSA
// P-256 or P-384 key; otherwise the reason it is denied. It is also run
// before signing a CSR someone else approved: nothing outside the policy is
// signed.
func (p Policy) Review(spec certv1.CertificateSigningRequestSpec) (*x509.CertificateRequest, error) {
	want, ok := p[spec.Username]
	if !ok {
		return nil, fmt.Errorf("requester %q is not one of ipledger's gRPC servers (ServiceAccounts ipledger-watcher, ipledger-ipam, ipledger-eipd)", spec.Username)
	}
	block, _ := pem.Decode(spec.Request)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, errors.New("spec.request holds no PEM CERTIFICATE REQUEST")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("spec.request: %w", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, fmt.Errorf("spec.request's signature: %w", err)
	}
	got := slices.Sorted(slices.Values(req.DNSNames))
	if !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		return nil, fmt.Errorf("DNS names %q: %s may ask for exactly %q", req.DNSNames, spec.Username, want)
	}
	if len(req.IPAddresses) > 0 || len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return nil, errors.New("IP, email or URI names are never signed: ask for DNS names only")
	}
	if cn := req.Subject.CommonName; cn != "" && !slices.Contains(want, cn) {
		return nil, fmt.Errorf("common name %q is not one of the DNS names", cn)
	}
	for _, u := range spec.Usages {
		if !slices.Contains(allowedUsages, u) {
			return nil, fmt.Errorf("usage %q: a serving certificate may have only %q", u, allowedUsages)
		}
	}
	if !slices.Contains(spec.Usages, certv1.UsageServerAuth) {
		return nil, fmt.Errorf("usages %q lack %q", spec.Usages, certv1.UsageServerAuth)
	}
	if k, ok := req.PublicKey.(*ecdsa.PublicKey); !ok || (k.Curve != elliptic.P256() && k.Curve != elliptic.P384()) {
		return nil, fmt.Errorf("public key %T: want ECDSA P-256 or P-384", req.PublicKey)
	}
	return req, nil
}

// Backdate is how far before its signing a certificate's NotBefore is set,
// so that a node whose clock is a little behind still accepts it.
const Backdate = 5 * time.Minute

// LeafWindow is the validity of a certificate signed at now for a CSR
// asking for requested seconds (nil: max): at most max, and never beyond
// the signing CA's end.
func LeafWindow(now time.Time, requested *int32, max time.Duration, caNotAfter time.Time) (notBefore, notAfter time.Time) {
	d := max
	if requested != nil && time.Duration(*requested)*time.Second < max {
		d = time.Duration(*requested) * time.Second
	}
	notAfter = now.Add(d)
	if notAfter.After(caNotAfter) {
		notAfter = caNotAfter
	}
	return now.Add(-Backdate), notAfter
}

// CAPlan is what to do with the CAs in the Secret at now.
type CAPlan struct {
	// Live are the CAs kept (those not ended), newest first; the bundle
	// every client trusts.
	Live []*x509.Certificate
	// Generate asks for a new CA: there is none, or the newest has less
	// than a third of its life left.
	Generate bool
	// Signing is the index in Live of the CA that signs now: the newest
	// that has been in the bundle for propagation (the kubelet's ConfigMap
	// sync and the clients' re-read), or the newest when it is the only one.
	Signing int
}

// PlanCAs decides on cas (any order) at now.
func PlanCAs(cas []*x509.Certificate, now time.Time, propagation time.Duration) CAPlan {
	var p CAPlan
	for _, c := range cas {
		if now.Before(c.NotAfter) {
			p.Live = append(p.Live, c)
		}
	}
	slices.SortStableFunc(p.Live, func(a, b *x509.Certificate) int { return b.NotBefore.Compare(a.NotBefore) })
	if len(p.Live) == 0 {
		p.Generate = true
		return p
	}
	newest := p.Live[0]
	life := newest.NotAfter.Sub(newest.NotBefore.Add(Backdate))
	p.Generate = newest.NotAfter.Sub(now) < life/3
	p.Signing = len(p.Live) - 1
	for i, c := range p.Live {
		if !now.Before(c.NotBefore.Add(Backdate + propagation)) {
			p.Signing = i
			break
		}
	}
	return p
}
