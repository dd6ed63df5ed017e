package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/pkg/authz"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// TestServersAcceptOnlyTheirOwnAudience: the real binaries, with their
// default flags, refuse a token projected for another ipledger server
// (UNAUTHENTICATED) and serve one for their own audience and, for one
// release, for the legacy one: a token sent to the watcher cannot be
// replayed to ipam or eipd, and an old client's token still works during a
// rolling upgrade.
func TestServersAcceptOnlyTheirOwnAudience(t *testing.T) {
	env := testenv.Get(t)
	sys := StartSystem(t, SystemOptions{Watchers: 1, IPAM: 1, EIPD: 1, EC2Endpoint: ec2test.Get(t).URL, ClusterID: ec2test.ClusterID(t)})
	ctx := context.Background()
	journey.ViewerToken(t, env.Client) // binds ipledger-system/e2e-viewer to ipledger:viewer
	servers := []struct {
		svc     *Service
		own     string
		account string // a ServiceAccount the server authorizes
	}{
		{sys.Watchers[0], authz.WatcherAudience, "ipledger-ipam"},
		{sys.IPAM[0], authz.IPAMAudience, "e2e-viewer"},
		{sys.EIPD[0], authz.EIPDAudience, "e2e-viewer"},
	}
	for _, s := range servers {
		conn := plainConn(t, s.svc.GRPCAddr)
		call := func(audience string) error {
			token, err := env.GRPCTokenFor(ctx, testenv.SystemNamespace, s.account, audience)
			if err != nil {
				t.Fatal(err)
			}
			cctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), 10*time.Second)
			defer cancel()
			return floodCall(cctx, conn, s.svc.Component)
		}
		// The binding may take a moment to reach the API server's authorizer.
		testenv.Eventually(t, 20*time.Second, func() error { return call(s.own) })
		if err := call(authz.LegacyAudience); err != nil {
			t.Errorf("%s: a token for the legacy audience %s: %v, want served (for one release)", s.svc.Component, authz.LegacyAudience, err)
		}
		for _, other := range servers {
			if other.own == s.own {
				continue
			}
			err := call(other.own)
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s: a token for %s: %v, want UNAUTHENTICATED", s.svc.Component, other.own, err)
			}
		}
	}
}
