#!/usr/bin/env bash
# The README's test command: every test of the module, on a fresh machine
# with only Go and Debian's packages.
#
#   ./test.sh                 # go test ./...
#   ./test.sh -run Presence ./hub/    # arguments go to go test instead of ./...
#
# Some tests need programs Go does not bring: the dashboard's browser tests
# (Debian's chromium), the fleet test on the etcd people run (Debian's
# etcd-server, etcd 3.4) and the unit files' checks (systemd-analyze, from
# Debian's systemd). This script installs them with apt-get when they are
# missing (as root, or through sudo), then runs go test. (The MCP
# TypeScript SDK client's test needs node and npm: .ci/run installs them and
# compat/mcpclient's packages; without node it is skipped.) Set
# SYNAPSE_CHROMIUM or SYNAPSE_ETCD_BIN to use binaries of your own instead.
set -euo pipefail
cd "$(dirname "$0")"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

apt_install() { # package...
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "test.sh: the tests need Debian's $* and this user cannot install it (not root, no sudo)." >&2
      echo "Install it once with 'apt-get install -y $*' as root, or set SYNAPSE_CHROMIUM / SYNAPSE_ETCD_BIN." >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  echo "test.sh: installing Debian's $* (once; the browser and fleet tests need it)" >&2
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$@" >/dev/null
}

if [ -z "${SYNAPSE_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then
  apt_install chromium
fi
# The unit tests of 'synapse arm' and 'synapse service' run systemd-analyze verify.
command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd
if [ -z "${SYNAPSE_ETCD_BIN:-}" ]; then
  command -v etcd >/dev/null 2>&1 || apt_install etcd-server
  SYNAPSE_ETCD_BIN="$(command -v etcd)"
  export SYNAPSE_ETCD_BIN
fi

if [ $# -eq 0 ]; then
  set -- ./...
fi
exec go test "$@"
