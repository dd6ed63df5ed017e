#!/usr/bin/env bash
# Builds the binaries of the test node (lab/cluster) that hack/build-tools.sh
# does not: kubelet, kube-controller-manager, kube-scheduler and kube-proxy
# from the k8s.io/kubernetes that hack/tools pins, CoreDNS from
# hack/tools/coredns, and the pause program of hack/tools/pause. They go into a
# cache folder keyed by the hash of those pins, so they are rebuilt only when a
# pin changes. Prints the bin folder on stdout; progress goes to stderr.
# kube-apiserver, etcd and kubectl come from hack/build-tools.sh.
#
# It also builds the root filesystem of the image Kubernetes' e2e specs run
# (registry.k8s.io/e2e-test-images/agnhost, lab/cluster.AgnhostImage): agnhost
# from the same k8s.io/kubernetes, and what the specs run inside it from
# Debian's packages — busybox-static (the applets) and netcat-openbsd (the
# nc the specs call with -v -t -u, as the upstream image has), fetched with
# `apt-get download`, and the machine's dash (/bin/sh, as in the upstream
# image: busybox's own sh runs its applets before PATH, so `sh -c 'nc -v …'`
# would get busybox's nc, which has no -v), curl and GNU wget (busybox's
# dies on -T), each with the shared libraries it links. It lands in
# rootfs/agnhost beside bin/.
#
# The Kubernetes binaries are built against a copy of hack/tools/go.mod and
# go.sum (-modfile): they need go.sum lines that kube-apiserver does not, and
# hack/tools/go.sum is the key of the tools cache, which must not move.
#
# Each binary is also cached on its own, keyed by what it is built from
# (parts/<name>-<hash>), so that a change to one pin rebuilds only what it
# builds: CoreDNS (its own module, only the plugins the node uses:
# hack/tools/coredns/cmd/coredns) does not rebuild the kubelet, nor the
# reverse.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
. "$root/hack/lib/go.sh"
tools=$root/hack/tools
cache=${IPLEDGER_NODE_CACHE:-$HOME/.cache/ipledger-node}
hash() { sha256sum | cut -c1-16; }
# Bump a recipe when its build step below changes in a way that changes the binary.
key_pause=$( (echo 1; cat "$tools/pause/main.go") | hash)
key_coredns=$( (echo 2; cat "$tools/coredns/go.mod" "$tools/coredns/go.sum" "$tools/coredns/cmd/coredns/main.go") | hash)
key_kube=$( (echo 1; cat "$tools/go.mod" "$tools/go.sum") | hash)
candidate() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/ {print $2}'; }
busybox_version=$(candidate busybox-static)
if [ -z "$busybox_version" ] || [ "$busybox_version" = "(none)" ]; then
  apt-get update -qq >&2 || true
  busybox_version=$(candidate busybox-static)
fi
netcat_version=$(candidate netcat-openbsd)
curl_version=$(dpkg-query -W -f='${Version}' curl 2>/dev/null || true)
dash_version=$(dpkg-query -W -f='${Version}' dash 2>/dev/null || true)
wget_version=$(dpkg-query -W -f='${Version}' wget 2>/dev/null || true)
if [ -z "$busybox_version" ] || [ "$busybox_version" = "(none)" ] || [ -z "$netcat_version" ] || [ -z "$curl_version" ] || [ -z "$dash_version" ] || [ -z "$wget_version" ]; then
  echo "build-node: the agnhost image needs Debian's busybox-static and netcat-openbsd (apt-get download), curl, dash and wget (apt-get install -y curl dash wget)" >&2
  exit 1
