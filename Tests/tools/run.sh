#!/usr/bin/env bash
# Runs Tests/tools/tools_test.py in a network namespace of its own (the test provider needs port 443, as in
# Tests/interop/run.sh; the test adds a veth pair and a second namespace standing in for a container).
#
#   Tests/tools/run.sh [BIN_DIR]      # default .build/debug; PYTHON defaults to .venv-tests/bin/python
set -euo pipefail
cd "$(dirname "$0")/../.."
python=${PYTHON:-.venv-tests/bin/python}
bin=${1:-.build/debug}
namespace=(unshare --net)
[ "$(id -u)" = 0 ] || namespace+=(--map-root-user)
exec "${namespace[@]}" sh -c 'ip link set lo up && exec "$0" Tests/tools/tools_test.py --bin "$1"' "$python" "$bin"
