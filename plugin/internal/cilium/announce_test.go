package cilium_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ipledger/ipledger/plugin/internal/cilium"
	"github.com/ipledger/ipledger/plugin/internal/goldentest"
	"github.com/ipledger/ipledger/plugin/internal/metallb"
	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// TestAnnounceGolden: the CiliumL2AnnouncementPolicy announce cilium
// prints for ipledger's IPPools — every address of the Services Cilium's
// L2 announcer serves, on the interfaces and nodes given — compared with
// testdata/announce-<case>.golden (-update rewrites them), and readable
// back as one object.
func TestAnnounceGolden(t *testing.T) {
	pools := []*ipamv1.Pool{
		{Name: "lan", Addresses: []string{"10.0.0.0/28", "10.0.1.1-10.0.1.9"}, AutoAssign: true},
		{Name: "dmz", Addresses: []string{"192.0.2.0/29", "2001:db8::/120"}},
	}
	for _, tc := range []struct {
		name string
		opts cilium.AnnounceOptions
	}{
		{"every-interface", cilium.AnnounceOptions{}},
		{"interfaces-and-nodes", cilium.AnnounceOptions{Interfaces: []string{"^eth1$", "^bond0$"}, NodeSelector: "!node-role.kubernetes.io/control-plane,lan=true"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := cilium.Announce(&b, pools, tc.opts); err != nil {
				t.Fatal(err)
			}
			goldentest.Compare(t, "testdata/announce-"+tc.name+".golden", b.Bytes())
			objs, err := metallb.Decode(strings.NewReader(b.String()), "announce")
			if err != nil || len(objs) != 1 || objs[0].GetKind() != "CiliumL2AnnouncementPolicy" {
				t.Fatalf("Decode: %d objects, %v", len(objs), err)
			}
		})
	}
}

// TestAnnounceRefuses: nothing to announce, an interface that is not a
// regular expression (Cilium's agent would reject the policy), a node
// selector that does not parse: an error naming what to fix, and no output.
func TestAnnounceRefuses(t *testing.T) {
	pools := []*ipamv1.Pool{{Name: "lan", Addresses: []string{"10.0.0.0/28"}}}
	for _, tc := range []struct {
		name  string
		pools []*ipamv1.Pool
		opts  cilium.AnnounceOptions
		want  string
	}{
		{"no pools", nil, cilium.AnnounceOptions{}, "no IPPools"},
		{"bad interface", pools, cilium.AnnounceOptions{Interfaces: []string{"eth[1"}}, `--interfaces "eth[1"`},
		{"bad node selector", pools, cilium.AnnounceOptions{NodeSelector: "a in (b"}, "--node-selector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := cilium.Announce(&b, tc.pools, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || b.Len() != 0 {
				t.Fatalf("Announce = %v, printed %q; want an error naming %s and nothing printed", err, b.String(), tc.want)
			}
		})
	}
}
