#!/usr/bin/env bash
# prepare.sh VERSION readies the work tree for the release VERSION (vX.Y.Z) of the root
# module and of mcprovider (mcprovider/vX.Y.Z): the modules that require fleetwatch's,
# go.work, and the Helm chart (version X.Y.Z, appVersion VERSION) name VERSION, and the
# modules' go.sum files hold the sums of VERSION as the work tree has it. The work tree must already be what VERSION is to be, CHANGELOG.md
# included: the sums are of its files (those git tracks or would add). What follows is in
# docs/design.md, "Versions and depending on fleetwatch": commit, record the commit in
# hack/release/releases.txt, tag.
#
# go mod tidy runs with a module cache of its own, filled from the real one's downloads
# and a file GOPROXY of the work tree, so that the work tree's VERSION never lands in the
# real cache.
set -euo pipefail

version=${1:-}
[[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "usage: hack/release/prepare.sh vX.Y.Z" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cd "$repo"
export GOWORK=off

root=github.com/fleetwatch/fleetwatch
mc=$root/mcprovider
requiring_root=(mcprovider examples/multicluster-runtime test/browser)
requiring_mc=(examples/multicluster-runtime)

for m in "${requiring_root[@]}"; do (cd "$m" && go mod edit -require="$root@$version"); done
for m in "${requiring_mc[@]}"; do (cd "$m" && go mod edit -require="$mc@$version"); done
sed -i -E "s#^(\s*)($root|$mc) v[^ ]+ => #\1\2 $version => #" go.work
grep -q "^\s*$root $version => ./$" go.work && grep -q "^\s*$mc $version => ./mcprovider$" go.work ||
  { echo "prepare.sh: go.work has no replace lines of $root and $mc to move to $version" >&2; exit 1; }
chart=deploy/helm/fleetwatch/Chart.yaml
sed -i -E "s/^version: .*/version: ${version#v}/; s/^appVersion: .*/appVersion: $version/" "$chart"
grep -q "^version: ${version#v}$" "$chart" && grep -q "^appVersion: $version$" "$chart" ||
  { echo "prepare.sh: $chart has no version and appVersion to move to $version" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp"; rm -rf "$tmp"' EXIT
export GOPROXY="file://$tmp/proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)"
export GOMODCACHE="$tmp/mod" GOFLAGS=-modcacherw GONOSUMDB=$root

# tidy DIR... drops the sums of fleetwatch's modules from the go.sum of each DIR, which
# tidy then takes again from the proxy.
tidy() {
  for m in "$@"; do
    sed -i "\#^$root[/ ]#d" "$m/go.sum"
    echo "prepare.sh: go mod tidy in $m" >&2
    (cd "$m" && go mod tidy)
  done
}

# The root first, then mcprovider, whose zip holds its go.sum with the root's sums.
(cd "$here" && go run . proxy -repo "$repo" -out "$tmp/proxy" ".@$version")
tidy mcprovider test/browser
(cd "$here" && go run . proxy -repo "$repo" -out "$tmp/proxy" "mcprovider@$version")
tidy examples/multicluster-runtime
echo "prepare.sh: ready for $version and mcprovider/$version; commit, then add the commit to hack/release/releases.txt" >&2
