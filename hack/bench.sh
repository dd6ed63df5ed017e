#!/usr/bin/env bash
# Runs ipledger's benchmarks (see BENCHMARKS.md) and writes their output to
# .dev/bench/<date>.txt. Sizes are the small defaults; the headline sizes:
#   IPLEDGER_BENCH_N=10000 IPLEDGER_BENCH_ROUNDS=3 hack/bench.sh ipam   (ipam cold start and restart, ~20 min)
#   IPLEDGER_BENCH_N=10000 hack/bench.sh anchors     (ipam, then MetalLB, same Services, 15–25 min)
# With no argument every suite runs but anchors, which builds MetalLB's
# controller first (hack/build-metallb.sh, ~3 CPU-minutes once); name suites to pick:
# micro watcher ipam endpoints eipd anchors.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
cd "$root"
export IPLEDGER_TOOLS_BIN=${IPLEDGER_TOOLS_BIN:-$(hack/build-tools.sh)}
out=.dev/bench/$(date -u +%Y%m%dT%H%M%SZ).txt
mkdir -p .dev/bench
suites=${*:-micro watcher ipam endpoints eipd}
run() { echo "== $*" | tee -a "$out"; "$@" 2>&1 | grep -E '^(Benchmark|ok|FAIL|---|    [a-z_]+_test\.go:)' | tee -a "$out"; }
for s in $suites; do
  case $s in
    micro)
      run go test -run XXX -bench . -benchmem -count 5 ./services/ipam/internal/allocator/ ./services/ipam/internal/ledger/ ./services/ipam/internal/plan/ ./services/ipam/internal/server/ ./services/endpoints/internal/planner/
      run go test -run XXX -bench StoreHeldBytes -benchtime 1x -count 3 ./pkg/stream/ ;;
    watcher)
      run go test -run XXX -bench 'SnapshotFanout|StoreMemory' -benchtime 3x ./services/watcher/internal/server/
      run go test -run XXX -bench DeltaLatency -benchtime 3000x ./services/watcher/internal/server/
      # The binary over 1,000 / 10,000 / 50,000 ExternalWorkloads (IPLEDGER_BENCH_STEPS): RSS per object,
      # start-up, and 50 subscribers' snapshot (time, extra RSS). ~15 min.
      run go test -run XXX -bench BinaryMemory -benchtime 1x -timeout 60m ./services/watcher/internal/app/ ;;
    ipam)
      # -v: without it go test keeps only a benchmark's first log lines, and the later rounds' and the restart's are lost.
      run go test -v -run XXX -bench 'ColdStart|SteadyState' -benchtime 1x -timeout 60m ./services/ipam/internal/bench/ ;;
    endpoints)
      run go test -run XXX -bench . -benchtime 1x -timeout 30m ./services/endpoints/internal/app/ ;;
    eipd)
      run go test -run XXX -bench 'ColdStart|ReservedSetJoin' -benchtime 1x -count 3 -timeout 30m ./services/eipd/internal/app/ ;;
    anchors)
      export IPLEDGER_METALLB_DIR=${IPLEDGER_METALLB_DIR:-$(hack/build-metallb.sh)}
      run go test -run XXX -bench Anchors -benchtime 1x -timeout 90m ./services/ipam/internal/bench/ ;;
    *) echo "unknown suite $s (micro watcher ipam endpoints eipd anchors)" >&2; exit 2 ;;
  esac
done
echo "bench: results in $out"
