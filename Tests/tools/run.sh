#!/usr/bin/env bash
# The managed-identity endpoint, git and kubectl with their real clients, in a network namespace of its own (the
# suite adds a veth pair and a second namespace standing in for a container).
#
#   Tests/tools/run.sh [BIN_DIR] [--keep]        # default .build/debug; PYTHON defaults to .venv-tests/bin/python
exec "$(dirname "$0")/../in-network-namespace.sh" Tests/tools/tools_test.py "$@"