fi
key_agnhost=$( (echo 4; echo "$key_kube busybox-static=$busybox_version netcat-openbsd=$netcat_version curl=$curl_version dash=$dash_version wget=$wget_version") | hash)
key=$(echo "$key_pause $key_coredns $key_kube $key_agnhost" | hash)
dir=$cache/$key
bin=$dir/bin
. "$root/hack/lib/cached.sh"
build_node() {
mkdir -p "$bin" "$cache/parts"
export GOWORK=off CGO_ENABLED=0
kver=$(cd "$tools" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$(echo "$kver" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
mkdir -p "$cache/parts/mod-$key_kube"
cp "$tools/go.mod" "$tools/go.sum" "$cache/parts/mod-$key_kube/"
build() { # name key module package [go build flags...]
  local name=$1 part=$cache/parts/$1-$2 module=$3 pkg=$4; shift 4
  if [ ! -f "$part" ]; then
    local start=$SECONDS
    echo "build-node: building $name (cache $part)" >&2
    (cd "$module" && go build -trimpath "$@" -o "$part.tmp.$$" "$pkg")
    mv "$part.tmp.$$" "$part"
    echo "build-node: $name built in $((SECONDS - start))s" >&2
  fi
  ln -f "$part" "$bin/$name"
}
build pause "$key_pause" "$tools" ./pause -ldflags "-s -w"
build coredns "$key_coredns" "$tools/coredns" ./cmd/coredns -ldflags "-s -w"
for name in kubelet kube-proxy kube-scheduler kube-controller-manager; do
  build "$name" "$key_kube" "$tools" "k8s.io/kubernetes/cmd/$name" -mod=mod -modfile="$cache/parts/mod-$key_kube/go.mod" -ldflags "$ldflags"
done
build agnhost "$key_kube" "$tools" k8s.io/kubernetes/test/images/agnhost -mod=mod -modfile="$cache/parts/mod-$key_kube/go.mod" -ldflags "-s -w"
rootfs=$cache/parts/agnhost-rootfs-$key_agnhost
if [ ! -d "$rootfs" ]; then
  agnhost_rootfs "$rootfs.tmp.$$"
  mv "$rootfs.tmp.$$" "$rootfs"
fi
mkdir -p "$dir/rootfs"
ln -sfn "$rootfs" "$dir/rootfs/agnhost"
}
# agnhost_rootfs DIR: the agnhost image's files, as its Dockerfile in
# k8s.io/kubernetes/test/images/agnhost lays them out (/agnhost, /uploads,
# the user and group the specs look for), with busybox for the shell tools.
agnhost_rootfs() {
  local root=$1 deb
  rm -rf "$root"
  mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/uploads" "$root/usr/bin"
  chmod 1777 "$root/tmp"
  cp "$cache/parts/agnhost-$key_kube" "$root/agnhost"
  ln -s agnhost "$root/agnhost-2"
  deb=$(mktemp -d)
  (cd "$deb" && apt-get download -q "busybox-static=$busybox_version" "netcat-openbsd=$netcat_version" 2>&1 | grep -v '^W: Download is performed unsandboxed' >&2 || true)
  dpkg-deb -x "$deb"/busybox-static_*.deb "$deb/x"
  dpkg-deb -x "$deb"/netcat-openbsd_*.deb "$deb/x"
  cp "$deb/x/bin/busybox" "$root/bin/busybox"
  local applet
  for applet in $("$root/bin/busybox" --list-full); do
    [ -e "$root/$applet" ] || { mkdir -p "$root/$(dirname "$applet")"; ln -s /bin/busybox "$root/$applet"; }
  done
  # busybox 1.35.0's wget dies of SIGSEGV when given -T (Debian's static
  # and dynamic builds alike), which Kubernetes' source-ranges spec passes
  # (`wget -T 5 -qO- <address>`): GNU wget takes the same flags.
  rm -f "$root/bin/nc" "$root/usr/bin/nc" "$root/usr/bin/curl" "$root/bin/sh" "$root/bin/wget" "$root/usr/bin/wget"
  with_libs "$root" "$deb/x/bin/nc.openbsd" /bin/nc
  with_libs "$root" /bin/dash /bin/sh
  with_libs "$root" /usr/bin/curl /usr/bin/curl
  with_libs "$root" /usr/bin/wget /usr/bin/wget
  rm -rf "$deb"
  printf 'root:x:0:0:root:/root:/bin/sh\nuser-defined-in-image:x:1000:1000::/home/user-defined-in-image:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\nuser-defined-in-image:x:1000:\ngroup-defined-in-image:x:50000:user-defined-in-image\n' >"$root/etc/group"
  echo "build-node: agnhost's root filesystem in $root (busybox-static $busybox_version, netcat-openbsd $netcat_version, curl $curl_version, dash $dash_version, wget $wget_version)" >&2
}
# with_libs ROOT BINARY DEST: BINARY at ROOT/DEST, and the shared libraries
# it links (as the machine's loader resolves them) at their paths in ROOT.
with_libs() {
  local root=$1 binary=$2 dest=$3 lib
  if ldd "$binary" | grep 'not found' >&2; then
    echo "build-node: $binary links a library this machine lacks (above): install it with apt-get" >&2
    exit 1
  fi
  cp "$binary" "$root$dest"
  for lib in $(ldd "$binary" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    [ -e "$root$lib" ] || cp -L "$lib" "$root$lib"
  done
}
cached "$dir" build_node
echo "$bin"
