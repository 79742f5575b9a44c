#!/usr/bin/env bash
# baseline.sh makes ready the last release of each of fleetwatch's modules, which
# make lint checks the work tree against: the root module (tags vX.Y.Z) and mcprovider
# (tags mcprovider/vX.Y.Z). A module's last release is its last line in
# hack/release/releases.txt: the tag and the commit it names. Where the clone has the tag
# too, it must name that commit; where it has not (tags need not travel with a push or a
# clone of main), the commit is enough. Nothing is fetched: the commit must be in the
# clone's history (a shallow clone fails here, with the fix).
#
# Once per release, it writes under
#   ${FLEETWATCH_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetwatch/release}
# the files of each release's commit (src-<commit>/) and a file GOPROXY serving the
# released modules at their versions (proxy-<key>/), as the go command would fetch the
# tags. With --print, stdout gets shell assignments:
#   FLEETWATCH_RELEASE_PROXY=file://...        the GOPROXY of the released modules
#   FLEETWATCH_RELEASE_ROOT=v0.1.0             the root module's last release, and
#   FLEETWATCH_RELEASE_ROOT_SRC=...            the files of its commit
#   FLEETWATCH_RELEASE_MCPROVIDER=v0.1.0       mcprovider's (the tag is mcprovider/v0.1.0)
#   FLEETWATCH_RELEASE_MCPROVIDER_SRC=...
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache=${FLEETWATCH_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleetwatch/release}
print=false
[ "${1:-}" = "--print" ] && print=true

die() { echo "hack/release/baseline.sh: $*" >&2; exit 1; }

# last PREFIX prints "TAG COMMIT" of the last line of releases.txt whose tag is PREFIX
# followed by a version (PREFIX is "" for the root module, "mcprovider/" for mcprovider).
last() {
  awk -v p="$1" '!/^#/ && NF == 2 && index($1, p "v") == 1 && substr($1, length(p) + 1) !~ /\// { l = $0 } END { print l }' "$here/releases.txt"
}

# commit TAG COMMIT checks the release's commit against the clone and prints it in full.
commit() {
  local tag=$1 c=$2 full tagged
  full=$(git -C "$repo" rev-parse -q --verify "$c^{commit}") ||
    die "the commit $c of release $tag is not in this clone's history: a shallow clone? (git fetch --unshallow)"
  if tagged=$(git -C "$repo" rev-parse -q --verify "refs/tags/$tag^{commit}"); then
    [ "$tagged" = "$full" ] || die "the tag $tag names $tagged, but hack/release/releases.txt says $full"
  fi
  echo "$full"
}

# src COMMIT extracts the files of COMMIT into the cache once and prints the directory.
src() {
  local dir="$cache/src-$1"
  if [ ! -d "$dir" ]; then
    rm -rf "$dir.tmp.$$" && mkdir -p "$dir.tmp.$$"
    git -C "$repo" archive "$1" | tar -x -C "$dir.tmp.$$"
    mv "$dir.tmp.$$" "$dir"
  fi
  echo "$dir"
}

read -r root_tag root_commit <<<"$(last "")"
read -r mc_tag mc_commit <<<"$(last "mcprovider/")"
[ -n "${root_commit:-}" ] || die "releases.txt names no release of the root module (vX.Y.Z)"
[ -n "${mc_commit:-}" ] || die "releases.txt names no release of mcprovider (mcprovider/vX.Y.Z)"
root_commit=$(commit "$root_tag" "$root_commit")
mc_commit=$(commit "$mc_tag" "$mc_commit")
mc_version=${mc_tag#mcprovider/}

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
root_src=$(src "$root_commit")
mc_src=$(src "$mc_commit")
proxy="$cache/proxy-$root_tag-${root_commit:0:12}-$mc_version-${mc_commit:0:12}"
if [ ! -d "$proxy" ]; then
  rm -rf "$proxy.tmp.$$"
  (cd "$here" && GOWORK=off go run . proxy -repo "$repo" -out "$proxy.tmp.$$" -commit "$root_commit" ".@$root_tag")
  (cd "$here" && GOWORK=off go run . proxy -repo "$repo" -out "$proxy.tmp.$$" -commit "$mc_commit" "mcprovider@$mc_version")
  mv "$proxy.tmp.$$" "$proxy"
fi

if $print; then
  echo "FLEETWATCH_RELEASE_PROXY=file://$proxy"
  echo "FLEETWATCH_RELEASE_ROOT=$root_tag"
  echo "FLEETWATCH_RELEASE_ROOT_SRC=$root_src"
  echo "FLEETWATCH_RELEASE_MCPROVIDER=$mc_version"
  echo "FLEETWATCH_RELEASE_MCPROVIDER_SRC=$mc_src"
fi
