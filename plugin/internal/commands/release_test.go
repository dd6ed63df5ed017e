package commands

import (
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	ipamv1 "github.com/ipledger/ipledger/proto/ipledger/ipam/v1"
)

// release names what it released: an operator's note, or the Service a
// kept address was kept for.
func TestReleasedWhat(t *testing.T) {
	for _, tc := range []struct {
		r    *ipamv1.Reservation
		want string
	}{
		{&ipamv1.Reservation{Ip: "10.0.0.7", OwnerNote: "edge router"}, "edge router"},
		{&ipamv1.Reservation{Ip: "10.0.0.7", OwnerNote: "for the canary", ForService: &ipamv1.ServiceRef{Namespace: "shop", Name: "web"}}, "for the canary"},
		{&ipamv1.Reservation{Ip: "10.0.0.7", OwnerNote: "ipledger.io/kept", ForService: &ipamv1.ServiceRef{Namespace: "shop", Name: "web"}},
			"kept for shop/web; it is free now"},
		{&ipamv1.Reservation{Ip: "10.0.0.7", OwnerNote: "ipledger.io/kept sharingKey=k", ForService: &ipamv1.ServiceRef{Namespace: "shop", Name: "web"}},
			"kept for shop/web; it is free now"},
	} {
		if got := releasedWhat(tc.r); got != tc.want {
			t.Errorf("releasedWhat(%v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

// The help of release, allocations and pools tells about kept addresses.
func TestHelpTellsOfKeptAddresses(t *testing.T) {
	root := NewRoot(genericiooptions.NewTestIOStreamsDiscard())
	for name, want := range map[string][]string{
		"release":     {"ends a kept address early", "free at once, reused last"},
		"allocations": {"Kept until T", "release IP"},
		"pools":       {"KEPT"},
	} {
		c, _, err := root.Find([]string{name})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if !strings.Contains(c.Long, w) {
				t.Errorf("%s --help lacks %q:\n%s", name, w, c.Long)
			}
		}
	}
}
