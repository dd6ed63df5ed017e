package cilium

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// AnnounceName names the CiliumL2AnnouncementPolicy Announce writes.
const AnnounceName = "ipledger"

// AnnounceOptions are what announce cilium's flags say.
type AnnounceOptions struct {
	// Interfaces are the policy's spec.interfaces: regular expressions of
	// the node interfaces to answer ARP/NDP on (none: every interface).
	Interfaces []string
	// NodeSelector is a label selector ("k=v,k2 in (a,b)") of the nodes that
	// may announce ("": every node).
	NodeSelector string
}

type policy struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   policyMeta     `json:"metadata"`
	Spec       map[string]any `json:"spec"`
}

type policyMeta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
}

// Announce writes, as YAML for `kubectl apply -f`, the
// CiliumL2AnnouncementPolicy (cilium.io/v2alpha1, Cilium 1.14 and later,
// cluster-scoped) that has Cilium's L2 announcer answer ARP/NDP for every
// address ipledger gives (docs/reachability.md). Cilium's policy selects
// Services, not addresses: it announces the status.loadBalancer.ingress of
// every Service it selects whose loadBalancerClass is unset (or Cilium's
// io.cilium/l2-announcer). With no serviceSelector it selects them all,
// which are the Services ipam serves in its default mode; so the policy
// covers ipledger's IPPools, whatever their ranges, without repeating them
// (a comment lists the pools it was written for). loadBalancerIPs is true
// and externalIPs false: only what ipam gives is announced.
func Announce(w io.Writer, pools []*ipamv1.Pool, o AnnounceOptions) error {
	if len(pools) == 0 {
		return fmt.Errorf("no IPPools: nothing to announce")
	}
	spec := map[string]any{"loadBalancerIPs": true, "externalIPs": false}
	for _, re := range o.Interfaces {
		if _, err := regexp.Compile(re); err != nil {
			return fmt.Errorf("--interfaces %q: not a regular expression (Cilium matches interface names with it, e.g. ^eth1$): %w", re, err)
		}
	}
	if len(o.Interfaces) > 0 {
		spec["interfaces"] = o.Interfaces
	}
	if o.NodeSelector != "" {
		sel, err := metav1.ParseToLabelSelector(o.NodeSelector)
		if err != nil {
			return fmt.Errorf("--node-selector %q: %w (e.g. lan=true,!node-role.kubernetes.io/control-plane)", o.NodeSelector, err)
		}
		spec["nodeSelector"] = sel
	}
	p := policy{APIVersion: Group + "/v2alpha1", Kind: "CiliumL2AnnouncementPolicy",
		Metadata: policyMeta{Name: AnnounceName, Labels: map[string]string{"app.kubernetes.io/managed-by": "kubectl-ipledger"}},
		Spec:     spec}
	out, err := yaml.Marshal(p)
	if err != nil {
		return fmt.Errorf("CiliumL2AnnouncementPolicy %s: %w", AnnounceName, err)
	}
	var buf bytes.Buffer
	buf.WriteString("# Announces the addresses ipledger gives from its IPPools:\n")
	sorted := slices.Clone(pools)
	slices.SortFunc(sorted, func(a, b *ipamv1.Pool) int { return strings.Compare(a.GetName(), b.GetName()) })
	for _, pool := range sorted {
		fmt.Fprintf(&buf, "#   %s: %s\n", pool.GetName(), strings.Join(pool.GetAddresses(), ", "))
	}
	buf.WriteString("# to Services without a loadBalancerClass (Cilium announces no other class but io.cilium/l2-announcer).\n")
	buf.Write(out)
	_, err = w.Write(buf.Bytes())
	return err
}
