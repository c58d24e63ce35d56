#!/usr/bin/env bash
# The peer beside `tokenbroker token` in the benchmark: `oidc-token <account>` from Debian's oidc-agent, answering
# from the agent's cache, timed by the same harness (hyperfine -N) as bench.sh times `tokenbroker token`.
#
#   scripts/bench-oidc-token.sh [RUNS]        RUNS: hyperfine's --runs (default 200)
#
# Prints one JSON line on stdout, {"kind":"process","label":"oidc-token","median_ms":…,"mean_ms":…,"max_ms":…};
# everything else goes to stderr. On a fresh Debian 12 machine it installs oidc-agent-cli and the tests' virtualenv
# (.venv-tests, with oidc-provider-mock), then: the provider on a free loopback port, a registered client, an
# oidc-agent with a private HOME and TMPDIR, `oidc-gen` through the authorization-code flow with curl as the browser
# (as /work/shared/tools/oidc-agent-peer.sh does), one checked `oidc-token`, and the timing. Every process started
# here (provider, agent and what the agent leaves in its session) is stopped on exit, whatever the outcome.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
source scripts/lib.sh

RUNS=${1:-200}
case $RUNS in '' | *[!0-9]*) echo "usage: $0 [RUNS]" >&2; exit 2 ;; esac
ACCOUNT=bench

WORK=$(mktemp -d); IDP=""; AGENT=""; GEN=""
# running PID: the process exists and is not a zombie (the agent's processes, reparented to init, can stay zombies a
# while after they exit).
running() { local state; state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1; [[ $state != Z* ]]; }
# Wait up to 1 s for the processes named to exit, then SIGKILL what is left.
wait_gone() {
  local p alive=""
  for _ in $(seq 10); do
    alive=""
    for p in "$@"; do running "$p" && alive="$alive $p"; done
    [ -z "$alive" ] && return 0
    sleep 0.1
  done
  for p in $alive; do kill -9 "$p" 2>/dev/null || true; done
}
# oidc-agent daemonizes into a session of its own: the pid it prints, its daemon child and, once oidc-gen's code flow
# ran, a web server that keeps listening on the redirect port, outlives `oidc-agent -k` and ignores SIGTERM (4.2.6).
# Everything in that session (never in ours) is noted first, the agent is asked to stop, and what remains is killed.
stop_agent() {
  local sid mysid pids
  sid=$(ps -o sid= -p "$1" 2>/dev/null | tr -d ' ') || true
  mysid=$(ps -o sid= -p $$ | tr -d ' ')
  pids="$1 $(pgrep -P "$1" 2>/dev/null | tr '\n' ' ')" || true
  if [ -n "$sid" ] && [ "$sid" != "$mysid" ]; then pids="$pids $(pgrep -s "$sid" 2>/dev/null | tr '\n' ' ')" || true; fi
  OIDCD_PID="$1" oidc-agent -k >/dev/null 2>&1 || kill "$1" 2>/dev/null || true
  # shellcheck disable=SC2086  # a list of pids
  wait_gone $pids
}
cleanup() {
  if [ -n "$GEN" ]; then kill "$GEN" 2>/dev/null || true; wait_gone "$GEN"; fi
  if [ -n "$AGENT" ]; then stop_agent "$AGENT"; fi
  if [ -n "$IDP" ]; then kill "$IDP" 2>/dev/null || true; wait_gone "$IDP"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
fail() { echo "bench-oidc-token: $*" >&2; exit 1; }
# free_ports N: N distinct free TCP ports on the loopback, between 10000 and 32767: oidc-agent takes redirect ports only
# up to 49151, and below Linux's ephemeral range no outgoing connection takes the port meanwhile.
free_ports() {
  python3 - "$1" <<'PY'
import random, socket, sys
held = []
for port in random.sample(range(10000, 32768), 2000):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    held.append(s)
    if len(held) == int(sys.argv[1]):
        break
print(*(s.getsockname()[1] for s in held))
PY
}
echo "=== oidc-token (oidc-agent) as a whole process ($RUNS runs)" >&2
need_packages curl procps hyperfine python3-venv >&2
command -v oidc-gen >/dev/null 2>&1 || need_packages oidc-agent-cli >&2
{ oidc-agent --version 2>&1 || true; } | head -n 1 >&2
# The tests' virtualenv (.venv-tests), made as scripts/test.sh makes it, before HOME changes (pick_python looks in
# ~/.pyenv). Its last line of output is its Python.
test_venv | tee "$WORK/venv.out" >&2
VENV_BIN=$(dirname "$(tail -n 1 "$WORK/venv.out")")
[ -x "$VENV_BIN/oidc-provider-mock" ] || fail "$VENV_BIN/oidc-provider-mock is missing"

read -r PORT REDIRECT_PORT < <(free_ports 2)
[ -n "$REDIRECT_PORT" ] || fail "no two free loopback ports between 10000 and 32767"
ISSUER="http://127.0.0.1:$PORT"
# The agent and its tools see only this HOME and TMPDIR: the account configuration goes under $WORK/home, the
# agent's socket under $WORK/tmp.
export HOME="$WORK/home" TMPDIR="$WORK/tmp" OIDC_ENCRYPTION_PW=bench-password  # the last is read by --pw-env
mkdir -p "$HOME" "$TMPDIR"

NO_COLOR=1 PYTHONWARNINGS=ignore "$VENV_BIN/oidc-provider-mock" --host 127.0.0.1 --port "$PORT" --user alice \
  --token-max-age 3600 >"$WORK/idp.log" 2>&1 &
IDP=$!
for _ in $(seq 300); do
  curl -sf "$ISSUER/.well-known/openid-configuration" >/dev/null 2>&1 && break
  kill -0 "$IDP" 2>/dev/null || { cat "$WORK/idp.log" >&2; fail "the provider exited"; }
  sleep 0.05
done
curl -sf "$ISSUER/.well-known/openid-configuration" >/dev/null || fail "the provider did not answer within 15 s"

# oidc-agent takes only redirect URIs of the form http://localhost:<port>[/…]. oidc-gen 4.x adds offline_access to the
# scope and refreshes with the full stored scope; the mock grants only the scopes the client registered, so the
# client registers offline_access too.
REDIRECT_URI="http://localhost:$REDIRECT_PORT/redirect"
curl -sf -X POST "$ISSUER/oauth2/clients" -H 'Content-Type: application/json' \
  -d "{\"redirect_uris\":[\"$REDIRECT_URI\"],\"token_endpoint_auth_method\":\"client_secret_basic\",\"scope\":\"openid profile email offline_access\"}" \
  >"$WORK/client.json" || fail "client registration failed"
read -r CLIENT_ID CLIENT_SECRET < <(python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); print(c["client_id"], c["client_secret"])' "$WORK/client.json")

# The agent daemonizes; --json prints its socket and pid.
oidc-agent --json --no-autoload >"$WORK/agent.json" 2>"$WORK/agent.err" || { cat "$WORK/agent.err" >&2; fail "oidc-agent did not start"; }
read -r OIDC_SOCK AGENT < <(python3 -c 'import json, sys; a = json.load(open(sys.argv[1])); print(a["socket"], a["dpid"])' "$WORK/agent.json")
export OIDC_SOCK OIDCD_PID="$AGENT"

# The authorization-code flow without a human: oidc-gen prints the authorization URL; curl submits the provider's
# sign-in form and delivers the redirect to the agent's loopback web server, which exchanges the code; oidc-gen,
# polling the agent, then saves the account.
oidc-gen "$ACCOUNT" --iss="$ISSUER" --client-id="$CLIENT_ID" --client-secret="$CLIENT_SECRET" \
  --redirect-uri="$REDIRECT_URI" --scope="openid profile email" --flow=code \
  --no-url-call --prompt=none --pw-env --confirm-yes </dev/null >"$WORK/gen.out" 2>"$WORK/gen.err" &
GEN=$!
AUTH_URL=""
for _ in $(seq 100); do
  AUTH_URL=$(grep -m1 -o 'http[^ ]*/oauth2/authorize?[^ ]*' "$WORK/gen.err" 2>/dev/null) || true
  [ -n "$AUTH_URL" ] && break
  kill -0 "$GEN" 2>/dev/null || break
  sleep 0.1
done
[ -n "$AUTH_URL" ] || { cat "$WORK/gen.out" "$WORK/gen.err" >&2; fail "oidc-gen printed no authorization URL"; }
LOCATION=$(curl -sf -o /dev/null -w '%{redirect_url}' --data-urlencode sub=alice "$AUTH_URL") || fail "the provider's sign-in failed"
case $LOCATION in "http://localhost:$REDIRECT_PORT/redirect?"*code=*) ;; *) fail "the provider redirected to '$LOCATION'" ;; esac
curl -sf -o /dev/null "$LOCATION" || fail "the agent's web server refused the redirect"
for _ in $(seq 300); do kill -0 "$GEN" 2>/dev/null || break; sleep 0.1; done
kill -0 "$GEN" 2>/dev/null && { cat "$WORK/gen.out" "$WORK/gen.err" >&2; fail "oidc-gen did not finish within 30 s of the redirect"; }
GEN_STATUS=0; wait "$GEN" || GEN_STATUS=$?; GEN=""
[ "$GEN_STATUS" = 0 ] || { cat "$WORK/gen.out" "$WORK/gen.err" >&2; fail "oidc-gen failed ($GEN_STATUS)"; }

