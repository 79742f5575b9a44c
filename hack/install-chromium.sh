#!/usr/bin/env bash
# install-chromium.sh makes sure that the browser tests (test/browser) have a Chromium to
# drive. It does nothing when $FLEETWATCH_CHROMIUM or chromium on the PATH is there;
# else, as root on Debian or Ubuntu, it installs the distribution's chromium package (as
# .ci/run installs what else a fresh machine lacks); else it says what to do and fails.
set -euo pipefail

log() { echo "$*" >&2; }

if [ -n "${FLEETWATCH_CHROMIUM:-}" ]; then
  if [ -x "$FLEETWATCH_CHROMIUM" ]; then exit 0; fi
  log "fleetwatch: FLEETWATCH_CHROMIUM=$FLEETWATCH_CHROMIUM is not an executable file"
  exit 1
fi
if command -v chromium >/dev/null 2>&1; then exit 0; fi

if [ "${EUID:-$(id -u)}" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  log "fleetwatch: the browser tests need Chromium, which is not installed."
  log "  On Debian or Ubuntu: sudo apt-get install -y chromium"
  log "  Elsewhere: set FLEETWATCH_CHROMIUM to a Chromium or Chrome binary."
  exit 1
fi
log "fleetwatch: installing Debian's chromium package for the browser tests..."
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
command -v chromium >/dev/null
