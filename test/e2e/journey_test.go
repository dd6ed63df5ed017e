package e2e

import (
	"path/filepath"
	"testing"

	"github.com/ipledger/ipledger/lab/ec2test"
	"github.com/ipledger/ipledger/lab/testenv"
	"github.com/ipledger/ipledger/test/e2e/journey"
)

// TestUserJourney walks what a user does on day one (package journey) with
// the four binaries as local processes; test/cluster walks it with pods.
func TestUserJourney(t *testing.T) {
	env := testenv.Get(t)
	moto := ec2test.Get(t)
	cluster := ec2test.ClusterID(t)
	sys := StartSystem(t, SystemOptions{Watchers: 2, IPAM: 2, Endpoints: 1, EIPD: 1, EC2Endpoint: moto.URL, ClusterID: cluster})
	journey.Run(t, journey.Target{
		Client:    env.Client,
		Dynamic:   env.Dynamic,
		Grpcurl:   filepath.Join(env.CP.BinDir, "grpcurl"),
		IPAM:      []string{sys.IPAM[0].GRPCAddr, sys.IPAM[1].GRPCAddr},
		Moto:      moto,
		ClusterID: cluster,
	}, env.Namespace(t, nil))
}
