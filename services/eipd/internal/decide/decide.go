// Package decide owns eipd's choices, free of any client: which Elastic IP a
// Node gets (its own by tag, else the orphan most referenced by Pods, else a
// new one), which duplicates are released, which actions destroy something
// and must first be confirmed against the live Node, how a Node's
// providerID names its EC2 instance, and what one sync does with a Node
// (Triage, then Assign). The controller gathers the inputs and carries out
// what they return.
package decide

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Tag keys eipd puts on every Elastic IP it manages.
const (
	TagManaged     = "ipledger.io/managed"
	TagCluster     = "ipledger.io/cluster"
	TagNode        = "ipledger.io/node"
	TagAllocatedAt = "ipledger.io/allocated-at"
)

// Address is one managed Elastic IP as EC2 reports it.
type Address struct {
	AllocationID string
	PublicIP     string
	// AssociationID is empty when the address is not associated.
	AssociationID      string
	InstanceID         string
	NetworkInterfaceID string
	PrivateIP          string
	// Node is the value of the ipledger.io/node tag: empty for an orphan.
	Node string
	// AllocatedAt comes from the ipledger.io/allocated-at tag; zero when
	// unknown (an address allocated by hand and adopted).
	AllocatedAt time.Time
	// Tags are all the address's EC2 tags (reserved sets select by them).
	Tags map[string]string
}

// Associated reports whether the address is associated with anything.
func (a Address) Associated() bool { return a.AssociationID != "" }

// Target is where a Node's Elastic IP must be associated: the primary private
// IP of the primary network interface (device index 0) of its instance.
type Target struct {
	InstanceID         string
	NetworkInterfaceID string
	PrivateIP          string
}

// AssociatedWith reports whether a is associated with exactly t.
func (a Address) AssociatedWith(t Target) bool {
	return a.Associated() && t.NetworkInterfaceID != "" &&
		a.NetworkInterfaceID == t.NetworkInterfaceID && a.PrivateIP == t.PrivateIP
}

// Action says how a Node gets its Elastic IP.
type Action int

const (
	// UseTagged keeps the address already tagged for the Node.
	UseTagged Action = iota + 1
	// ClaimOrphan tags an orphan for the Node.
	ClaimOrphan
	// Allocate allocates a new address tagged for the Node.
	Allocate
	// Wait: nothing the Node may take is free, and eipd may not allocate
	// (a reserved set, or otherNodes: none). Plan.Reason says why.
	Wait
)

