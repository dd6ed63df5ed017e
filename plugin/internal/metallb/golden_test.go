package metallb_test

import (
	"testing"

	"github.com/ipledger/ipledger/plugin/internal/goldentest"
	"github.com/ipledger/ipledger/plugin/internal/metallb"
)

// TestGolden converts MetalLB's own example pools (testdata/*.yaml: its
// configsamples, its documentation, its e2e tests)
// and compares the IPPools and the warnings with testdata/<name>.golden
// (goldentest; -update rewrites them).
func TestGolden(t *testing.T) { goldentest.Run(t, metallb.Convert) }
