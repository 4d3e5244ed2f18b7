#!/usr/bin/env bash
# Shorthand for the README's test command, './deps.sh && go test ./...',
# that also takes go test's arguments in place of ./...:
#
#   ./test.sh                         # ./deps.sh && go test ./...
#   ./test.sh -run Presence ./hub/    # ./deps.sh && go test -run Presence ./hub/
set -euo pipefail
cd "$(dirname "$0")"
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
./deps.sh
if [ $# -eq 0 ]; then
  set -- ./...
fi
exec go test "$@"
