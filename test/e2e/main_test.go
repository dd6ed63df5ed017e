// Package e2e runs ipledger's four binaries as processes, each on its own
// ServiceAccount token, against a real API server and moto, and checks the
// manifests users install.
package e2e

import (
	"testing"

	"github.com/ipledger/ipledger/lab/ec2test"
)

func TestMain(m *testing.M) { ec2test.MainWithKubernetes(m) }
