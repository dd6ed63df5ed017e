package metallb

import (
	"bytes"
	"strings"
	"testing"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// TestAnnounce: one IPAddressPool per IPPool (autoAssign false, the same
// addresses) and one L2Advertisement naming them all, held to the
// interfaces given; readable back by Decode.
func TestAnnounce(t *testing.T) {
	var b bytes.Buffer
	pools := []*ipamv1.Pool{{Name: "lan", Addresses: []string{"10.0.0.0/28", "10.0.1.1-10.0.1.9"}, AutoAssign: true}, {Name: "dmz", Addresses: []string{"192.0.2.0/29"}}}
	if err := Announce(&b, pools, "metallb-system", []string{"eth1"}); err != nil {
		t.Fatal(err)
	}
	want := `apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  labels:
    app.kubernetes.io/managed-by: kubectl-ipledger
  name: lan
  namespace: metallb-system
spec:
  addresses:
  - 10.0.0.0/28
  - 10.0.1.1-10.0.1.9
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: IPAddressPool
metadata:
  labels:
    app.kubernetes.io/managed-by: kubectl-ipledger
  name: dmz
  namespace: metallb-system
spec:
  addresses:
  - 192.0.2.0/29
  autoAssign: false
---
apiVersion: metallb.io/v1beta1
kind: L2Advertisement
metadata:
  labels:
    app.kubernetes.io/managed-by: kubectl-ipledger
  name: ipledger
  namespace: metallb-system
spec:
  interfaces:
  - eth1
  ipAddressPools:
  - dmz
  - lan
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
	objs, err := Decode(strings.NewReader(b.String()), "announce")
	if err != nil || len(objs) != 3 {
		t.Fatalf("Decode: %d objects, %v", len(objs), err)
	}
	if err := Announce(&b, nil, "metallb-system", nil); err == nil || !strings.Contains(err.Error(), "no IPPools") {
		t.Errorf("no pools: %v", err)
	}
}
