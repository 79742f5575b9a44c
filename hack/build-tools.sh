#!/usr/bin/env bash
# build-tools.sh builds the kube-apiserver, etcd and kubectl binaries that the test
# harness and `make demo` use, from Go modules only (hack/tools/*), and caches them
# outside the repo:
#
#   ${FLEETWATCH_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetwatch/bin}/<tool>-<version>/<tool>
#
# A binary is rebuilt only when its version (the one pinned in its tools go.mod) changes.
# Progress goes to stderr. With --print, stdout gets the paths as shell assignments:
#   FLEETWATCH_KUBE_APISERVER=...
#   FLEETWATCH_ETCD=...
#   FLEETWATCH_KUBECTL=...
set -euo pipefail
# The tools modules are not in the repository's workspace (go.work): their versions of
# Kubernetes are kube-apiserver's own, not fleetwatch's.
export GOWORK=off

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${FLEETWATCH_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetwatch/bin}
print=false
[ "${1:-}" = "--print" ] && print=true

log() { echo "$*" >&2; }

# One build at a time per cache: a second invocation waits for the first, then finds the
# binaries built, instead of compiling kube-apiserver a second time beside it.
mkdir -p "$cache"
exec 9>"$cache/.lock"
if ! flock -n 9; then
  log "fleetwatch: waiting for another build-tools.sh to finish with $cache..."
  flock 9
fi

# version MODDIR MODULE prints the version of MODULE required by the tools module in MODDIR.
version() { (cd "$1" && go list -m -f '{{.Version}}' "$2"); }

# build NAME VERSION MODDIR PKG [LDFLAGS] builds PKG into the cache unless it is already there.
build() {
  local name=$1 ver=$2 dir=$3 pkg=$4 ldflags=${5:-}
  local out="$cache/$name-$ver/$name"
  if [ ! -x "$out" ]; then
    log "fleetwatch: building $name $ver into $out (first time only; this takes several minutes)..."
    local start=$SECONDS tmp="$out.tmp.$$"
    mkdir -p "$(dirname "$out")"
    (cd "$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$tmp" "$pkg")
    mv "$tmp" "$out"
    log "fleetwatch: built $name $ver in $((SECONDS - start))s"
  fi
  echo "$out"
}

kver=$(version "$here/tools/kube-apiserver" k8s.io/kubernetes)
minor=${kver#v1.}; minor=${minor%%.*}
kas=$(build kube-apiserver "$kver" "$here/tools/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver \
  "-X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean")
kubectl=$(build kubectl "$kver" "$here/tools/kube-apiserver" k8s.io/kubernetes/cmd/kubectl \
  "-X k8s.io/component-base/version.gitVersion=$kver -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean")
ever=$(version "$here/tools/etcd" go.etcd.io/etcd/server/v3)
etcd=$(build etcd "$ever" "$here/tools/etcd" .)

if $print; then
  echo "FLEETWATCH_KUBE_APISERVER=$kas"
  echo "FLEETWATCH_ETCD=$etcd"
  echo "FLEETWATCH_KUBECTL=$kubectl"
else
  echo "kube-apiserver: $kas"
  echo "etcd:           $etcd"
  echo "kubectl:        $kubectl"
fi
