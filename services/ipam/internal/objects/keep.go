package objects

import (
	"flag"
	"fmt"
	"time"
)

// DefaultKeepReleased is how long an address a Service released stays kept
// for it when its pool does not say (spec.allocation.keepReleasedSeconds):
// a day covers a Helm reinstall, a GitOps prune and re-create, and a
// namespace restored from manifests the next morning. Keeping costs no one
// an address — nobody waits for a kept address while another is free
// (docs/pools.md) — so the default errs long.
const DefaultKeepReleased = 24 * time.Hour

// KeepReleasedFlag registers --keep-released-addresses on fs (ipam's and its
// preflight's alike), parsed into into, which holds the default.
func KeepReleasedFlag(fs *flag.FlagSet, into *time.Duration) {
	fs.Func("keep-released-addresses",
		fmt.Sprintf("how long an address a deleted Service (or one no longer ipam's) released stays kept for its namespace/name, "+
			"for IPPools that do not set spec.allocation.keepReleasedSeconds: a Service created again under that name within it gets the same address. "+
			"0 frees released addresses at once. Kept addresses are handed to others only when a pool has nothing else (default %s)", *into),
		func(s string) error {
			d, err := time.ParseDuration(s)
			switch {
			case err != nil:
				return fmt.Errorf("%q is not a duration (24h, 30m, 0)", s)
			case d < 0:
				return fmt.Errorf("%s is negative; use 0 to free released addresses at once", s)
			}
			*into = d
			return nil
		})
}
