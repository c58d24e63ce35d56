#!/usr/bin/env bash
# The real MSAL Python and ADAL Python against the broker, in a network namespace of its own.
#
#   Tests/interop/run.sh [BIN_DIR] [--keep]      # default .build/debug; PYTHON defaults to .venv-tests/bin/python
exec "$(dirname "$0")/../in-network-namespace.sh" Tests/interop/interop_test.py "$@"
