package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/services/ipam/internal/ledger"
)

// kept returns what the ledger keeps: "ns/name=ip" for each kept
// reservation, sorted.
func (h *harness) kept() []string {
	h.t.Helper()
	st, err := ledger.Read(context.Background(), h.env.Client, h.ledgerNS)
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, r := range st.Reservations {
		if _, ok := r.Kept(); ok {
			out = append(out, r.ForService.Key()+"="+r.IP.String())
		}
	}
	slices.Sort(out)
	return out
}

// expectKept waits until the ledger keeps exactly want ("ns/name=ip"); an
// entry "ns/a|ns/b=ip" is kept for either.
func (h *harness) expectKept(want ...string) {
	h.t.Helper()
	testenv.Eventually(h.t, wait, func() error {
		got := h.kept()
		ok := len(got) == len(want)
		for _, w := range want {
			names, ip, _ := strings.Cut(w, "=")
			ok = ok && slices.ContainsFunc(strings.Split(names, "|"), func(n string) bool { return slices.Contains(got, n+"="+ip) })
		}
		if !ok {
			return fmt.Errorf("the ledger keeps %v, want %v", got, want)
		}
		return nil
	})
}

func (h *harness) deleteService(names ...string) {
	h.t.Helper()
	for _, n := range names {
		if err := h.env.Client.CoreV1().Services(h.ns).Delete(context.Background(), n, metav1.DeleteOptions{}); err != nil {
			h.t.Fatal(err)
		}
	}
}

func port(p int32) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Spec.Ports[0].Port = p }
}

// Delete and re-create within the grace period: the same addresses — a
// single one, both families of a dual-stack Service, an address two
// Services shared (deleted together, back in the other order) — across a
// restart of ipam, while a new Service created meanwhile gets a fresh one.
func TestKeptAddressesComeBack(t *testing.T) {
	h := newHarness(t)
	h.keepReleased = time.Hour
	pool := "tkept-" + h.lease[len("ipam-"):]
	h.pool(pool, "10.81.1.0/29", "2001:db8:81:1::/125")
	require := func(s *corev1.Service) { p := corev1.IPFamilyPolicyRequireDualStack; s.Spec.IPFamilyPolicy = &p }
	v6first := func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	}
	shared := map[string]string{"ipledger.io/allow-shared-ip": "k"}
	r := h.start("ipam-0")
	held := map[string]string{"web": "10.81.1.0", "dual": "2001:db8:81:1::1,10.81.1.1", "sa": "10.81.1.2", "sb": "10.81.1.2"}
	h.service("web", nil)
	h.expect(wait, map[string]string{"web": held["web"]})
	h.service("dual", nil, require, v6first)
	h.expect(wait, map[string]string{"dual": held["dual"]})
	h.service("sa", shared, port(80))
	h.expect(wait, map[string]string{"sa": held["sa"]})
	h.service("sb", shared, port(443))
	h.expect(wait, held)

	h.deleteService("web", "dual", "sa", "sb")
	ns := h.ns + "/"
	h.expectKept(ns+"web=10.81.1.0", ns+"dual=10.81.1.1", ns+"dual=2001:db8:81:1::1", ns+"sa|"+ns+"sb=10.81.1.2")
	h.service("new", nil)
	h.expect(wait, map[string]string{"new": "10.81.1.3"})

	h.restart(r, "ipam-1")
	// Back, in another order: the second sharer first.
	h.service("sb", shared, port(443))
	h.service("dual", nil, require, v6first)
	h.service("web", nil)
	h.service("sa", shared, port(80))
	h.expect(wait, held)
	h.expectKept()
	st := h.state()
	for _, name := range []string{"web", "dual", "sb"} {
		if st.reason[name] != "Allocated" || !strings.Contains(st.msg[name], "given back") {
			t.Errorf("%s: condition %s %q, want Allocated saying the kept address was given back", name, st.reason[name], st.msg[name])
		}
	}
}

