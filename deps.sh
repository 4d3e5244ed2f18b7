#!/usr/bin/env bash
# Installs what the tests need beyond Go, on a fresh machine with only Go and
# Debian's packages; the README's test command is './deps.sh && go test ./...'.
#
#   chromium        the dashboard's real-browser tests (or set SYNAPSE_CHROMIUM)
#   etcd-server     the fleet test on the etcd people run, etcd 3.4 (or set SYNAPSE_ETCD_BIN)
#   iproute2        ip netns and veth pairs: the fleet harness's partition of a hub from etcd (needs root)
#   systemd         systemd-analyze verify, for the unit files of 'synapse arm' and 'synapse service'
#   nodejs, npm     the official MCP TypeScript SDK client's test (compat/mcpclient), and its package
#
# Each is installed with apt-get only when it is missing (as root, or
# through sudo); a second run does nothing.
set -euo pipefail
cd "$(dirname "$0")"

missing=()
if [ -z "${SYNAPSE_CHROMIUM:-}" ] && ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
if [ -z "${SYNAPSE_ETCD_BIN:-}" ] && ! command -v etcd >/dev/null 2>&1; then missing+=(etcd-server); fi
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
command -v ip >/dev/null 2>&1 || missing+=(iproute2) # the fleet harness's partitions (network namespaces, as root)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

if [ ${#missing[@]} -gt 0 ]; then
  sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo "deps.sh: the tests need Debian's ${missing[*]} and this user cannot install them (not root, no sudo)." >&2
      echo "Install them once with 'apt-get install -y ${missing[*]}' as root (or set SYNAPSE_CHROMIUM / SYNAPSE_ETCD_BIN)." >&2
      exit 1
    fi
    sudo=(sudo)
  fi
  echo "deps.sh: installing Debian's ${missing[*]} (once)" >&2
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
compat/mcpclient/install.sh
