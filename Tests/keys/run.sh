#!/usr/bin/env bash
# The cache key in the keyring (gnome-keyring on a private bus), the TPM (two swtpm) and a passphrase, and moves
# between them cut by kill -9, in a network namespace of its own.
#
#   Tests/keys/run.sh [BIN_DIR] [--keep]        # default .build/debug; PYTHON defaults to .venv-tests/bin/python
exec "$(dirname "$0")/../in-network-namespace.sh" Tests/keys/keys_test.py "$@"
