#!/usr/bin/env bash
# Runs Tests/interop/interop_test.py in a network namespace of its own. There the test provider listens on
# 127.0.0.1:443: MSAL files its cache under the host name without a port, so the provider must be on the default
# https port. The namespace gives the test that port without touching the machine's, and without privileges
# (a user namespace maps the caller to root inside when the caller is not root already).
#
#   Tests/interop/run.sh [BIN_DIR]      # default .build/debug; PYTHON defaults to .venv-tests/bin/python
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv-tests/bin/python}
bin=${1:-.build/debug}
namespace=(unshare --net)
[ "$(id -u)" = 0 ] || namespace+=(--map-root-user)
exec "${namespace[@]}" sh -c 'ip link set lo up && exec "$0" Tests/interop/interop_test.py --bin "$1" ${2:+"$2"}' "$python" "$bin" "${2:-}"
