#!/usr/bin/env bash
# Runs a Python test suite (Tests/interop, Tests/broker1, Tests/tools) in a network namespace of its own. There
# the test provider listens on 127.0.0.1:443: MSAL files its cache under the host name without a port, so the
# provider must be on the default https port. The namespace gives the suite that port without touching the
# machine's, and without privileges (a user namespace maps the caller to root inside when the caller is not root
# already).
#
#   Tests/in-network-namespace.sh SUITE.py [BIN_DIR] [--keep]   # BIN_DIR default .build/debug;
#                                                                # PYTHON defaults to .venv-tests/bin/python
set -euo pipefail
cd "$(dirname "$0")/.."
suite=$1
python=${PYTHON:-.venv-tests/bin/python}
bin=${2:-.build/debug}
namespace=(unshare --net)
[ "$(id -u)" = 0 ] || namespace+=(--map-root-user)
exec "${namespace[@]}" sh -c 'ip link set lo up && exec "$0" "$1" --bin "$2" ${3:+"$3"}' "$python" "$suite" "$bin" "${3:-}"
