# Sourced by every hack/ script and by .ci/run, before anything runs go: the
# Go toolchain ipledger is built, vetted, tested and scanned with
# (docs/security.md, "Supply chain"; the Makefile exports the same).
#
# go.work and the go.mod files say `go 1.27.3`, but a machine starts on its
# own Go (go1.26.8 here, whose go.env says GOTOOLCHAIN=local) and does not
# switch by itself: without this export the go command refuses the workspace
# ("go.work requires go >= 1.27.3"). With it, the go command fetches go1.27.3
# from the Go module proxy (golang.org/toolchain, checked against the
# checksum database; 76 MB, about 10 s once per machine, kept in the module
# cache) and runs it. A newer toolchain builds hack/tools' modules, which
# still say go 1.26.8 (their go.mod and go.sum are cache keys).
#
# Bump it with go.work, every project go.mod, the Makefile and the
# Dockerfile's golang:<major.minor>; TestGoToolchainIsOneVersion
# (lab/containerimage) fails when they disagree.
export GOTOOLCHAIN=go1.27.3
