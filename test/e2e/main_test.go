// Package e2e runs ipledger's four binaries as processes against a real API
// server and moto, and checks the manifests users install.
package e2e

import (
	"testing"

	"github.com/ipledger/ipledger/pkg/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }
