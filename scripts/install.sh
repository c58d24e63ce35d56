#!/usr/bin/env bash
# Installs tokenbroker for the current user and starts it.
#
# Builds in release, installs tokenbroker and tokenbrokerd into ~/.local/bin and the systemd user units into
# ~/.config/systemd/user (and the D-Bus activation file for MSAL apps into ~/.local/share/dbus-1/services), reloads
# the user manager and enables the socket: the broker then starts on the first
# connection, at every login. Where no user manager runs (a container, CI, a plain root shell), it says so
# and runs tokenbrokerd in the foreground instead. Run it again to upgrade; tokens are kept.
#
#   scripts/install.sh                     install and start (socket activation, else the foreground)
#   scripts/install.sh --no-run            install only; do not start anything
#   scripts/install.sh --uninstall         stop and remove the units and binaries; your tokens stay
#   scripts/install.sh --uninstall --purge also delete the token cache (state directory) and its key for good
#   scripts/install.sh --binaries DIR      install the binaries of DIR instead of building (tests use it)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

RUN=1; UNINSTALL=0; PURGE=0; BINARIES=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-run) RUN=0 ;;
    --uninstall) UNINSTALL=1 ;;
    --purge) PURGE=1 ;;
    --binaries) BINARIES=$2; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown option: $1" >&2; exit 64 ;;
  esac
  shift
done
[ "$PURGE" = 1 ] && [ "$UNINSTALL" = 0 ] && { echo "--purge goes with --uninstall" >&2; exit 64; }

BIN_DIR="${XDG_BIN_HOME:-$HOME/.local/bin}"
UNIT_DIR="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
STATE_DIR="${XDG_STATE_HOME:-$HOME/.local/state}/tokenbroker"
DBUS_DIR="${XDG_DATA_HOME:-$HOME/.local/share}/dbus-1/services"
BUS_NAME=com.microsoft.identity.broker1

# A shell without a login session (su, sudo -i, ssh without pam_systemd) has no XDG_RUNTIME_DIR; a user manager
# may still run in /run/user/<uid> (lingering). The broker's socket rule looks there too (Protocol/ §2.1).
if [ -z "${XDG_RUNTIME_DIR:-}" ] && [ -O "/run/user/$(id -u)" ] && [ -S "/run/user/$(id -u)/systemd/private" ]; then
  export XDG_RUNTIME_DIR="/run/user/$(id -u)"
fi

# Whether a systemd user manager answers for this user (systemctl talks to it without D-Bus).
have_user_manager() {
  command -v systemctl >/dev/null 2>&1 && [ -n "${XDG_RUNTIME_DIR:-}" ] \
    && systemctl --user show-environment >/dev/null 2>&1
}

# The cache key in the keyring (the Secret Service item org.tokenbroker.CacheKey of this cache) goes with the cache it
# opens; a key sealed to the TPM, wrapped with a passphrase or in a plain file lives in the state directory.
purge_keyring_key() {
  local record="$STATE_DIR/key.json" id
  [ -f "$record" ] && grep -q '"store" *: *"secret-service"' "$record" || return 0
  id=$(sed -n 's/.*"cacheID" *: *"\([^"]*\)".*/\1/p' "$record")
  [ -n "$id" ] || return 0
  if command -v secret-tool >/dev/null 2>&1 && secret-tool clear xdg:schema org.tokenbroker.CacheKey cache "$id"; then
    echo "the cache key is deleted from your keyring"
  else
    echo "delete the cache key from your keyring yourself: secret-tool clear xdg:schema org.tokenbroker.CacheKey cache $id" >&2
  fi
}

