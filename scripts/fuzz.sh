#!/usr/bin/env bash
# Fuzzes what a client's bytes reach first (the framer, the request decoder, the MSAL and ADAL cache import) with
# libFuzzer: builds Tests/Fuzz in the debug build's tree with TOKENBROKER_FUZZING=1, which compiles the modules under
# test with -sanitize=fuzzer,address and keeps the dependencies as `swift build` made them (Package.swift); seeds a
# corpus from the protocol's example transcripts and Tests/Fuzz/regressions, and runs for FUZZ_SECONDS (default 60).
# Prints libFuzzer's final statistics; a crash or a broken invariant exits non-zero and leaves the input in
# .build-fuzz/crash-* (add it to Tests/Fuzz/regressions with the fix). The next `swift build` compiles those modules
# again without the instrumentation (about a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}

export TOKENBROKER_FUZZING=1
swift build --product tokenbroker-fuzz
binary=$(swift build --product tokenbroker-fuzz --show-bin-path)/tokenbroker-fuzz
unset TOKENBROKER_FUZZING

seeds=.build-fuzz/seeds
corpus=.build-fuzz/corpus
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus"
# One seed per client message (selector 1: the request decoder), one per transcript's client bytes (selector 0:
# the framer), one per imported document (selector 2: MSAL, 3: ADAL). The first byte picks the target.
python3 - "$seeds" <<'PYTHON'
import hashlib, json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def seed(selector: int, data: bytes) -> None:
    payload = bytes([selector]) + data
    (out / hashlib.sha1(payload).hexdigest()).write_bytes(payload)
for path in sorted(pathlib.Path("Protocol/examples").glob("*.json")):
    lines = []
    for entry in json.loads(path.read_text())["messages"]:
        if entry.get("direction") != "client" or "message" not in entry:
            continue
        line = json.dumps(entry["message"]).encode()
        lines.append(line)
        seed(1, line)
        params = entry["message"].get("params") or {}
        if entry["message"].get("method") == "importCache" and isinstance(params.get("data"), str):
            seed(3 if params.get("format") == "adal" else 2, params["data"].encode())
    seed(0, b"\n".join(lines) + b"\n")
PYTHON
# Inputs that once broke an invariant (each named for what it broke), run first like every seed.
cp Tests/Fuzz/regressions/* "$seeds"/

# No Swift backtracer: a crash is libFuzzer's to report (and the backtracer trips over AddressSanitizer).
# The fuzzer's own status decides (a pipeline's, after `|| true`, would always be 0).
status=0
SWIFT_BACKTRACE=enable=no "$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
  -artifact_prefix=.build-fuzz/ "$corpus" "$seeds" > .build-fuzz/last-run.log 2>&1 || status=$?
grep -E "^(stat::|==|SUMMARY|INFO: seed|Done|#[0-9]+ *DONE)" .build-fuzz/last-run.log || true
if [ "$status" != 0 ]; then
  echo "the fuzzer stopped with status $status; see .build-fuzz/last-run.log and .build-fuzz/crash-*" >&2
  tail -n 40 .build-fuzz/last-run.log >&2
  exit 1
fi
