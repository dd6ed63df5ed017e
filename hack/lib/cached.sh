# Sourced by the hack/ scripts that build something once into a cache folder
# (build-tools.sh, build-node.sh, build-metallb.sh, previous-release.sh,
# vulncheck.sh).
#
# cached DIR CMD...: run CMD once to fill DIR, unless DIR is complete
# (DIR/.complete). One caller at a time: tests of several packages, a
# benchmark and `make cluster-up` may ask at once, and a second caller waits
# for the first (DIR/.lock) and then finds DIR complete. CMD failing leaves
# DIR incomplete, so the next call builds again.
cached() {
  local dir=$1
  shift
  [ -f "$dir/.complete" ] && return 0
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock 9
  if [ ! -f "$dir/.complete" ]; then
    "$@"
    touch "$dir/.complete"
  fi
  exec 9>&-
}
