package cilium_test

import (
	"testing"

	"github.com/ipledger/ipledger/plugin/internal/cilium"
	"github.com/ipledger/ipledger/plugin/internal/goldentest"
)

// TestGolden converts Cilium's own documented example pools
// (testdata/docs-*.yaml, from Documentation/network/lb-ipam.rst)
// and compares the IPPools and the warnings with testdata/<name>.golden
// (goldentest; -update rewrites them).
func TestGolden(t *testing.T) { goldentest.Run(t, cilium.Convert) }
