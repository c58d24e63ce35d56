#!/usr/bin/env bash
# The one test command (README, .ci/run). On a fresh Debian machine it installs what the tests need, then:
# format lint, build with warnings as errors and the import check, the Swift tests, the protocol schema
# validation, and the Python wire battery against the built daemon.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

step() { printf '\n=== %s\n' "$*"; }

step "system packages"
need_packages libsqlite3-dev libsystemd-dev pkg-config socat util-linux python3-venv

step "python test environment"
PYTHON=$(test_venv | tail -n 1)

step "swift format lint --strict"
git ls-files -z '*.swift' | xargs -0 swift format lint --strict

step "swift build (warnings as errors, explicit target imports)"
swift build --build-tests --explicit-target-dependency-import-check error

step "swift test"
swift test --skip-build

step "protocol examples against the JSON Schemas"
"$PYTHON" Tests/wire/validate_examples.py

step "wire battery: a Python client written from Protocol/ alone"
"$PYTHON" Tests/wire/wire_battery.py --daemon .build/debug/tokenbrokerd

step "all tests passed"
