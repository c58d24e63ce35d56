#!/usr/bin/env bash
# Writes Sources/tokenbrokerd/start-up.order: the release daemon's functions in the order they first run through
# start-up, an import, cached answers, a status and a restart on the cache stored, which the release link places
# together (Package.swift, daemonReleaseLinkFlags). Run it again when `scripts/bench.sh` shows the idle RSS climbing after code changes:
# functions added since are missing from the list and land wherever the linker puts them (a stale list costs pages,
# never correctness).
#
#   scripts/order-file.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh

need_packages gcc binutils >&2
for product in tokenbrokerd tokenbroker tokenbroker-bench; do
  swift build "${RELEASE_BUILD[@]}" --product "$product" >&2
done
BIN=$(swift build "${RELEASE_BUILD[@]}" --show-bin-path)
WORK=$(mktemp -d); chmod 700 "$WORK"; TRACER=""
# The daemon is the tracer's child (a background job's SIGINT is ignored, so it gets SIGTERM).
stop_daemon() { pkill -TERM -P "$TRACER" 2>/dev/null || true; }
cleanup() { [ -n "$TRACER" ] && stop_daemon; rm -rf "$WORK"; }
trap cleanup EXIT
cc -O2 -o "$WORK/first_calls" Benchmarks/order/first_calls.c

# Every function of the executable (local ones too), by address.
nm --defined-only "$BIN/tokenbrokerd" | awk '$2 ~ /^[tTwW]$/ {print $1, $3}' > "$WORK/functions"
cut -d' ' -f1 "$WORK/functions" > "$WORK/entries"

# Two daemons on one state directory: the first starts empty and takes an import, the second starts on what the
# first stored (as after a reboot), so the code that loads a cache is placed beside the rest of start-up.
trace_daemon() { # calls-file, then what to run against it
  local calls=$1; shift
  "$WORK/first_calls" "$WORK/entries" "$calls" -- "$BIN/tokenbrokerd" --no-bus \
    --socket "$WORK/broker.sock" --state-directory "$WORK/state" 2>>"$WORK/daemon.log" &
  TRACER=$!
  for _ in $(seq 600); do listening "$WORK/broker.sock" && break; sleep 0.05; done
  listening "$WORK/broker.sock" || { cat "$WORK/daemon.log" >&2; exit 1; }
  "$@"
  "$BIN/tokenbroker-bench" latency --socket "$WORK/broker.sock" --request "$WORK/request.json" --count 200 \
    --warmup 0 >/dev/null
  TOKENBROKER_SOCKET="$WORK/broker.sock" "$BIN/tokenbroker" status >/dev/null
  stop_daemon; wait "$TRACER" || true; TRACER=""
}
trace_daemon "$WORK/calls" \
  "$BIN/tokenbroker-bench" seed --socket "$WORK/broker.sock" --tokens 10 --request-file "$WORK/request.json"
trace_daemon "$WORK/calls-restarted" true
cat "$WORK/calls-restarted" >> "$WORK/calls"

python3 - "$WORK/functions" "$WORK/calls" Sources/tokenbrokerd/start-up.order <<'PY'
import sys
functions, calls, output = sys.argv[1:]
names = {}
for line in open(functions):
    address, name = line.split()
    names.setdefault(int(address, 16), []).append(name)
order, seen = [], set()
for line in open(calls):
    for name in names.get(int(line, 16), []):
        if name not in seen:
            seen.add(name)
            order.append(name)
open(output, "w").write("".join(name + "\n" for name in order))
print(f"{output}: {len(order)} functions", file=sys.stderr)
PY
