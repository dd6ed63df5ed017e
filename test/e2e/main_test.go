// Package e2e runs ipledger's four binaries as processes, each on its own
// ServiceAccount token, against a real API server and moto, and checks the
// manifests users install.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/ipledger/ipledger/pkg/ec2test"
	"github.com/ipledger/ipledger/pkg/testenv"
)

func TestMain(m *testing.M) {
	if err := ec2test.StartShared(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := testenv.Run(m)
	ec2test.StopShared()
	os.Exit(code)
}
