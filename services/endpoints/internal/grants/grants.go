// Package grants decides whether an ExternalWorkload's address was granted
// to its namespace. Without grants any tenant who may create a workload can
// name any address, team A's database VM included, and expose it through
// its own Service; an operator grants address ranges to a namespace with
// the Namespace annotation Annotation, which a namespace's own `edit` or
// `admin` cannot write (Namespaces are cluster-scoped).
//
// Grants are checked in one of three modes (--workload-grants): off (the
// default, as before grants existed), report (a workload outside its grants
// is still served and says it would be refused) and enforce (it is not
// served). The admission policy ipledger-externalworkload-grants
// (components/workload-grants) applies the same rule when the workload is
// written, so the tenant hears it at once. Plain Go: no clients.
package grants

import (
	"fmt"
	"net/netip"
	"strings"
)

// Annotation on a Namespace lists the address ranges granted to its
// ExternalWorkloads: comma-separated CIDRs or addresses.
const Annotation = "ipledger.io/workload-cidrs"

// Mode is how grants are applied.
type Mode string

// The modes of --workload-grants.
const (
	Off     Mode = "off"
	Report  Mode = "report"
	Enforce Mode = "enforce"
)

// Checks reports whether grants are checked at all: report or enforce (the
// zero Mode is off).
func (m Mode) Checks() bool { return m == Report || m == Enforce }

// ParseMode reads the flag's value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Off, Report, Enforce:
		return m, nil
	}
	return "", fmt.Errorf("--workload-grants=%q: must be off, report or enforce", s)
}

// Parse reads the annotation's value. A malformed entry is an error naming
// it; the caller treats the namespace as granted nothing.
func Parse(value string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for f := range strings.SplitSeq(value, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if a, err := netip.ParseAddr(f); err == nil {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR or an address", f)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// Check says why a is not granted to the namespace whose annotations are
// given, or "" when it is.
func Check(namespace string, annotations map[string]string, a netip.Addr) string {
	a = a.Unmap().WithZone("")
	value, ok := annotations[Annotation]
	if !ok {
		return fmt.Sprintf("%s is not granted to namespace %s, which is granted no addresses: an operator grants ranges with the Namespace annotation %s",
			a, namespace, Annotation)
	}
	granted, err := Parse(value)
	if err != nil {
		return fmt.Sprintf("%s is not granted to namespace %s: its annotation %s does not parse (%v); an operator must fix it", a, namespace, Annotation, err)
	}
	for _, p := range granted {
		if p.Contains(a) {
			return ""
		}
	}
	return fmt.Sprintf("%s is outside the addresses granted to namespace %s (%s: %s); an operator grants more by adding to that annotation",
		a, namespace, Annotation, value)
}
