package decide

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Reservations is eipd's --reserved-sets file: sets of Elastic IPs the
// operator allocated beforehand (a partner's allowlist), which Nodes take
// them, and what the Nodes no set serves get. The zero value is "no file":
// any orphan, else a new address, as without reserved sets.
type Reservations struct {
	// Sets are tried in order: an address or an instance belongs to the
	// first set that selects it.
	Sets []ReservedSet `json:"sets"`
	// OtherNodes says what a Node that no set serves gets: OtherNodesNone
	// (the default of a file: eipd never calls AllocateAddress; such a Node
	// takes an orphan outside every set, or waits) or OtherNodesAllocate (an
	// orphan outside every set, else a new address).
	OtherNodes string `json:"otherNodes,omitempty"`
}

// Values of Reservations.OtherNodes.
const (
	OtherNodesNone     = "none"
	OtherNodesAllocate = "allocate"
)

// ReservedSet is one set of pre-allocated Elastic IPs. The Nodes it serves
// take only its addresses, in its order, and wait when none is free; its
// addresses are never released, only disassociated and untagged.
type ReservedSet struct {
	// Name is a DNS label, shown in Events, metrics and ListAddresses.
	Name string `json:"name"`
	// Addresses selects the set's Elastic IPs among the cluster's managed
	// ones (tagged ipledger.io/managed=true and ipledger.io/cluster=<id>:
	// that tag is how the operator gives an address to one cluster).
	Addresses AddressSelector `json:"addresses"`
	// Instances selects the Nodes the set serves by their EC2 instance
	// (never by Node labels, which a kubelet writes): empty serves all.
	Instances InstanceSelector `json:"instances,omitempty"`
	// Order decides which free address goes first: OrderAllocatedAt (the
	// ipledger.io/allocated-at tag, oldest first; the default) or
	// "tag:<key>" (the tag's value, integers numerically, else as text;
	// addresses without it last). Ties go to the lower public IP.
	Order string `json:"order,omitempty"`
}

// OrderAllocatedAt orders a set by the ipledger.io/allocated-at tag.
const OrderAllocatedAt = "allocated-at"

// AddressSelector matches an Elastic IP that carries every tag and, when
// AllocationIDs is set, is one of them.
type AddressSelector struct {
	Tags          map[string]string `json:"tags,omitempty"`
	AllocationIDs []string          `json:"allocationIDs,omitempty"`
}

// InstanceSelector matches an instance in one of Zones (when set) that
// carries every tag.
type InstanceSelector struct {
	Zones []string          `json:"zones,omitempty"`
	Tags  map[string]string `json:"tags,omitempty"`
}

// LoadReservations reads and validates a --reserved-sets file.
func LoadReservations(path string) (Reservations, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Reservations{}, fmt.Errorf("--reserved-sets: %w", err)
	}
	r, err := ParseReservations(raw)
	if err != nil {
		return Reservations{}, fmt.Errorf("--reserved-sets %s: %w", path, err)
	}
	return r, nil
}

// ParseReservations decodes a --reserved-sets file strictly (an unknown
// field is an error, not a silent default) and validates it.
func ParseReservations(raw []byte) (Reservations, error) {
	var r Reservations
	if err := yaml.UnmarshalStrict(raw, &r); err != nil {
		return Reservations{}, fmt.Errorf("not a reserved-sets file (docs/eipd.md#reserved-sets): %w", err)
	}
	if r.OtherNodes == "" {
		r.OtherNodes = OtherNodesNone
	}
	return r, r.Validate()
}

var setName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Validate names the field and the fix of every mistake.
func (r Reservations) Validate() error {
	var errs []error
	switch r.OtherNodes {
	case OtherNodesNone, OtherNodesAllocate:
	default:
		errs = append(errs, fmt.Errorf("otherNodes: %q is neither %s nor %s", r.OtherNodes, OtherNodesNone, OtherNodesAllocate))
	}
	seen := map[string]bool{}
	for i, s := range r.Sets {
		at := fmt.Sprintf("sets[%d]", i)
		if !setName.MatchString(s.Name) {
			errs = append(errs, fmt.Errorf("%s.name: %q is not a DNS label (lower-case letters, digits and '-', at most 63)", at, s.Name))
		} else if seen[s.Name] {
			errs = append(errs, fmt.Errorf("%s.name: %q names two sets; give each its own", at, s.Name))
		}
		seen[s.Name] = true
		if len(s.Addresses.Tags) == 0 && len(s.Addresses.AllocationIDs) == 0 {
			errs = append(errs, fmt.Errorf("%s.addresses: selects every managed address; name its tags or allocationIDs", at))
		}
		for _, id := range s.Addresses.AllocationIDs {
			if !strings.HasPrefix(id, "eipalloc-") {
				errs = append(errs, fmt.Errorf("%s.addresses.allocationIDs: %q is not an allocation ID (eipalloc-…)", at, id))
			}
		}
		for k := range s.Addresses.Tags {
			if k == TagNode || k == TagManaged || k == TagCluster {
				errs = append(errs, fmt.Errorf("%s.addresses.tags: %s is eipd's own tag; select the set by a tag of yours", at, k))
			}
		}
		for _, z := range s.Instances.Zones {
			if z == "" {
				errs = append(errs, fmt.Errorf("%s.instances.zones: an empty zone; name it, e.g. us-east-1a", at))
			}
		}
		if key, ok := strings.CutPrefix(s.Order, "tag:"); s.Order != "" && s.Order != OrderAllocatedAt && (!ok || key == "") {
			errs = append(errs, fmt.Errorf("%s.order: %q; want %s or tag:<key>", at, s.Order, OrderAllocatedAt))
		}
	}
	return errors.Join(errs...)
}