func (a Action) String() string {
	switch a {
	case UseTagged:
		return "UseTagged"
	case ClaimOrphan:
		return "ClaimOrphan"
	case Allocate:
		return "Allocate"
	case Wait:
		return "Wait"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Input is everything Choose looks at for one Node.
type Input struct {
	Node string
	// Target is where the Node's address must be associated; its fields may
	// be empty when the instance is unknown (it only ranks duplicates).
	Target Target
	// CurrentAllocationID is the allocation the Node's annotation names: the
	// one its label already publishes, preferred among duplicates.
	CurrentAllocationID string
	// Addresses are every managed address of the cluster.
	Addresses []Address
	// PodRefs counts, per public IP, the Pods labelled ipledger.io/externalip=<ip>.
	PodRefs map[string]int
	// Unavailable are allocation IDs that must not be claimed: orphans another
	// Node is about to take, or addresses being released.
	Unavailable map[string]bool
	// Reservations are the reserved sets (zero: none configured).
	Reservations Reservations
	// Set is the reserved set serving the Node's instance ("" for none).
	Set string
	// Ahead counts the Nodes waiting for an address of Set that are served
	// before this one (Ahead): the Node takes the free address at that rank.
	Ahead int
}

// Plan is what Choose decided for one Node.
type Plan struct {
	Action Action
	// Address is the address to use (UseTagged) or claim (ClaimOrphan).
	Address Address
	// Release are further addresses tagged for the Node: duplicates.
	Release []Address
	// Reason says why the Node waits (Wait).
	Reason string
}

// Choose decides which Elastic IP a Node gets. Among the addresses tagged for
// the Node it keeps one and returns the others as duplicates. With none, a
// Node a reserved set serves takes the set's free address at its rank among
// the set's waiters (Ahead), or waits; any other Node takes the orphan
// (managed, tagged for no Node, unassociated, in no set) most referenced by
// Pods, else a new address if eipd may allocate, else waits. Every tie is
// broken deterministically, so two replicas (or two passes) agree.
func Choose(in Input) Plan {
	var tagged, orphans []Address
	for _, a := range in.Addresses {
		switch {
		case a.Node == in.Node:
			tagged = append(tagged, a)
		case a.Node == "" && !a.Associated() && !in.Unavailable[a.AllocationID] && in.Reservations.AddressSet(a) == "":
			orphans = append(orphans, a)
		}
	}
	if len(tagged) > 0 {
		slices.SortFunc(tagged, func(x, y Address) int { return keepOrder(in, x, y) })
		return Plan{Action: UseTagged, Address: tagged[0], Release: tagged[1:]}
	}
	if in.Set != "" {
		free := in.Reservations.Free(in.Set, in.Addresses, in.Unavailable)
		if in.Ahead < len(free) {
			return Plan{Action: ClaimOrphan, Address: free[in.Ahead]}
		}
		return Plan{Action: Wait, Reason: fmt.Sprintf("no address of reserved set %s is free (%d free, %d Node(s) ahead): "+
			"waiting until one is given back or the operator adds one (eipd never allocates for a reserved set)", in.Set, len(free), in.Ahead)}
	}
	if len(orphans) > 0 {
		best := slices.MinFunc(orphans, func(x, y Address) int {
			return cmp.Or(
				cmp.Compare(in.PodRefs[y.PublicIP], in.PodRefs[x.PublicIP]),
				strings.Compare(x.AllocationID, y.AllocationID),
			)
		})
		return Plan{Action: ClaimOrphan, Address: best}
	}
	if in.Reservations.MayAllocate() {
		return Plan{Action: Allocate}
	}
	return Plan{Action: Wait, Reason: "no reserved set serves the Node's instance and no orphan is free; " +
		"--reserved-sets says otherNodes: none, so eipd allocates nothing: waiting for an orphan"}
}

// keepOrder ranks the addresses tagged for one Node, the one to keep first:
// associated with the Node's target, then associated at all, then the one the
// Node already publishes, then the oldest, then the smallest allocation ID.
func keepOrder(in Input, x, y Address) int {
	return cmp.Or(
		boolFirst(x.AssociatedWith(in.Target), y.AssociatedWith(in.Target)),
		boolFirst(x.Associated(), y.Associated()),
		boolFirst(in.CurrentAllocationID != "" && x.AllocationID == in.CurrentAllocationID,
			in.CurrentAllocationID != "" && y.AllocationID == in.CurrentAllocationID),
		x.AllocatedAt.Compare(y.AllocatedAt),
		strings.Compare(x.AllocationID, y.AllocationID),
	)
}

func boolFirst(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return -1
	default:
		return 1
	}
}

// Intent is what a sync, deciding from the watcher's view, is about to do
// to one Node's addresses.
type Intent struct {
	// GiveBack: the view says the Node is gone or no longer wants an address.
	GiveBack bool
	// Tagged counts the addresses tagged for the Node.
	Tagged int
	// Published: the Node (as the view shows it) carries an address in its
	// label or annotation.
	Published bool
	// Duplicates counts the addresses the plan releases while the Node
	// keeps one.
	Duplicates int
}

// Destroys reports whether carrying out the intent disassociates, releases
// or untags an address, or clears the Node's published address: what a
// stale view must never cause, since a released public address is gone for
// good. The controller confirms such an intent against the live Node (read
// from the API server just before the EC2 calls) and acts on that instead.
func (i Intent) Destroys() bool {
	if i.GiveBack {
		return i.Tagged > 0 || i.Published
	}
	return i.Duplicates > 0
}

// Stale returns the addresses tagged for Nodes that should have none (not in
// want), sorted by Node then allocation ID: what a sweep must give back.
func Stale(addrs []Address, want func(node string) bool) []Address {
	var out []Address
	for _, a := range addrs {
		if a.Node != "" && !want(a.Node) {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(x, y Address) int {
		return cmp.Or(strings.Compare(x.Node, y.Node), strings.Compare(x.AllocationID, y.AllocationID))
	})
	return out
}

// InstanceID returns the EC2 instance named by a Node's spec.providerID:
// "aws:///us-east-1a/i-0123" (zone optional: "aws:///i-0123", "aws://i-0123").
func InstanceID(providerID string) (string, error) {
	rest, ok := strings.CutPrefix(providerID, "aws://")
	if !ok {
		return "", fmt.Errorf("providerID %q is not an AWS one (want aws:///<zone>/<instance-id>)", providerID)
	}
	rest = strings.TrimPrefix(rest, "/")
	parts := strings.Split(rest, "/")
	if len(parts) > 2 {
		return "", fmt.Errorf("providerID %q has too many path segments (want aws:///<zone>/<instance-id>)", providerID)
	}
	id := parts[len(parts)-1]
	if len(id) < 3 || !strings.HasPrefix(id, "i-") {
		return "", fmt.Errorf("providerID %q does not end in an instance ID i-…", providerID)
	}
	for _, r := range id[2:] {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return "", fmt.Errorf("providerID %q has an invalid instance ID %q", providerID, id)
		}
	}
	return id, nil
}

// Labels that ask for an Elastic IP on a Node.
const (
	// LabelOptIn is the opt-in: the NodeRestriction admission plugin forbids
	// a kubelet to set, change or remove any label under
	// node-restriction.kubernetes.io/ on its own Node, so only an operator
	// (or a controller acting for one) can give a Node a public IP.
	LabelOptIn = "node-restriction.kubernetes.io/ipledger-externalip-auto-assign"
	// LabelLegacyOptIn is the opt-in of earlier releases. A kubelet may set
	// it on its own Node; it is accepted only while --legacy-opt-in=accept.
	LabelLegacyOptIn = "ipledger.io/externalip-auto-assign"
)

// OptIn says where a Node's wish for an Elastic IP comes from.
type OptIn int

const (
	// NoOptIn: the Node asks for nothing, or only through the legacy label
	// while it is not accepted.
	NoOptIn OptIn = iota
	// OperatorOptIn: the Node carries LabelOptIn=true.
	OperatorOptIn
	// LegacyOptIn: the Node carries only LabelLegacyOptIn=true, and the
	// legacy label is accepted (deprecated).
	LegacyOptIn
)

// NodeOptIn reads a Node's opt-in from its labels. The legacy label counts
// only when acceptLegacy is set, and only on a Node without the operator's
// label: an operator's LabelOptIn=false refuses a Node that labels itself.
func NodeOptIn(labels map[string]string, acceptLegacy bool) OptIn {
	v, set := labels[LabelOptIn]
	switch {
	case set && v == "true":
		return OperatorOptIn
	case set:
		return NoOptIn
	case acceptLegacy && labels[LabelLegacyOptIn] == "true":
		return LegacyOptIn
	}
	return NoOptIn
}

// Instance is an EC2 instance as eipd checks it before associating an
// address with it, or before taking one away from it.
type Instance struct {
	ID    string
	VPCID string
	// Zone is the instance's availability zone (reserved sets select by it).
	Zone string
	// Tags are the instance's EC2 tags: set by whoever launched it (the node
	// group's launch template, Karpenter), not by the node itself.
	Tags map[string]string
	// Primary is where an address goes; its NetworkInterfaceID is empty
	// when the instance has no primary interface (launching, or gone).
	Primary Target
}

// Membership is what makes an instance one of this cluster's: a tag (by
// default ipledger.io/cluster=<cluster-id>) and, when VPCID is set, its VPC.
type Membership struct {
	TagKey, TagValue string
	VPCID            string
}

// Refusal reasons: the reason label of ipledger_eipd_associations_refused_total
// and the start of the refusal's message.
const (
	RefusedNoInstance   = "instance-not-found"
	RefusedNotInCluster = "not-in-cluster"
	RefusedWrongVPC     = "wrong-vpc"
	RefusedNoInternalIP = "no-internal-ip"
	RefusedIPMismatch   = "internal-ip-mismatch"
	RefusedClaimedTwice = "instance-claimed-twice"
)

// RefusalReasons lists every reason, for metrics exported at zero.
var RefusalReasons = []string{RefusedNoInstance, RefusedNotInCluster, RefusedWrongVPC, RefusedNoInternalIP,
	RefusedIPMismatch, RefusedClaimedTwice}

// Member reports whether inst belongs to the cluster, and if not, the
// reason and why.
func (m Membership) Member(inst Instance) (ok bool, reason, why string) {
	if v, tagged := inst.Tags[m.TagKey]; !tagged || v != m.TagValue {
		if !tagged {
			return false, RefusedNotInCluster, fmt.Sprintf("instance %s has no tag %s (want %s=%s, set by its node group or provisioner)", inst.ID, m.TagKey, m.TagKey, m.TagValue)
		}
		return false, RefusedNotInCluster, fmt.Sprintf("instance %s is tagged %s=%s, not %s", inst.ID, m.TagKey, v, m.TagValue)
	}
	if m.VPCID != "" && inst.VPCID != m.VPCID {
		return false, RefusedWrongVPC, fmt.Sprintf("instance %s is in VPC %q, not the cluster's %s", inst.ID, inst.VPCID, m.VPCID)
	}
	return true, "", ""
}

// Claim is what a Node says about itself: all of it written by the node's
// own kubelet (spec.providerID, status.addresses), so none of it is trusted
// on its own word.
type Claim struct {
	Node       string
	InstanceID string
	// InternalIPs are the Node's status.addresses of type InternalIP.
	InternalIPs []string
	// Rivals are the other Nodes whose providerID names the same instance.
	Rivals []string
}

// Refusal says why a Node gets no address associated with its instance.
type Refusal struct {
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// Admit decides whether eipd may associate an Elastic IP with the instance
// a Node names. It checks what the node cannot forge on its own: that the
// instance exists and is one of this cluster's (tags set at launch, VPC), that
// no other Node names the same instance, and that the instance's primary
// private IP is one of the Node's InternalIPs (so a Node cannot name an
// instance it is not). found is false when EC2 does not list the instance.
// It returns the target to associate with, or the refusal.
func Admit(c Claim, inst Instance, found bool, m Membership) (Target, *Refusal) {
	if !found {
		return Target{}, &Refusal{RefusedNoInstance, fmt.Sprintf("EC2 lists no instance %s (the Node's spec.providerID)", c.InstanceID)}
	}
	if ok, reason, why := m.Member(inst); !ok {
		return Target{}, &Refusal{reason, why}
	}
	if len(c.Rivals) > 0 {
		rivals := slices.Sorted(slices.Values(c.Rivals))
		return Target{}, &Refusal{RefusedClaimedTwice, fmt.Sprintf("instance %s is also named by Node(s) %s: eipd cannot tell which is the instance", inst.ID, strings.Join(rivals, ", "))}
	}
	if len(c.InternalIPs) == 0 {
		return Target{}, &Refusal{RefusedNoInternalIP, "the Node reports no InternalIP to compare with its instance's private IP"}
	}
	if inst.Primary.NetworkInterfaceID != "" && !slices.Contains(c.InternalIPs, inst.Primary.PrivateIP) {
		return Target{}, &Refusal{RefusedIPMismatch, fmt.Sprintf("instance %s has private IP %s, the Node reports InternalIP %s",
			inst.ID, inst.Primary.PrivateIP, strings.Join(c.InternalIPs, ", "))}
	}
	return inst.Primary, nil
}

// HeldOutside reports whether an address is associated with something eipd
// would never have associated it with: an instance that is not the cluster's,
// or a network interface of no instance EC2 lists (a NAT gateway, a load
// balancer). Such an address is someone else's, whatever its tags say, and
// eipd neither disassociates, releases nor reassociates it. owners holds the
// instances EC2 listed, by the ID of a network interface attached to them.
func HeldOutside(a Address, owners map[string]Instance, m Membership) bool {
	if !a.Associated() {
		return false
	}
	inst, ok := owners[a.NetworkInterfaceID]
	if !ok {
		return true
	}
	member, _, _ := m.Member(inst)
	return !member
}
