package metallb

import (
	"bytes"
	"fmt"
	"io"
	"sort"

	"sigs.k8s.io/yaml"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// AnnounceName names the L2Advertisement Announce writes.
const AnnounceName = "ipledger"

// announceObject is a MetalLB object as Announce writes it.
type announceObject struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   announceMeta   `json:"metadata"`
	Spec       map[string]any `json:"spec"`
}

type announceMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
}

// Announce writes, as multi-document YAML for `kubectl apply -f`, the
// MetalLB objects that announce exactly ipledger's IPPools
// (docs/reachability.md): an IPAddressPool of the same name and addresses
// for each, with autoAssign false so that MetalLB's controller (if it
// runs) never allocates from it, and one L2Advertisement naming them all,
// held to interfaces when any are given. The pools' definitions then live
// in one place: run it again after changing an IPPool.
func Announce(w io.Writer, pools []*ipamv1.Pool, namespace string, interfaces []string) error {
	if len(pools) == 0 {
		return fmt.Errorf("no IPPools: nothing to announce")
	}
	labels := map[string]string{"app.kubernetes.io/managed-by": "kubectl-ipledger"}
	var names []string
	var objs []announceObject
	for _, p := range pools {
		names = append(names, p.GetName())
		objs = append(objs, announceObject{APIVersion: "metallb.io/v1beta1", Kind: "IPAddressPool",
			Metadata: announceMeta{Name: p.GetName(), Namespace: namespace, Labels: labels},
			Spec:     map[string]any{"addresses": p.GetAddresses(), "autoAssign": false}})
	}
	sort.Strings(names)
	spec := map[string]any{"ipAddressPools": names}
	if len(interfaces) > 0 {
		spec["interfaces"] = interfaces
	}
	objs = append(objs, announceObject{APIVersion: "metallb.io/v1beta1", Kind: "L2Advertisement",
		Metadata: announceMeta{Name: AnnounceName, Namespace: namespace, Labels: labels}, Spec: spec})
	var buf bytes.Buffer
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("%s %s: %w", o.Kind, o.Metadata.Name, err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	_, err := w.Write(buf.Bytes())
	return err
}