if [ "$UNINSTALL" = 1 ]; then
  if have_user_manager; then
    systemctl --user disable --now tokenbrokerd.socket >/dev/null 2>&1 || true
    systemctl --user stop tokenbrokerd.service >/dev/null 2>&1 || true
  fi
  rm -f "$UNIT_DIR/tokenbrokerd.socket" "$UNIT_DIR/tokenbrokerd.service" "$DBUS_DIR/$BUS_NAME.service"
  have_user_manager && systemctl --user daemon-reload
  rm -f "$BIN_DIR/tokenbrokerd" "$BIN_DIR/tokenbroker"
  if [ "$PURGE" = 1 ]; then
    purge_keyring_key
    rm -rf "$STATE_DIR"
    echo "uninstalled; the token cache in $STATE_DIR is deleted"
  else
    echo "uninstalled; your tokens stay in $STATE_DIR (delete them with: $0 --uninstall --purge)"
  fi
  exit 0
fi

if [ -z "$BINARIES" ]; then
  echo "=== build prerequisites"
  need_swift
  need_packages libsqlite3-dev libsystemd-dev libsecret-1-dev libtss2-dev libargon2-dev pkg-config
  echo "=== building (release, static Swift runtime; the CLI is a static executable and starts in about 1 ms)"
  swift build "${RELEASE_BUILD[@]}" --product tokenbrokerd
  # The linker notes that getaddrinfo and dlopen in a static executable need this machine's glibc at run time: the CLI
  # is built here for here, and talks to the broker over its Unix socket only.
  swift build "${RELEASE_BUILD[@]}" --product tokenbroker
  BINARIES=$(swift build "${RELEASE_BUILD[@]}" --show-bin-path)
fi

echo "=== installing into $BIN_DIR"
mkdir -p "$BIN_DIR"
install -m 0755 "$BINARIES/tokenbrokerd" "$BINARIES/tokenbroker" "$BIN_DIR/"
case ":$PATH:" in
  *":$BIN_DIR:"*) ;;
  *) echo "note: $BIN_DIR is not on your PATH; add it, for example in ~/.profile" ;;
esac

if ! have_user_manager; then
  echo "no systemd user manager answers here (a container, CI, or a shell without a login session):"
  echo "the units are not installed. Run the broker in the foreground with: $BIN_DIR/tokenbrokerd"
  if [ "$RUN" = 1 ]; then
    echo "=== running tokenbrokerd in the foreground (Ctrl-C stops it; your tokens stay in $STATE_DIR)"
    exec "$BIN_DIR/tokenbrokerd"
  fi
  exit 0
fi

echo "=== installing the systemd user units into $UNIT_DIR"
mkdir -p "$UNIT_DIR"
install -m 0644 systemd/tokenbrokerd.socket "$UNIT_DIR/tokenbrokerd.socket"
sed -e "s|@BIN@|$BIN_DIR/tokenbrokerd|" -e "s|@STATE@|$STATE_DIR|" systemd/tokenbrokerd.service.in \
  > "$UNIT_DIR/tokenbrokerd.service.new"
mv "$UNIT_DIR/tokenbrokerd.service.new" "$UNIT_DIR/tokenbrokerd.service"
# Bus activation for MSAL apps (Broker1), unless another broker provides the name: never shadow it.
other_broker=""
for directory in /usr/share/dbus-1/services /usr/local/share/dbus-1/services; do
  [ -e "$directory/$BUS_NAME.service" ] && other_broker="$directory/$BUS_NAME.service"
done
if [ -n "$other_broker" ]; then
  echo "note: another broker provides $BUS_NAME ($other_broker): MSAL apps keep using it; tokenbroker"
  echo "      answers them only while that one is not running"
else
  mkdir -p "$DBUS_DIR"
  install -m 0644 systemd/$BUS_NAME.service "$DBUS_DIR/$BUS_NAME.service"
fi
systemctl --user daemon-reload
if [ "$RUN" = 1 ]; then
  systemctl --user enable --now tokenbrokerd.socket
  # An upgrade: a running daemon picks up the new binary on its next start.
  systemctl --user try-restart tokenbrokerd.service
  echo "tokenbroker is installed; the broker starts on the first connection. Try: tokenbroker status"
else
  systemctl --user enable tokenbrokerd.socket
  echo "installed and enabled; start it now with: systemctl --user start tokenbrokerd.socket"
fi
