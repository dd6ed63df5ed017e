package e2e

import (
	"net/netip"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The namespace labels an operator sets to let a namespace in
// (docs/security.md, docs/install.md).
const (
	grpcAccessLabel = "ipledger.io/grpc-access"
	monitoringLabel = "ipledger.io/monitoring"
)

// neverProbed are addresses the endpoints leader's egress must not reach
// whatever the prober decides (services/endpoints/internal/probepolicy's
// built-in refusals).
var neverProbed = []string{"169.254.169.254", "169.254.170.2", "fd00:ec2::254", "100.100.100.200", "168.63.129.16", "fe80::1"}

// TestNetworkPoliciesSelectEveryPodAndItsPorts: in every kustomization,
// every ipledger pod is selected by an ingress policy that opens its ops
// port (the container port named ops) to namespaces labelled
// ipledger.io/monitoring=true only; every pod with a gRPC port is selected
// by one that opens that port to ipledger's own pods (every Deployment's
// pods match its podSelector) and to namespaces labelled
// ipledger.io/grpc-access=true, and to nothing else; no policy opens any
// other port; and the endpoints pods' egress reaches the watcher's gRPC port
// and cluster DNS but no cloud metadata address.
func TestNetworkPoliciesSelectEveryPodAndItsPorts(t *testing.T) {
	for _, k := range kustomizations {
		t.Run(k, func(t *testing.T) {
			rendered := render(t, k)
			ds := deployments(t, rendered)
			pols := networkPolicies(t, rendered)
			if len(pols) == 0 {
				t.Fatal("no NetworkPolicy")
			}
			var watcher *appsv1.Deployment
			for i := range ds {
				if ds[i].Name == "ipledger-watcher" {
					watcher = &ds[i]
				}
			}
			if watcher == nil {
				t.Fatal("no ipledger-watcher Deployment")
			}
			for _, d := range ds {
				pod := labels.Set(d.Spec.Template.Labels)
				ports := map[string]int32{}
				for _, c := range d.Spec.Template.Spec.Containers {
					for _, p := range c.Ports {
						ports[p.Name] = p.ContainerPort
					}
				}
				opened := map[int32]bool{}
				for _, p := range pols {
					if !hasType(p, networkingv1.PolicyTypeIngress) || !selects(t, p.Spec.PodSelector, pod) {
						continue
					}
					for _, r := range p.Spec.Ingress {
						for _, pp := range r.Ports {
							port := policyPort(t, pp, ports)
							opened[port] = true
							switch port {
							case ports["ops"]:
								if !onlyNamespaces(r.From, monitoringLabel) {
									t.Errorf("policy %s opens %s's ops port %d to %+v, want only namespaces labelled %s=true", p.Name, d.Name, port, r.From, monitoringLabel)
								}
							case ports["grpc"]:
								checkGRPCPeers(t, p.Name, d.Name, r.From, ds)
							default:
								t.Errorf("policy %s opens port %d of %s, which has no such container port (%v)", p.Name, port, d.Name, ports)
							}
						}
						if len(r.Ports) == 0 {
							t.Errorf("policy %s opens every port of %s", p.Name, d.Name)
						}
					}
				}
				for name, port := range ports {
					if (name == "ops" || name == "grpc") && !opened[port] {
						t.Errorf("Deployment %s: no policy selects its pods (%v) and opens its %s port %d: its pods are open to all, or closed", d.Name, pod, name, port)
					}
				}
				if len(ports) == 0 || ports["ops"] == 0 {
					t.Errorf("Deployment %s has no ops port", d.Name)
				}
			}

			var egress *networkingv1.NetworkPolicy
			for i, p := range pols {
				if hasType(p, networkingv1.PolicyTypeEgress) {
					for _, d := range ds {
						if d.Name == "ipledger-endpoints" && selects(t, p.Spec.PodSelector, labels.Set(d.Spec.Template.Labels)) {
							egress = &pols[i]
						}
					}
				}
			}
			if egress == nil {
				t.Fatal("no egress policy selects the endpoints pods")
			}
			var toWatcher, toDNS bool
			for _, r := range egress.Spec.Egress {
				if len(r.To) == 0 {
					// Every destination: only DNS may be opened that way
					// (kube-dns's pods, or a node-local cache on a
					// link-local address), never the metadata services' 80.
					for _, pp := range r.Ports {
						if pp.Port == nil || pp.Port.IntValue() != 53 || pp.EndPort != nil {
							t.Errorf("policy %s opens %v to every destination; only port 53 (DNS) may be", egress.Name, pp)
						}
					}
					toDNS = toDNS || len(r.Ports) > 0
					continue
				}
				for _, peer := range r.To {
					if peer.PodSelector != nil && peer.NamespaceSelector == nil && selects(t, *peer.PodSelector, labels.Set(watcher.Spec.Template.Labels)) {
						for _, pp := range r.Ports {
							if pp.Port != nil && pp.Port.IntValue() == int(containerPort(*watcher, "grpc")) {
								toWatcher = true
							}
						}
					}
					if peer.NamespaceSelector != nil && peer.PodSelector != nil && peer.PodSelector.MatchLabels["k8s-app"] == "kube-dns" {
						for _, pp := range r.Ports {
							if pp.Port != nil && pp.Port.IntValue() == 53 {
								toDNS = true
							}
						}
					}
					if peer.IPBlock == nil {
						continue
					}
					cidr, err := netip.ParsePrefix(peer.IPBlock.CIDR)
					if err != nil {
						t.Fatalf("policy %s: %v", egress.Name, err)
					}
					for _, a := range neverProbed {
						addr := netip.MustParseAddr(a)
						if !cidr.Contains(addr) {
							continue
						}
						excepted := false
						for _, e := range peer.IPBlock.Except {
							if ep, err := netip.ParsePrefix(e); err == nil && ep.Contains(addr) {
								excepted = true
							}
						}
						if !excepted {
							t.Errorf("policy %s lets the endpoints pods reach %s (ipBlock %s)", egress.Name, a, cidr)
						}
					}
				}
			}
			if !toWatcher || !toDNS {
				t.Errorf("policy %s: endpoints reaches the watcher's gRPC port %v, cluster DNS %v; want both", egress.Name, toWatcher, toDNS)
			}
		})
	}
}

// checkGRPCPeers: a gRPC port is open to ipledger's own pods (a podSelector
// of this namespace that matches every Deployment's pods) and to namespaces
// labelled grpcAccessLabel=true, nothing else.
func checkGRPCPeers(t *testing.T, policy, deployment string, from []networkingv1.NetworkPolicyPeer, ds []appsv1.Deployment) {
	t.Helper()
	var own, labelled bool
	for _, peer := range from {
		switch {
		case peer.PodSelector != nil && peer.NamespaceSelector == nil && peer.IPBlock == nil:
			own = true
			for _, d := range ds {
				if !selects(t, *peer.PodSelector, labels.Set(d.Spec.Template.Labels)) {
					t.Errorf("policy %s: %s's gRPC port is closed to %s's pods (%v)", policy, deployment, d.Name, d.Spec.Template.Labels)
				}
			}
		case peer.NamespaceSelector != nil && peer.PodSelector == nil && peer.IPBlock == nil && onlyNamespaces([]networkingv1.NetworkPolicyPeer{peer}, grpcAccessLabel):
			labelled = true
		default:
			t.Errorf("policy %s opens %s's gRPC port to %+v", policy, deployment, peer)
		}
	}
	if !own || !labelled {
		t.Errorf("policy %s: %s's gRPC port open to ipledger's pods %v, to namespaces labelled %s=true %v; want both", policy, deployment, own, grpcAccessLabel, labelled)
	}
}

// onlyNamespaces: every peer is a namespaceSelector requiring label=true
// (and no podSelector or ipBlock widening or narrowing it).
func onlyNamespaces(from []networkingv1.NetworkPolicyPeer, label string) bool {
	if len(from) == 0 {
		return false // an empty from is everyone
	}
	for _, peer := range from {
		if peer.NamespaceSelector == nil || peer.PodSelector != nil || peer.IPBlock != nil ||
			len(peer.NamespaceSelector.MatchExpressions) != 0 || len(peer.NamespaceSelector.MatchLabels) != 1 ||
			peer.NamespaceSelector.MatchLabels[label] != "true" {
			return false
		}
	}
	return true
}

// policyPort resolves a policy's port, by number or by the container
// port's name.
func policyPort(t *testing.T, pp networkingv1.NetworkPolicyPort, ports map[string]int32) int32 {
	t.Helper()
	if pp.Port == nil || pp.EndPort != nil {
		t.Fatalf("policy port %+v: a single port wanted", pp)
	}
	if pp.Port.IntValue() != 0 {
		return int32(pp.Port.IntValue())
	}
	return ports[pp.Port.String()]
}

func containerPort(d appsv1.Deployment, name string) int32 {
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == name {
				return p.ContainerPort
			}
		}
	}
	return 0
}

func hasType(p networkingv1.NetworkPolicy, ty networkingv1.PolicyType) bool {
	for _, pt := range p.Spec.PolicyTypes {
		if pt == ty {
			return true
		}
	}
	return false
}

func selects(t *testing.T, sel metav1.LabelSelector, pod labels.Set) bool {
	t.Helper()
	s, err := metav1.LabelSelectorAsSelector(&sel)
	if err != nil {
		t.Fatal(err)
	}
	return s.Matches(pod)
}

func networkPolicies(t *testing.T, rendered []byte) []networkingv1.NetworkPolicy {
	t.Helper()
	return objectsOf[networkingv1.NetworkPolicy](t, rendered, "NetworkPolicy")
}
