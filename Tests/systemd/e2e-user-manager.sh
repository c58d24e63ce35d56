#!/bin/bash
# The installed units under a real `systemd --user` (run through with-user-manager.sh, as the unprivileged
# user, with the project at /srv and debug binaries in /srv/.build/debug):
# install, activation on first connect, READY and STATUS, a sign-in whose browser runs outside the service,
# reload, a crash restarted, a hung daemon killed by the watchdog and restarted, idle exit and re-activation,
# stop draining a request in flight, uninstall keeping the tokens; after every disruption the acknowledged
# writes are all there. Prints "ok"/"FAIL" lines and a tally; exits non-zero on any failure.
set -u
SRC=/srv
BUILD=$SRC/.build/debug
export PATH=$HOME/.local/bin:$PATH
PASS=0; FAIL=0
ok() { echo "ok - $1"; PASS=$((PASS + 1)); }
fail() { echo "FAIL - $1"; FAIL=$((FAIL + 1)); }
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name"; fi; }
unit() { systemctl --user show -P "$1" tokenbrokerd."${2:-service}"; }
# wait_until SECONDS COMMAND...: polls every 0.1 s; false when time runs out.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.1; done
}
is() { [ "$(unit "$1" "${3:-service}")" = "$2" ]; }
accounts() { tokenbroker accounts --json 2>/dev/null | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
finish() {
  echo "$PASS passed, $FAIL failed"
  [ "$FAIL" = 0 ]
  exit
}

# --- a provider to sign in with: the Entra-shaped test provider, tokens living 200 s (every silent request refreshes)
"$BUILD/tokenbroker-test-idp" --port 0 --token-lifetime 200 > "$HOME/idp.json" 2> "$HOME/idp.log" &
IDP_PID=$!
trap 'kill $IDP_PID 2>/dev/null' EXIT
wait_until 60 test -s "$HOME/idp.json" || { fail "the test provider starts"; finish; }
PORT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$HOME/idp.json")
AUTHORITY="http://127.0.0.1:$PORT/7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a"
X=aaaaaaaa-0000-4000-8000-00000000000a
SCOPE=api://tokenbroker-tests/Things.Read

# --- install
# The test user's home is a tmpfs, not its passwd entry's (nobody: /nonexistent), where dbus-daemon looks for
# activation files unless XDG_DATA_HOME says otherwise: say it before the session bus starts (on first use).
systemctl --user set-environment XDG_DATA_HOME="$HOME/.local/share"
"$SRC/scripts/install.sh" --binaries "$BUILD" > "$HOME/install.log" 2>&1
check "install.sh installs the units and enables the socket" [ "$(systemctl --user is-enabled tokenbrokerd.socket)" = enabled ]
check "the socket listens" is ActiveState active socket
check "the service waits for the first connection" is ActiveState inactive
SOCK=$XDG_RUNTIME_DIR/tokenbroker/broker.sock
check "socket 0600 in a 0700 directory" [ "$(stat -c %a "$SOCK")/$(stat -c %a "${SOCK%/*}")" = 600/700 ]
# Test settings: a short watchdog and idle exit, and the test provider treated as Entra ID.
mkdir -p "$HOME/.config/systemd/user/tokenbrokerd.service.d"
cat > "$HOME/.config/systemd/user/tokenbrokerd.service.d/test.conf" <<EOF
[Service]
WatchdogSec=2s
ExecStart=
ExecStart=$HOME/.local/bin/tokenbrokerd --state-directory=$HOME/.local/state/tokenbroker --idle-exit=4 --entra-host=127.0.0.1:$PORT
EOF
systemctl --user daemon-reload

# --- activation on the first connection, READY=1, STATUS=
STATUS_OUT=$(tokenbroker status 2>&1)
check "tokenbroker status activates the broker" is ActiveState active
check "status says it is socket-activated" grep -q "socket-activated by systemd" <<<"$STATUS_OUT"
check "status shows the units" grep -q "tokenbrokerd.socket active (running), tokenbrokerd.service active (running)" <<<"$STATUS_OUT"
check "READY=1 and a readable STATUS= (systemctl status)" grep -q "^Serving $SOCK (socket-activated)" <<<"$(unit StatusText)"

# --- sign in: the browser is started through the user manager, outside the service's cgroup and sandbox
cat > "$HOME/browser.sh" <<EOF
#!/bin/sh
{ cat /proc/self/cgroup; grep '^NoNewPrivs' /proc/self/status; } > $HOME/browser-state
authorize=\$(curl -s -o /dev/null -w '%{redirect_url}' "\$1")
exec curl -s -o /dev/null -L --data-urlencode username=ada@contoso.example "\$authorize"
EOF
chmod +x "$HOME/browser.sh"
tokenbroker login --client-id "$X" --authority "$AUTHORITY" --scope "$SCOPE" --webview custom \
  --browser-command "$HOME/browser.sh" > "$HOME/login.out" 2>&1
check "sign-in through the installed service" grep -q "signed in as ada@contoso.example" "$HOME/login.out"
check "the browser ran as its own unit, not in the broker's cgroup" \
  bash -c "grep -q tokenbroker-browser- $HOME/browser-state && ! grep -q tokenbrokerd.service $HOME/browser-state"
check "the browser is free of the broker's no_new_privs" grep -q "NoNewPrivs:.0" "$HOME/browser-state"

# --- a second acknowledged write: an imported MSAL cache
python3 - "$HOME/seed.json" <<'PY'
import json, sys, time
home, env, client, realm = "0001.7d3c2b1a", "login.microsoftonline.com", "11111111-2222-4333-8444-555555555555", "7d3c2b1a"
far = str(int(time.time()) + 86400)
json.dump({
  "Account": {f"{home}-{env}-{realm}": {"home_account_id": home, "environment": env, "realm": realm,
              "local_account_id": "0001", "username": "grace@contoso.example", "authority_type": "MSSTS"}},
  "AccessToken": {f"{home}-{env}-accesstoken-{client}-{realm}-user.read": {"credential_type": "AccessToken",
              "secret": "imported-access-token-e2e", "home_account_id": home, "environment": env, "client_id": client,
              "realm": realm, "target": "User.Read", "cached_at": far, "expires_on": far}}}, open(sys.argv[1], "w"))
PY
check "an import is acknowledged" bash -c "tokenbroker import $HOME/seed.json > /dev/null"
check "both accounts are there" [ "$(accounts)" = 2 ]
# The thread that writes the cache is SCHED_BATCH (policy 3, field 41 of a thread's stat), which the unit's syscall
# filter allows: it must not take the event loop's CPU in the middle of an answer. Commit, then look while the
# writer's thread is still there (libdispatch ends idle threads after a while).
writer_is_batch() {
  tokenbroker import "$HOME/seed.json" > /dev/null 2>&1 || return 1
  local pid; pid=$(unit MainPID)
  for stat in /proc/"$pid"/task/*/stat; do sed 's/^.*) //' "$stat" 2>/dev/null | cut -d' ' -f39; done | grep -qx 3
}
check "the cache's writer runs SCHED_BATCH inside the unit's sandbox" wait_until 30 writer_is_batch
# The event loop asks for 0.1 ms slices (se.slice, Linux >= 6.12), which the filter allows too. Threads it starts
# carry its name until they rename themselves, and begin with the default slice (reset on fork).
event_loop_slices() {
  local pid; pid=$(unit MainPID)
  for task in /proc/"$pid"/task/*; do
    [ "$(cat "$task/comm")" = "NIO-SGLTN-1-#1" ] && awk '$1 == "se.slice" { print $3 }' "$task/sched"
  done
}
IFS=. read -r KERNEL_MAJOR KERNEL_MINOR _ <<<"$(uname -r)"
if [ "$KERNEL_MAJOR" -gt 6 ] || { [ "$KERNEL_MAJOR" = 6 ] && [ "${KERNEL_MINOR%%[!0-9]*}" -ge 12 ]; }; then
  check "the event loop runs on 0.1 ms slices inside the unit's sandbox" grep -qx 100000 <<<"$(event_loop_slices)"
else
  echo "SKIPPED: the event loop's slice (custom slices need Linux 6.12; this is $(uname -r))"
fi

# --- reload: RELOADING=1 … READY=1, same process
PID=$(unit MainPID)
# The broker sets these limits and its umask itself too (ProcessHardening): the unit's own settings are checked
# as the user manager reads them, and their effect on the running broker beside.
check "the unit sets LimitCORE=0, LimitNOFILE=8192, LimitRTPRIO=0 and UMask=0077" \
  [ "$(unit LimitCORE)/$(unit LimitNOFILE)/$(unit LimitRTPRIO)/$(unit UMask)" = "0/8192/0/0077" ]
check "no core dump: the broker runs with a core limit of 0" grep -Eq "^Max core file size +0 +0 " "/proc/$PID/limits"
check "the broker may open 8192 descriptors" grep -Eq "^Max open files +8192 " "/proc/$PID/limits"
check "the unit bounds the broker's memory" [ "$(unit MemoryMax)/$(unit MemoryHigh)" = "$((512 << 20))/$((256 << 20))" ]
check "files the broker creates are private (UMask=0077)" [ "$(stat -c %a "$HOME/.local/state/tokenbroker/db/cache.sqlite3")" = 600 ]
check "systemctl --user reload" systemctl --user reload tokenbrokerd.service
check "a reload keeps the process" [ "$(unit MainPID)" = "$PID" ]
# systemd 252 ends the reload job when ExecReload's kill returns, before the daemon's READY=1: wait for the status,
# which keeps saying it reloaded (a watchdog tick rewrites the counts in it, not that).
check "the status says it reloaded" wait_until 60 bash -c "systemctl --user show -P StatusText tokenbrokerd.service | grep -q '; reloaded (log level info)\$'"

# --- a crash is restarted (Restart=on-failure), nothing lost
kill -SEGV "$PID"
check "systemd sees the crash" wait_until 60 bash -c "systemctl --user show -P Result tokenbrokerd.service | grep -Eq '^(signal|core-dump)$'"
check "a crashed broker is restarted" wait_until 60 bash -c "[ \"\$(systemctl --user show -P NRestarts tokenbrokerd.service)\" = 1 ] && [ \"\$(systemctl --user show -P ActiveState tokenbrokerd.service)\" = active ]"
check "after the crash both accounts are there" [ "$(accounts)" = 2 ]

# --- a hung broker (stopped: no more watchdog pings) is killed by the watchdog and restarted
PID=$(unit MainPID)
kill -STOP "$PID"
check "the watchdog notices the hung broker" wait_until 60 is Result watchdog
check "a hung broker is killed and restarted" wait_until 60 bash -c "[ \"\$(systemctl --user show -P NRestarts tokenbrokerd.service)\" = 2 ] && [ \"\$(systemctl --user show -P ActiveState tokenbrokerd.service)\" = active ] && [ \"\$(systemctl --user show -P MainPID tokenbrokerd.service)\" != $PID ]"
check "after the watchdog both accounts are there" [ "$(accounts)" = 2 ]

# --- idle exit, and the next connection starts it again
check "idle exit after 4 s without connections" wait_until 60 is ActiveState inactive
check "an idle exit is a success" is Result success
check "the socket stays" is ActiveState active socket
check "the next connection starts it again" bash -c "tokenbroker status > /dev/null"
check "re-activated" is ActiveState active

# --- stop drains the request in flight (a refresh the provider takes 3 s to answer)
curl -s -X POST -H 'Content-Type: application/json' -d '{"ms":3000}' "http://127.0.0.1:$PORT/_test/delay" > /dev/null
token_requests() { curl -s "http://127.0.0.1:$PORT/_test/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokenRequests"])'; }
BEFORE=$(token_requests)
tokenbroker token --client-id "$X" --authority "$AUTHORITY" --scope "$SCOPE" > "$HOME/inflight.out" 2>&1 &
INFLIGHT=$!
# Stop once the refresh is at the provider (which holds it for 3 s), not before it started.
more_token_requests() { [ "$(token_requests)" -gt "$BEFORE" ]; }
check "the refresh reaches the provider" wait_until 60 more_token_requests
systemctl --user stop tokenbrokerd.service 2> /dev/null  # (it warns that the socket can start it again)
wait $INFLIGHT; RC=$?
check "a request in flight during stop is answered" eval '[ "$RC" = 0 ] && [ -s "$HOME/inflight.out" ]'
check "stop was clean" is Result success
curl -s -X POST -H 'Content-Type: application/json' -d '{}' "http://127.0.0.1:$PORT/_test/reset" > /dev/null
# The refresh during stop rotated the refresh token: had the new one been lost, the provider would take the old
# one for a replay and revoke the sign-in.
check "the refresh token rotated during stop was kept" \
  bash -c "tokenbroker token --client-id $X --authority $AUTHORITY --scope $SCOPE > /dev/null"

# --- Broker1 on the user's session bus (dbus-user-session's dbus.socket): an MSAL app's first Ping starts the same
# socket-activated service through the shipped activation file; a bus call keeps it; idle, it leaves and releases
# the name; the next Ping starts it again.
BUS_NAME=com.microsoft.identity.broker1
check "install.sh installed the D-Bus activation file" \
  grep -q "^SystemdService=tokenbrokerd.service" "$HOME/.local/share/dbus-1/services/$BUS_NAME.service"
systemctl --user start dbus.socket  # (started with the manager already where sockets.target wants it)
export DBUS_SESSION_BUS_ADDRESS=unix:path=$XDG_RUNTIME_DIR/bus
ping_broker() { busctl --user --timeout=60 call $BUS_NAME /com/microsoft/identity/broker1 org.freedesktop.DBus.Peer Ping; }
owner_pid() { busctl --user status $BUS_NAME 2>/dev/null | sed -n 's/^PID=//p'; }
systemctl --user stop tokenbrokerd.service 2> /dev/null  # the last check's token request started it again
check "the broker is stopped before the first Ping" is ActiveState inactive
check "the first Ping is answered" ping_broker
# The broker says READY=1 once it owns the name; the Ping's answer can reach busctl before systemd has read that.
check "the Ping started tokenbrokerd.service" wait_until 30 is ActiveState active
check "the service's daemon owns the name" bash -c "[ \"\$(busctl --user status $BUS_NAME | sed -n 's/^PID=//p')\" = \"\$(systemctl --user show -P MainPID tokenbrokerd.service)\" ]"
check "tokenbroker status says it owns the name" bash -c "tokenbroker status | grep -Eq '^bus: +answers MSAL apps as $BUS_NAME'"
check "a Broker1 call is answered by the activated broker" bash -c \
  "busctl --user call $BUS_NAME /com/microsoft/identity/broker1 com.microsoft.identity.Broker1 getLinuxBrokerVersion sss 0.0 c1 '{}' | grep -q linuxBrokerVersion"
check "idle, the bus-activated broker exits cleanly" wait_until 60 is ActiveState inactive
check "and its exit released the name" bash -c "[ -z \"\$(busctl --user status $BUS_NAME 2>/dev/null | sed -n 's/^PID=//p')\" ]"
check "the next Ping starts it again" ping_broker
check "started again" wait_until 30 is ActiveState active
systemctl --user stop tokenbrokerd.service 2> /dev/null
unset DBUS_SESSION_BUS_ADDRESS

# --- the secrets the journal must not hold, for the check that runs as root afterwards
tokenbroker export | python3 -c '
import json, sys
doc = json.load(sys.stdin)
for section in ("AccessToken", "RefreshToken", "IdToken"):
    for entry in doc.get(section, {}).values():
        print(entry["secret"])' > "$HOME/secrets.txt"
check "secrets collected for the journal check" [ "$(wc -l < "$HOME/secrets.txt")" -ge 3 ]

# --- uninstall keeps the tokens
"$SRC/scripts/install.sh" --uninstall > "$HOME/uninstall.log" 2>&1
check "uninstall removes the units" [ ! -e "$HOME/.config/systemd/user/tokenbrokerd.service" ]
check "uninstall stops the socket" bash -c "! systemctl --user is-active --quiet tokenbrokerd.socket"
check "uninstall keeps the tokens" test -s "$HOME/.local/state/tokenbroker/cache.key"
finish
