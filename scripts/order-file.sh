#!/usr/bin/env bash
# Writes the orders the release links place functions in (Package.swift, daemonReleaseLinkFlags and
# cliReleaseLinkFlags), so that the code a process runs sits together in a few pages of its executable:
# - Sources/tokenbrokerd/start-up.order: the daemon's functions in the order they first run through start-up, an
#   import, cached answers, a status, a sign-in and silent requests that refresh (against the local test provider),
#   and a restart on the cache stored;
# - Sources/tokenbroker/fast-path.order: the CLI's, through `token`, `kube-credential` and `git-credential get`.
# Run it again when `scripts/bench.sh` shows the idle RSS or the CLI's time climbing after code changes: functions
# added since are missing from the lists and land wherever the linker puts them (a stale list costs pages, never
# correctness).
#
#   scripts/order-file.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

need_swift
need_packages gcc binutils curl >&2
for product in tokenbrokerd tokenbroker tokenbroker-bench tokenbroker-test-idp; do
  swift build "${RELEASE_BUILD[@]}" --product "$product" >&2
done
BIN=$(swift build "${RELEASE_BUILD[@]}" --show-bin-path)
WORK=$(mktemp -d); chmod 700 "$WORK"; TRACER=""; IDP=""
# The daemon is the tracer's child (a background job's SIGINT is ignored, so it gets SIGTERM).
stop_daemon() { pkill -TERM -P "$TRACER" 2>/dev/null || true; }
cleanup() {
  [ -n "$TRACER" ] && stop_daemon
  [ -n "$IDP" ] && kill "$IDP" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
cc -O2 -o "$WORK/first_calls" Benchmarks/order/first_calls.c

# Every function of an executable (local ones too), by address from where its first segment is loaded (the static
# CLI is not position-independent: its addresses start at that segment's, not at 0).
list_functions() { # executable, output
  local base
  base=$(readelf -lW "$1" | awk '$1 == "LOAD" && $2 ~ /^0x0+$/ {print $3; exit}')
  nm --defined-only "$1" | python3 -c '
import sys
base = int(sys.argv[1], 16)
for line in sys.stdin:
    fields = line.split()
    if len(fields) == 3 and fields[1] in "tTwW":
        print("%x %s" % (int(fields[0], 16) - base, fields[2]))' "$base" > "$2"
}
list_functions "$BIN/tokenbrokerd" "$WORK/functions"
cut -d' ' -f1 "$WORK/functions" > "$WORK/entries"
list_functions "$BIN/tokenbroker" "$WORK/cli-functions"
cut -d' ' -f1 "$WORK/cli-functions" > "$WORK/cli-entries"

# The refresh path runs against the local Entra-shaped test provider (as in scripts/bench.sh). Its own code (the HTTP
# client, the token endpoint's answer, the store's writer) is some 2,400 functions: unlisted, they lay on 769 pages of
# the executable; listed, on 317 (BENCHMARKS.md, sixteenth pass).
start_test_provider "$BIN" "$WORK"
# The daemons and the sign-in read and save their configuration (the sign-in's browser) in the script's own directory.
export XDG_CONFIG_HOME="$WORK/config"
sign_in_and_refresh() {
  sign_in_test_user "$BIN" "$WORK/broker.sock" order@contoso.example api://order/Things.Read "$WORK/refresh.json"
  "$BIN/tokenbroker-bench" refresh --label order --socket "$WORK/broker.sock" --request "$WORK/refresh.json" \
    --count 50 >/dev/null
}

# Two daemons on one state directory: the first starts empty and takes an import, the second starts on what the
# first stored (as after a reboot), so the code that loads a cache is placed beside the rest of start-up.
trace_daemon() { # calls-file, what to run before the cached answers, what to run after them
  local calls=$1 before=$2 after=$3
  "$WORK/first_calls" "$WORK/entries" "$calls" -- "$BIN/tokenbrokerd" --no-bus \
    --socket "$WORK/broker.sock" --state-directory "$WORK/state" --entra-host "127.0.0.1:$IDP_PORT" \
    2>>"$WORK/daemon.log" &
  TRACER=$!
  for _ in $(seq 600); do listening "$WORK/broker.sock" && break; sleep 0.05; done
  listening "$WORK/broker.sock" || { cat "$WORK/daemon.log" >&2; exit 1; }
  $before
  "$BIN/tokenbroker-bench" latency --socket "$WORK/broker.sock" --request "$WORK/request.json" --count 200 \
    --warmup 0 >/dev/null
  TOKENBROKER_SOCKET="$WORK/broker.sock" "$BIN/tokenbroker" status >/dev/null
  $after
  stop_daemon; wait "$TRACER" || true; TRACER=""
}
seed() {
  "$BIN/tokenbroker-bench" seed --socket "$WORK/broker.sock" --tokens 10 --request-file "$WORK/request.json"
}
trace_daemon "$WORK/calls" seed sign_in_and_refresh
# The CLI's fast paths, each traced in a process of its own, against the restarted daemon.
trace_cli() {
  local app
  read -r -a app < <(python3 - "$WORK/request.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["params"]["authParameters"]
print("--client-id", p["clientId"], "--authority", p["authority"], "--scope", p["requestedScopes"][0],
      "--account", p["account"]["identifier"])
PY
  )
  export TOKENBROKER_SOCKET="$WORK/broker.sock"
  "$WORK/first_calls" "$WORK/cli-entries" "$WORK/cli-calls" -- "$BIN/tokenbroker" token "${app[@]}" >/dev/null
  "$WORK/first_calls" "$WORK/cli-entries" "$WORK/cli-calls-kube" -- "$BIN/tokenbroker" kube-credential "${app[@]}" \
    >/dev/null
  printf 'protocol=https\nhost=git.example.com\n\n' | "$WORK/first_calls" "$WORK/cli-entries" "$WORK/cli-calls-git" \
    -- "$BIN/tokenbroker" git-credential "${app[@]}" get >/dev/null
  cat "$WORK/cli-calls-kube" "$WORK/cli-calls-git" >> "$WORK/cli-calls"
  unset TOKENBROKER_SOCKET
}
trace_daemon "$WORK/calls-restarted" trace_cli :
cat "$WORK/calls-restarted" >> "$WORK/calls"

# libc picks each string function's implementation for the CPU it runs on (`__memcpy_avx512_unaligned_erms` here,
# `__memcpy_avx_unaligned_erms` on a host without AVX-512): the one traced is placed with its siblings, so the list
# holds the one another machine runs too.
write_order() { # functions, calls, output
  python3 - "$@" <<'PY'
import re, sys
functions, calls, output = sys.argv[1:]
names = {}
for line in open(functions):
    address, name = line.split()
    names.setdefault(int(address, 16), []).append(name)
variant = re.compile(r"_(?:sse2|ssse3|sse4_1|sse4_2|avx2|avx512[a-z]*|evex512|evex|avx)(?=_|$)")
def family(name):
    return variant.sub("_*", name, count=1) if name.startswith("__") and variant.search(name) else None
siblings = {}
for group in names.values():
    for name in group:
        if family(name):
            siblings.setdefault(family(name), []).append(name)
order, seen = [], set()
for line in open(calls):
    for name in names.get(int(line, 16), []):
        for placed in [name] + sorted(siblings.get(family(name), [])):
            if placed not in seen:
                seen.add(placed)
                order.append(placed)
open(output, "w").write("".join(name + "\n" for name in order))
print(f"{output}: {len(order)} functions", file=sys.stderr)
PY
}
write_order "$WORK/functions" "$WORK/calls" Sources/tokenbrokerd/start-up.order
write_order "$WORK/cli-functions" "$WORK/cli-calls" Sources/tokenbroker/fast-path.order
# SwiftPM does not know the links read these files: remove the binaries, so that the next build links them again.
rm -f "$BIN/tokenbrokerd" "$BIN/tokenbroker"
