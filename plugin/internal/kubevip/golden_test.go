package kubevip_test

import (
	"testing"

	"github.com/ipledger/ipledger/plugin/internal/goldentest"
	"github.com/ipledger/ipledger/plugin/internal/kubevip"
)

// TestGolden converts kube-vip-cloud-provider's documented example ConfigMaps
// (testdata/*.yaml, from its README.md and example/, at the commit each file names)
// and compares the IPPools and the warnings with testdata/<name>.golden
// (goldentest; -update rewrites them).
func TestGolden(t *testing.T) { goldentest.Run(t, kubevip.Convert) }
