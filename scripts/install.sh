#!/usr/bin/env bash
# Installs tokenbroker for the current user and starts it: builds in release, installs the binaries into
# ~/.local/bin, and runs the broker. Run again to upgrade; tokens are kept.
#
#   scripts/install.sh               install, then run the broker in the foreground
#   scripts/install.sh --no-run      install only
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

RUN=1
for argument in "$@"; do
  case "$argument" in
    --no-run) RUN=0 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "unknown option: $argument" >&2; exit 64 ;;
  esac
done

BIN_DIR="${XDG_BIN_HOME:-$HOME/.local/bin}"

echo "=== build prerequisites"
need_packages libsqlite3-dev libsystemd-dev pkg-config

echo "=== building (release, static Swift runtime: the CLI starts in about 2 ms)"
swift build -c release --static-swift-stdlib --product tokenbrokerd
swift build -c release --static-swift-stdlib --product tokenbroker
RELEASE_DIR=$(swift build -c release --static-swift-stdlib --show-bin-path)

echo "=== installing into $BIN_DIR"
mkdir -p "$BIN_DIR"
install -m 0755 "$RELEASE_DIR/tokenbrokerd" "$RELEASE_DIR/tokenbroker" "$BIN_DIR/"
case ":$PATH:" in
  *":$BIN_DIR:"*) ;;
  *) echo "note: $BIN_DIR is not on your PATH; add it, for example in ~/.profile" ;;
esac

if [ "$RUN" = 1 ]; then
  echo "=== running tokenbrokerd in the foreground (Ctrl-C stops it; your tokens stay in its state directory)"
  exec "$BIN_DIR/tokenbrokerd"
fi
echo "installed. Run the broker with: $BIN_DIR/tokenbrokerd"