# Once, before timing: the answer is an access token the provider takes (its userinfo endpoint names the user signed
# in; the mock's tokens are opaque), and a second call gives the same one (the agent's cache, not a refresh).
OIDC_TOKEN=$(command -v oidc-token)
TOKEN=$("$OIDC_TOKEN" "$ACCOUNT") || fail "oidc-token $ACCOUNT failed"
USERINFO=$(curl -sf -H "Authorization: Bearer $TOKEN" "$ISSUER/userinfo") || fail "the provider refused oidc-token's answer as an access token"
[ "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["sub"])' "$USERINFO")" = alice ] \
  || fail "the provider's userinfo for oidc-token's answer is not alice's: $USERINFO"
[ "$("$OIDC_TOKEN" "$ACCOUNT")" = "$TOKEN" ] || fail "a second oidc-token gave another token (no cache?)"
token_calls() { grep -c 'POST /oauth2/token' "$WORK/idp.log" || true; }
BEFORE=$(token_calls)

# The same harness as `tokenbroker token` in bench.sh: no shell, 10 warm-up runs, then RUNS runs.
hyperfine -N --warmup 10 --runs "$RUNS" --export-json "$WORK/oidc-token.json" "$OIDC_TOKEN $ACCOUNT" >&2
AFTER=$(token_calls)
[ "$AFTER" = "$BEFORE" ] || fail "the provider saw $((AFTER - BEFORE)) token request(s) while oidc-token was timed: not the cache"
[ "$("$OIDC_TOKEN" "$ACCOUNT")" = "$TOKEN" ] || fail "oidc-token's token changed while it was timed"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; print(json.dumps({"kind":"process","label":"oidc-token","median_ms":r["median"]*1000,"mean_ms":r["mean"]*1000,"max_ms":r["max"]*1000}))' \
  "$WORK/oidc-token.json"
