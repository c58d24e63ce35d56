#!/usr/bin/env bash
# The one test command (README, .ci/run). On a fresh Debian machine it installs what the tests need, then:
# format lint, build with warnings as errors and the import check, the Swift tests, the protocol schema
# validation, the Python wire battery and the security attacks against the built daemon, a bounded libFuzzer run,
# the MSAL/ADAL interop test, MSAL apps over the Broker1 bus interface, the managed-identity endpoint, git and
# kubectl with their real clients, the cache key's stores (keyring, TPM, passphrase), and the systemd units under a
# real user manager.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

step() { printf '\n=== %s\n' "$*"; }

step "system packages"
need_swift
need_packages libsqlite3-dev libsystemd-dev libsecret-1-dev libtss2-dev libargon2-dev pkg-config systemd curl procps \
  util-linux iproute2 openssl python3-venv git strace socat dbus-user-session
# The key stores' test: software TPMs (swtpm, reached through tpm2-tss's swtpm TCTI from libtss2-dev).
need_packages swtpm
# The Broker1 and key tests: a private session bus, a keyring (and secret-tool, which install.sh --purge uses),
# dbus-python for direct calls, and what MSALRuntime (pymsalruntime's libmsalruntime.so) links against.
need_packages dbus-daemon dbus-bin gnome-keyring python3-dbus python3-gi libsecret-tools libwebkit2gtk-4.1-0 \
  libjavascriptcoregtk-4.1-0 libgtk-3-0 libsoup-3.0-0 libsecret-1-0 libfido2-1 libp11-kit0 libcurl4

step "python test environment"
PYTHON=$(test_venv | tail -n 1)

step "swift format lint --strict"
git ls-files -z '*.swift' | xargs -0 swift format lint --strict

step "swift build (warnings as errors, explicit target imports)"
swift build --build-tests --explicit-target-dependency-import-check error

step "swift test"
swift test --skip-build

step "the README's Swift example, built as printed in a package of its own; public names beside Foundation"
Tests/readme/build-example.sh

step "protocol examples against the JSON Schemas"
"$PYTHON" Tests/wire/validate_examples.py

step "wire battery: a Python client written from Protocol/ alone"
"$PYTHON" Tests/wire/wire_battery.py --daemon .build/debug/tokenbrokerd

step "the security audit's attacks against the built daemon (another uid through setpriv when root)"
"$PYTHON" Tests/security/attacks.py --daemon .build/debug/tokenbrokerd

step "libFuzzer over the framer, the request decoder and the cache import (FUZZ_SECONDS, default 60)"
FUZZ_SECONDS=${FUZZ_SECONDS:-60} scripts/fuzz.sh

step "the test identity provider, endpoint by endpoint (curl, openssl)"
IDP_BIN=.build/debug/tokenbroker-test-idp Tests/TestIdentityProvider/smoke_test.sh

step "ADAL and MSAL interop: the real MSAL Python and ADAL Python against the broker (own network namespace)"
PYTHON=$PYTHON Tests/interop/run.sh .build/debug

step "MSAL apps over Broker1 on a private session bus: the real MSAL Python and pymsalruntime (own network namespace)"
PYTHON=$PYTHON Tests/broker1/run.sh .build/debug

step "containers, git, kubectl: the real azure-identity, msal, git and kubernetes client (own network namespaces)"
PYTHON=$PYTHON Tests/tools/run.sh .build/debug

step "the cache key in gnome-keyring, two software TPMs and a passphrase; kill -9 during moves (own network namespace)"
PYTHON=$PYTHON Tests/keys/run.sh .build/debug

step "systemd units: systemd-analyze --user verify"
Tests/systemd/verify-units.sh

step "the socket rule without a login session: install.sh and status without XDG_RUNTIME_DIR, hostile directories"
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "SKIPPED: needs root and mount namespaces (CI has both); run scripts/test.sh as root to include it"
else
  unshare -m --propagation private Tests/install/socket-rule.sh
fi

step "the installed units under a real systemd --user (private mount namespace), and the journal"
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "SKIPPED: needs root and mount namespaces (CI has both); run scripts/test.sh as root to include it"
else
  journal=$(mktemp)
  PROJECT_DIR=$PWD JOURNAL_OUT=$journal \
    CHECK_AS_ROOT="python3 /srv/Tests/systemd/check_journal.py $journal \$HOME/secrets.txt" \
    setsid unshare -m --propagation private Tests/systemd/with-user-manager.sh /srv/Tests/systemd/e2e-user-manager.sh
  rm -f "$journal"
fi

step "all tests passed"
