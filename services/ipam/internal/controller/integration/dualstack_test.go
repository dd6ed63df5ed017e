package integration

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestDualStackRules runs the dual-stack rules of docs/pools.md against the
// real API server, whose Service CIDRs are dual-stack: a PreferDualStack
// Service naming an IPv6-only pool gets its IPv6; one in a namespace pinned
// to an IPv4-only pool gets that pool's IPv4, though an unpinned pool offers
// both families; a RequireDualStack Service requesting only an IPv4 gets it
// and an IPv6 of the same pool; ipFamilies [IPv6, IPv4] lists the IPv6
// first. Services holding addresses when ipam starts keep them: one the old
// rule gave both families of the unpinned pool, and one whose status lists
// its IPv4 first (rewritten in its families' order, the same addresses).
func TestDualStackRules(t *testing.T) {
	h := newHarness(t)
	suffix := h.lease[len("ipam-"):]
	v4, v6, dual := "tds-v4-"+suffix, "tds-v6-"+suffix, "tds-dual-"+suffix
	h.poolIn(v4, []string{h.ns}, "10.78.30.0/29")
	h.pool(v6, "2001:db8:78:30::/125")
	h.pool(dual, "10.78.29.0/29", "2001:db8:78:29::/125")
	prefer := func(s *corev1.Service) { p := corev1.IPFamilyPolicyPreferDualStack; s.Spec.IPFamilyPolicy = &p }
	require := func(s *corev1.Service) { p := corev1.IPFamilyPolicyRequireDualStack; s.Spec.IPFamilyPolicy = &p }
	v6first := func(s *corev1.Service) {
		s.Spec.IPFamilies = []corev1.IPFamily{corev1.IPv6Protocol, corev1.IPv4Protocol}
	}

	// Holders from before the upgrade.
	h.service("old", nil, prefer)
	h.setStatus("old", "10.78.29.5", "2001:db8:78:29::5")
	h.service("oldorder", nil, require, v6first)
	h.setStatus("oldorder", "10.78.29.6", "2001:db8:78:29::6")
	h.watchDuplicates()
	h.start("ipam-0")
	h.expect(wait, map[string]string{
		"old":      "10.78.29.5,2001:db8:78:29::5",
		"oldorder": "2001:db8:78:29::6,10.78.29.6",
	})

	h.service("named6", map[string]string{"ipledger.io/address-pool": v6}, prefer)
	h.expect(wait, map[string]string{"named6": "2001:db8:78:30::1"})
	h.service("pinned", nil, prefer)
	h.expect(wait, map[string]string{"pinned": "10.78.30.0"})
	h.service("req", map[string]string{"ipledger.io/loadBalancerIPs": "10.78.29.3"}, require)
	h.expect(wait, map[string]string{"req": "10.78.29.3,2001:db8:78:29::1"})
	h.service("first6", nil, require, v6first)
	h.expect(wait, map[string]string{"first6": "2001:db8:78:29::2,10.78.29.0"})

	st := h.state()
	for _, name := range []string{"old", "oldorder", "named6", "pinned", "req", "first6"} {
		if st.reason[name] != "Allocated" {
			t.Errorf("%s: condition %s %q, want Allocated", name, st.reason[name], st.msg[name])
		}
	}
}
