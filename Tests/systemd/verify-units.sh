#!/bin/bash
# systemd-analyze --user verify on the units as installed (socket and service in one directory); its exit
# status is 0 even for unknown keys or bad values, so any output at all is a failure.
set -euo pipefail
cd "$(dirname "$0")/../.."
units=$(mktemp -d); runtime=$(mktemp -d)
trap 'rm -rf "$units" "$runtime"' EXIT
cp systemd/tokenbrokerd.socket "$units/"
sed -e 's|@BIN@|/usr/bin/true|' -e 's|@STATE@|/tmp/tokenbroker-state|' systemd/tokenbrokerd.service.in \
  > "$units/tokenbrokerd.service"
output=$(XDG_RUNTIME_DIR=$runtime systemd-analyze --user --man=no verify "$units/tokenbrokerd.socket" \
  "$units/tokenbrokerd.service" 2>&1) || true
if [ -n "$output" ]; then
  echo "$output"
  echo "FAIL - systemd-analyze --user verify printed the above"
  exit 1
fi
echo "ok - systemd-analyze --user verify prints nothing for tokenbrokerd.socket and tokenbrokerd.service"
