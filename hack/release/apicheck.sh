#!/usr/bin/env bash
# apicheck.sh fails when the public API of the root module or of mcprovider breaks what
# its last release offered (baseline.sh finds it): what apidiff -incompatible reports,
# less the breaks that hack/release/breaking.txt accepts for the next release.
# Internal packages, and the packages of cmd/, examples/, hack/ and test/, are not
# compared. APIDIFF is apidiff as go run takes it
# (golang.org/x/exp/cmd/apidiff@VERSION; the Makefile pins it).
set -euo pipefail
shopt -s inherit_errexit

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
: "${APIDIFF:?set APIDIFF to golang.org/x/exp/cmd/apidiff@VERSION}"
eval "$("$here/baseline.sh" --print)"

# apidiff DIR ARGS... runs apidiff in DIR, without its notes on internal packages.
apidiff() {
  local dir=$1
  shift
  (cd "$dir" && go run "$APIDIFF" "$@") 2> >(grep -v '^Ignoring internal package' >&2)
}

# breaks NAME MODULE OLD_DIR NEW_DIR GOWORK prints the incompatible changes of MODULE
# from OLD_DIR (the release's files) to NEW_DIR (the work tree's), one per line after
# "NAME: ", as apidiff says them ("./aggregate.F: removed" is a function F of the
# package aggregate). The root module is loaded alone (GOWORK=off), as the pattern
# MODULE/... would otherwise take in the nested modules; mcprovider in the workspace of
# its tree, with that tree's root module. The release's API is kept beside its files.
# The commands, examples, tools and tests (cmd/, examples/, hack/, test/) are no API.
breaks() {
  local name=$1 module=$2 old=$3 new=$4 gowork=$5 api
  api="$old/.apidiff-$name-${APIDIFF##*@}.x"
  if [ ! -s "$api" ]; then
    GOWORK=$gowork apidiff "$old" -m -w "$api.tmp" "$module"
    mv "$api.tmp" "$api"
  fi
  GOWORK=$gowork apidiff "$new" -m -incompatible "$api" "$module" |
    sed -nE -e '/^- \.\/(cmd|examples|hack|test)\//d' -e "s|^- |$name: |p"
}

root=$(breaks fleetwatch github.com/fleetwatch/fleetwatch "$FLEETWATCH_RELEASE_ROOT_SRC" "$repo" off)
mcprovider=$(breaks mcprovider github.com/fleetwatch/fleetwatch/mcprovider "$FLEETWATCH_RELEASE_MCPROVIDER_SRC/mcprovider" "$repo/mcprovider" "")
found=$(printf '%s\n%s\n' "$root" "$mcprovider" | sed '/^$/d' | sort -u)
accepted=$(sed -e '/^#/d' -e '/^[[:space:]]*$/d' "$here/breaking.txt" | sort -u)
unaccepted=$(comm -23 <(printf '%s\n' "$found") <(printf '%s\n' "$accepted"))
if [ -n "$unaccepted" ]; then
  echo "apicheck: changes that break the API of the last release ($FLEETWATCH_RELEASE_ROOT, mcprovider/$FLEETWATCH_RELEASE_MCPROVIDER):" >&2
  printf '  %s\n' "$unaccepted" >&2
  echo "apicheck: keep the old API beside the new, or, for a break the next minor release means to make, add the lines above to hack/release/breaking.txt and say it in CHANGELOG.md." >&2
  exit 1
fi
stale=$(comm -13 <(printf '%s\n' "$found") <(printf '%s\n' "$accepted"))
if [ -n "$stale" ]; then
  echo "apicheck: hack/release/breaking.txt accepts breaks that the work tree no longer makes; remove them:" >&2
  printf '  %s\n' "$stale" >&2
  exit 1
fi
echo "apicheck: the API is compatible with $FLEETWATCH_RELEASE_ROOT and mcprovider/$FLEETWATCH_RELEASE_MCPROVIDER${accepted:+, but for the breaks that breaking.txt accepts}"