// Nobody waits for a kept address while another is free; with nothing else
// free a waiter takes the one kept longest, and says so. After its grace
// period a kept address is free (and reused last): the Service created
// again then gets another.
func TestKeptAddressesStarveNoOneAndExpire(t *testing.T) {
	h := newHarness(t)
	h.keepReleased = time.Hour
	suffix := h.lease[len("ipam-"):]
	full, short := "tkept-full-"+suffix, "tkept-short-"+suffix
	h.poolIn(full, []string{h.ns}, "10.81.2.0/31")
	h.poolSpec(short, map[string]any{"addresses": []any{"10.81.3.0/30"}, "autoAssign": false,
		"allocation": map[string]any{"keepReleasedSeconds": int64(2)}})
	onShort := map[string]string{"ipledger.io/address-pool": short}
	h.service("a", nil)
	h.service("b", nil)
	h.service("x", onShort)
	h.watchDuplicates()
	h.start("ipam-0")
	h.expect(wait, map[string]string{"a": "10.81.2.0", "b": "10.81.2.1", "x": "10.81.3.0"})

	h.deleteService("a", "x")
	h.expectKept(h.ns + "/a=10.81.2.0")
	h.service("waiter", nil)
	h.expect(wait, map[string]string{"waiter": "10.81.2.0"})
	if msg := h.state().msg["waiter"]; !strings.Contains(msg, "took 10.81.2.0 (kept for Service "+h.ns+"/a since") || !strings.Contains(msg, "no other free address") {
		t.Errorf("waiter's condition %q does not say it took an address kept for ns/a", msg)
	}
	h.service("a", nil)
	h.expect(wait, map[string]string{"a": "PoolExhausted"})

	// x's two seconds end (the ledger shows nothing kept): x, back, gets a
	// never-used address, not the one freed.
	h.expectKept()
	h.service("x", onShort)
	h.expect(wait, map[string]string{"x": "10.81.3.1"})
}

// A rename: a Service of the namespace requesting the address kept for a
// deleted one takes it at once, the keep ends in the ledger, and a
// TookKeptAddress Event names the Service it was kept for.
func TestKeptAddressTakenByARename(t *testing.T) {
	h := newHarness(t)
	h.keepReleased = time.Hour
	h.pool("tkept-rename-"+h.lease[len("ipam-"):], "10.81.5.0/29")
	h.start("ipam-0")
	h.service("web-v1", nil)
	h.expect(wait, map[string]string{"web-v1": "10.81.5.0"})
	h.deleteService("web-v1")
	h.expectKept(h.ns + "/web-v1=10.81.5.0")

	h.service("web-v2", map[string]string{"ipledger.io/loadBalancerIPs": "10.81.5.0"})
	h.expect(wait, map[string]string{"web-v2": "10.81.5.0"})
	h.expectKept()
	if msg := h.state().msg["web-v2"]; !strings.Contains(msg, "took the address kept for Service "+h.ns+"/web-v1 (10.81.5.0") {
		t.Errorf("web-v2's condition %q does not say it took web-v1's kept address", msg)
	}
	h.expectEvent("web-v2", "TookKeptAddress")
}

// Another namespace can neither take a kept address by requesting it nor
// learn whose it is; a Service of the same name in another namespace gets
// its own address.
func TestKeptAddressStaysInItsNamespace(t *testing.T) {
	h := newHarness(t)
	h.keepReleased = time.Hour
	h.pool("tkept-ns-"+h.lease[len("ipam-"):], "10.81.4.0/29")
	other := h.env.Namespace(t, nil)
	h.start("ipam-0")
	h.service("web", nil)
	h.expect(wait, map[string]string{"web": "10.81.4.0"})
	h.deleteService("web")
	h.expectKept(h.ns + "/web=10.81.4.0")

	h.serviceIn(other, "thief", map[string]string{"ipledger.io/loadBalancerIPs": "10.81.4.0"})
	h.serviceIn(other, "web", nil)
	var thief, web corev1.Service
	testenv.Eventually(t, wait, func() error {
		for name, into := range map[string]*corev1.Service{"thief": &thief, "web": &web} {
			s, err := h.env.Client.CoreV1().Services(other).Get(context.Background(), name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if len(s.Status.Conditions) == 0 {
				return fmt.Errorf("%s/%s has no condition yet", other, name)
			}
			*into = *s
		}
		return nil
	})
	c := thief.Status.Conditions[0]
	if c.Reason != "RequestedIPInUse" || strings.Contains(c.Message, h.ns) || !strings.Contains(c.Message, "kept for a Service in another namespace") {
		t.Errorf("%s/thief: %s %q, want RequestedIPInUse saying only that a Service of another namespace released it", other, c.Reason, c.Message)
	}
	if got := web.Status.LoadBalancer.Ingress; len(got) != 1 || got[0].IP == "10.81.4.0" {
		t.Errorf("%s/web got %v, want an address of its own", other, got)
	}
	h.expectKept(h.ns + "/web=10.81.4.0")
	h.service("web", nil)
	h.expect(wait, map[string]string{"web": "10.81.4.0"})
}
