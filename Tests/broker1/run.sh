#!/usr/bin/env bash
# MSAL apps over Broker1, in a network namespace of its own, with their own session bus, keyring and daemon.
#
#   Tests/broker1/run.sh [BIN_DIR] [--keep]      # default .build/debug; PYTHON defaults to .venv-tests/bin/python
exec "$(dirname "$0")/../in-network-namespace.sh" Tests/broker1/broker1_test.py "$@"