// Configured reports whether a --reserved-sets file was given.
func (r Reservations) Configured() bool { return r.OtherNodes != "" }

// MayAllocate reports whether eipd may allocate for a Node no set serves.
func (r Reservations) MayAllocate() bool {
	return !r.Configured() || r.OtherNodes == OtherNodesAllocate
}

// AddressSet returns the set an address belongs to, or "".
func (r Reservations) AddressSet(a Address) string {
	for _, s := range r.Sets {
		if s.Addresses.Matches(a) {
			return s.Name
		}
	}
	return ""
}

// NeverReleased reports whether an address belongs to a reserved set: it
// is only ever disassociated and untagged, whatever
// --prevent-eip-deallocation says, since the operator (or a partner's
// allowlist) counts on it.
func (r Reservations) NeverReleased(a Address) bool { return r.AddressSet(a) != "" }

// InstanceSet returns the set that serves an instance, or "".
func (r Reservations) InstanceSet(inst Instance) string {
	for _, s := range r.Sets {
		if s.Instances.Matches(inst) {
			return s.Name
		}
	}
	return ""
}

// Set returns the set named name.
func (r Reservations) Set(name string) (ReservedSet, bool) {
	i := slices.IndexFunc(r.Sets, func(s ReservedSet) bool { return s.Name == name })
	if i < 0 {
		return ReservedSet{}, false
	}
	return r.Sets[i], true
}

// Matches reports whether the selector selects a.
func (s AddressSelector) Matches(a Address) bool {
	if len(s.AllocationIDs) > 0 && !slices.Contains(s.AllocationIDs, a.AllocationID) {
		return false
	}
	return tagsMatch(s.Tags, a.Tags)
}

// Matches reports whether the selector selects inst.
func (s InstanceSelector) Matches(inst Instance) bool {
	if len(s.Zones) > 0 && !slices.Contains(s.Zones, inst.Zone) {
		return false
	}
	return tagsMatch(s.Tags, inst.Tags)
}

func tagsMatch(want, have map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Compare orders two addresses of the set: the one a Node takes first
// first.
func (s ReservedSet) Compare(x, y Address) int {
	byTag := 0
	if key, ok := strings.CutPrefix(s.Order, "tag:"); ok {
		byTag = compareTag(x.Tags, y.Tags, key)
	}
	return cmp.Or(
		byTag,
		boolFirst(!x.AllocatedAt.IsZero(), !y.AllocatedAt.IsZero()),
		x.AllocatedAt.Compare(y.AllocatedAt),
		compareIP(x.PublicIP, y.PublicIP),
		strings.Compare(x.AllocationID, y.AllocationID),
	)
}

func compareTag(x, y map[string]string, key string) int {
	xv, xok := x[key]
	yv, yok := y[key]
	if c := boolFirst(xok, yok); c != 0 || !xok {
		return c
	}
	xn, xerr := strconv.ParseInt(xv, 10, 64)
	yn, yerr := strconv.ParseInt(yv, 10, 64)
	if xerr == nil && yerr == nil {
		return cmp.Compare(xn, yn)
	}
	return strings.Compare(xv, yv)
}

func compareIP(x, y string) int {
	xa, xerr := netip.ParseAddr(x)
	ya, yerr := netip.ParseAddr(y)
	if xerr != nil || yerr != nil {
		return strings.Compare(x, y)
	}
	return xa.Compare(ya)
}

// Free returns the addresses of set that a Node may take — not tagged for
// any Node, not associated, not in unavailable — in the set's order.
func (r Reservations) Free(set string, addrs []Address, unavailable map[string]bool) []Address {
	s, ok := r.Set(set)
	if !ok {
		return nil
	}
	var free []Address
	for _, a := range addrs {
		if a.Node == "" && !a.Associated() && !unavailable[a.AllocationID] && r.AddressSet(a) == set {
			free = append(free, a)
		}
	}
	slices.SortFunc(free, s.Compare)
	return free
}

// Waiter is a Node waiting for an address of a set, ranked by when it
// joined: the Node created first is served first.
type Waiter struct {
	Node    string
	Created time.Time
}

// Ahead counts the waiters ranked before w.
func Ahead(w Waiter, waiters []Waiter) int {
	n := 0
	for _, o := range waiters {
		if o.Node != w.Node && cmp.Or(o.Created.Compare(w.Created), strings.Compare(o.Node, w.Node)) < 0 {
			n++
		}
	}
	return n
}

// SetNames lists the sets' names, for metrics exported at zero.
func (r Reservations) SetNames() []string {
	names := make([]string, 0, len(r.Sets))
	for _, s := range r.Sets {
		names = append(names, s.Name)
	}
	return names
}
