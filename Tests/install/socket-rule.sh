#!/bin/bash
# The socket rule of Protocol/ §2.1 where no login session set XDG_RUNTIME_DIR (a root shell in a container, ssh
# without pam_systemd, CI): scripts/install.sh runs the broker and `tokenbroker status` finds it, as root and as an
# unprivileged user; /run/user/<uid> is used when it is the user's private directory; and the hostile cases are
# refused by daemon and client alike (a directory of another user, a symbolic link, a directory open to others, a
# socket served by another uid).
#
# Needs root and a mount namespace of its own (a private /tmp and /run/user):
#   unshare -m --propagation private Tests/install/socket-rule.sh
# Prints "ok"/"FAIL" lines and a tally; exits non-zero on any failure.
set -u
SRC=$(cd "$(dirname "$0")/../.." && pwd)
PASS=0; FAIL=0
ok() { echo "ok - $1"; PASS=$((PASS + 1)); }
fail() { echo "FAIL - $1"; FAIL=$((FAIL + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
# wait_until SECONDS COMMAND...: polls every 0.05 s for the condition; false when time runs out.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.05; done
}
mode() { stat -c %a "$1"; }
# said STATUS PATTERN: the last command ($RC, $OUT) exited with STATUS and its output has PATTERN.
said() {
  [ "$RC" = "$1" ] && grep -q -- "$2" <<<"$OUT" && return
  echo "  # expected exit $1 and \"$2\"; got exit $RC: $(head -c 300 <<<"$OUT")"
  return 1
}
# listening PATH (scripts/lib.sh): the socket takes a connection.
source "$SRC/scripts/lib.sh"

[ "$(id -u)" = 0 ] || { echo "needs root (and: unshare -m --propagation private)"; exit 2; }
# The project stays reachable at /srv: a scratch clone under /tmp would vanish under the new /tmp.
mkdir -p /srv && mount --bind "$SRC" /srv || exit 2
SRC=/srv
BUILD=${BUILD:-$SRC/.build/debug}
# Nothing of this machine's /tmp or /run/user is seen or touched.
mount -t tmpfs -o mode=1777 tmpfs /tmp || exit 2
mkdir -p /run/user && mount -t tmpfs -o mode=755 tmpfs /run/user || exit 2

NOBODY=$(id -u nobody)
AS_NOBODY=(setpriv --reuid=nobody --regid="$(id -g nobody)" --clear-groups --inh-caps=-all)
# Shells without a login session, root's and nobody's: no XDG_RUNTIME_DIR, no TOKENBROKER_SOCKET. (Arrays, not
# functions: a function run in the background is a subshell, and $! would not be the daemon.)
HOME0=$(mktemp -d)
HOMEN=$(mktemp -d); chown nobody "$HOMEN"
ROOT_SHELL=(env -u XDG_RUNTIME_DIR -u TOKENBROKER_SOCKET HOME="$HOME0" PATH="$HOME0/.local/bin:/usr/bin:/bin")
USER_SHELL=(env -u XDG_RUNTIME_DIR -u TOKENBROKER_SOCKET HOME="$HOMEN" PATH="/usr/bin:/bin" "${AS_NOBODY[@]}")

# --- root: install.sh installs and runs the broker in the foreground; status reaches it by the fallback rule
"${ROOT_SHELL[@]}" "$SRC/scripts/install.sh" --binaries "$BUILD" > "$HOME0/install.log" 2>&1 &
DAEMON=$!
SOCK=/tmp/tokenbroker-0/broker.sock
check "install.sh runs the broker without XDG_RUNTIME_DIR" wait_until 30 listening "$SOCK"
grep -q "no systemd user manager" "$HOME0/install.log" || fail "install.sh says why it runs in the foreground"
OUT=$("${ROOT_SHELL[@]}" tokenbroker status 2>&1); RC=$?
check "tokenbroker status answers without XDG_RUNTIME_DIR (exit $RC)" [ "$RC" = 0 ]
check "status names the socket /tmp/tokenbroker-0/broker.sock" grep -q "^socket: *$SOCK " <<<"$OUT"
check "the fallback directory is 0700, the socket 0600" [ "$(mode /tmp/tokenbroker-0)/$(mode "$SOCK")" = 700/600 ]
# Protocol/ §16's shell snippet, as printed, finds the same socket and is answered.
sed -n '/^private() {/,/^```$/p' "$SRC/Protocol/README.md" | sed '$d' > "$HOME0/snippet.sh"
OUT=$("${ROOT_SHELL[@]}" bash "$HOME0/snippet.sh" 2>&1); RC=$?
check "Protocol/ §16's socat snippet reaches the broker without XDG_RUNTIME_DIR (exit $RC)" said 0 '"linuxBrokerVersion"'
kill "$DAEMON"; wait "$DAEMON"; RC=$?
check "the broker stops cleanly on SIGTERM (exit $RC)" [ "$RC" = 0 ]
check "and removes its socket" [ ! -e "$SOCK" ]

# --- an unprivileged user without /run/user/<uid>
"${USER_SHELL[@]}" "$BUILD/tokenbrokerd" > "$HOMEN/daemon.log" 2>&1 &
DAEMON=$!
check "an unprivileged user's broker serves /tmp/tokenbroker-$NOBODY" wait_until 30 listening "/tmp/tokenbroker-$NOBODY/broker.sock"
OUT=$("${USER_SHELL[@]}" "$BUILD/tokenbroker" status 2>&1); RC=$?
check "and status reaches it (exit $RC)" said 0 "/tmp/tokenbroker-$NOBODY/broker.sock"
OUT=$("${ROOT_SHELL[@]}" "$BUILD/tokenbroker" status --socket "/tmp/tokenbroker-$NOBODY/broker.sock" 2>&1); RC=$?
check "root's client refuses a socket of another user's directory (exit $RC)" \
  said 77 "belongs to another user"
kill "$DAEMON"; wait "$DAEMON"

# --- /run/user/<uid>, when it is the user's private directory, comes before /tmp
mkdir -m 700 /run/user/0
"${ROOT_SHELL[@]}" "$BUILD/tokenbrokerd" > "$HOME0/daemon-run.log" 2>&1 &
DAEMON=$!
check "with a private /run/user/0 the broker serves /run/user/0/tokenbroker/broker.sock" \
  wait_until 30 listening /run/user/0/tokenbroker/broker.sock
OUT=$("${ROOT_SHELL[@]}" "$BUILD/tokenbroker" status 2>&1); RC=$?
check "and status finds it there (exit $RC)" said 0 "/run/user/0/tokenbroker/broker.sock"
kill "$DAEMON"; wait "$DAEMON"
chmod 755 /run/user/0
OUT=$("${ROOT_SHELL[@]}" "$BUILD/tokenbroker" status 2>&1)
check "a /run/user/0 open to others is not used (the client looks in /tmp)" grep -q "/tmp/tokenbroker-0" <<<"$OUT"
rm -rf /run/user/0

# --- hostile directories: another user's, a symbolic link, one open to others
rm -rf "/tmp/tokenbroker-$NOBODY"
mkdir -m 700 "/tmp/tokenbroker-$NOBODY"   # made first by root: for nobody, another user's directory
OUT=$(timeout 30 "${USER_SHELL[@]}" "$BUILD/tokenbrokerd" 2>&1); RC=$?
check "the daemon refuses a socket directory another user made (exit $RC)" \
  said 1 "belongs to another user"
OUT=$("${USER_SHELL[@]}" "$BUILD/tokenbroker" status 2>&1); RC=$?
check "so does the client, saying why (exit $RC)" said 77 "belongs to another user"
rm -rf "/tmp/tokenbroker-$NOBODY"

rm -rf /tmp/tokenbroker-0
mkdir -m 700 /tmp/elsewhere && ln -s /tmp/elsewhere /tmp/tokenbroker-0
OUT=$(timeout 30 "${ROOT_SHELL[@]}" "$BUILD/tokenbrokerd" 2>&1); RC=$?
check "the daemon refuses a socket directory that is a symbolic link (exit $RC)" \
  said 1 "symbolic link"
check "and puts nothing where it points" [ -z "$(ls -A /tmp/elsewhere)" ]
OUT=$("${ROOT_SHELL[@]}" "$BUILD/tokenbroker" status 2>&1); RC=$?
check "the client refuses it too (exit $RC)" said 77 "symbolic link"
rm /tmp/tokenbroker-0

mkdir -m 777 /tmp/tokenbroker-0 && chmod 777 /tmp/tokenbroker-0
OUT=$("${ROOT_SHELL[@]}" "$BUILD/tokenbroker" status 2>&1); RC=$?
check "the client refuses a directory of its own open to others (exit $RC)" \
  said 77 "open to other users"
"${ROOT_SHELL[@]}" "$BUILD/tokenbrokerd" > "$HOME0/daemon-777.log" 2>&1 &
DAEMON=$!
serving_privately() { listening /tmp/tokenbroker-0/broker.sock && [ "$(mode /tmp/tokenbroker-0)" = 700 ]; }
check "the daemon closes its own directory to 0700 and serves" wait_until 30 serving_privately
check "then the client is served" bash -c '"${@}" > /dev/null' - "${ROOT_SHELL[@]}" "$BUILD/tokenbroker" status
kill "$DAEMON"; wait "$DAEMON"

# --- a fake broker of another uid in a directory that passes the check: the peer check refuses it, nothing is sent
mkdir -m 700 /tmp/fake && chown nobody /tmp/fake
"${AS_NOBODY[@]}" /usr/bin/python3 -c '
import socket, sys
server = socket.socket(socket.AF_UNIX)
server.bind("/tmp/fake/broker.sock"); server.listen(4)
print("listening", flush=True)
with open("/tmp/fake/received", "wb") as out:
    while True:
        connection, _ = server.accept()
        connection.settimeout(2)
        try:
            while data := connection.recv(65536):
                out.write(data); out.flush()
        except OSError:
            pass
        connection.close()
' > /tmp/fake.log 2>&1 &
FAKE=$!
wait_until 10 listening /tmp/fake/broker.sock
chown root /tmp/fake   # now the directory is root's and private; the listener still runs as nobody
printf '{"AccessToken":{},"RefreshToken":{"k":{"secret":"victim-refresh-token"}}}' > "$HOME0/cache.json"
OUT=$("$BUILD/tokenbroker" import --socket /tmp/fake/broker.sock "$HOME0/cache.json" 2>&1); RC=$?
check "the client refuses a broker that runs as another user (exit $RC)" \
  said 77 "served by another user (uid $NOBODY)"
check "and sent it nothing" [ ! -s /tmp/fake/received ]
kill "$FAKE" 2>/dev/null; wait "$FAKE" 2>/dev/null

echo "$PASS passed, $FAIL failed"
[ "$FAIL" = 0 ]
