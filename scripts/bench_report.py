#!/usr/bin/env python3
"""Turns the benchmark's results.jsonl into the markdown tables of BENCHMARKS.md."""
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
by = lambda kind, **match: [r for r in rows if r["kind"] == kind and all(r.get(k) == v for k, v in match.items())]

for m in by("machine"):
    print(f"Machine: {m['cpu']} (family {m['family']}, model {m['model']}), {m['cpus']} CPUs, "
          f"AVX-512 {'yes' if m['avx512'] else 'no'}, L2 {m['l2_kb']} KiB, L3 {m['l3_kb']} KiB; a dependent load over "
          f"4 MiB {m['load_4mib_ns']:.0f} ns, over 64 MiB {m['load_64mib_ns']:.0f} ns; "
          f"`python3 -S -c pass` {m['python_start_ms']:.1f} ms.\n")

print("### Latency, one client (µs)\n")
print("| server | p50 | p90 | p99 | p99.9 | response bytes |")
print("|---|---|---|---|---|---|")
for r in by("latency", connection_each=False) + by("latency", connection_each=None):
    print(f"| {r['label']} | {r['p50_us']:.1f} | {r['p90_us']:.1f} | {r['p99_us']:.1f} | {r['p999_us']:.1f} | {r['response_bytes']} |")

each = {r["label"]: r for r in by("latency", connection_each=True)}
if each:
    print("\n### A connection for each request (as a process per token makes one), one client\n")
    print("From `connect` to the answer; the server's CPU for each connection, from its `/proc/<pid>/stat`.\n")
    print("| server | p50 µs | p90 µs | p99 µs | server CPU µs a connection | connections |")
    print("|---|---|---|---|---|---|")
    for label in ("floor", "broker"):
        if label in each:
            r = each[label]
            print(f"| {label} | {r['p50_us']:.1f} | {r['p90_us']:.1f} | {r['p99_us']:.1f} | "
                  f"{r.get('server_cpu_us_per_request', 0):.1f} | {r['count']:,} |")

doors = {r["label"]: r for r in by("door_latency")}
if doors:
    print("\n### Broker1 on the session bus beside the socket (cached acquireTokenSilently, one client, µs)\n")
    print("One daemon joined to a private dbus-daemon; one Python process sends the same request through each door in "
          "alternating rounds (dbus-python through the dbus-daemon; a plain Unix-socket client). `broker, bus on` "
          "above is that daemon's socket timed by the Swift client.\n")
    print("| door | p50 | p90 | p99 | answer bytes | calls |")
    print("|---|---|---|---|---|---|")
    for label in ("bus", "socket"):
        if label in doors:
            r = doors[label]
            print(f"| {label} | {r['p50_us']:.1f} | {r['p90_us']:.1f} | {r['p99_us']:.1f} | {r['response_bytes']} | "
                  f"{r['count']:,} |")
    if "bus" in doors and "socket" in doors:
        b, o = doors["bus"], doors["socket"]
        print(f"\n- the bus costs {b['p50_us'] - o['p50_us']:.0f} µs more than the socket at p50 "
              f"({b['p50_us'] / o['p50_us']:.1f}×) and {b['p99_us'] - o['p99_us']:.0f} µs more at p99")

print("\n### Throughput and server CPU per request\n")
rounds = len(by("throughput", label="broker", connections=1))
if rounds > 1:
    print(f"Each figure is the median of {rounds} rounds (floor and broker back to back in each), the rounds' range "
          "in brackets.\n")
print("| clients | floor req/s | broker req/s | broker / floor | floor CPU µs/req | broker CPU µs/req | CPU broker / floor | broker p50 / p99 µs |")
print("|---|---|---|---|---|---|---|---|")


def middle(values, digits, thousands=False):
    values = sorted(values)
    median = values[len(values) // 2] if len(values) % 2 else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
    shown = (lambda v: f"{v:,.0f}") if thousands else (lambda v: f"{v:.{digits}f}")
    return shown(median) + (f" [{shown(values[0])}–{shown(values[-1])}]" if len(values) > 1 else "")


for connections in (1, 8, 32, 64):
    floor = by("throughput", label="floor", connections=connections)
    broker = by("throughput", label="broker", connections=connections)
    if not floor or not broker:
        continue
    pairs = list(zip(floor, broker))
    print(f"| {connections} | {middle([f['rps'] for f, _ in pairs], 0, True)} | "
          f"{middle([b['rps'] for _, b in pairs], 0, True)} | {middle([b['rps'] / f['rps'] for f, b in pairs], 2)} | "
          f"{middle([f.get('server_cpu_us_per_request', 0) for f, _ in pairs], 1)} | "
          f"{middle([b.get('server_cpu_us_per_request', 0) for _, b in pairs], 1)} | "
          f"{middle([b.get('server_cpu_us_per_request', 0) / max(0.1, f.get('server_cpu_us_per_request', 0)) for f, b in pairs], 2)} | "
          f"{middle([b['p50_us'] for _, b in pairs], 0)} / {middle([b['p99_us'] for _, b in pairs], 0)} |")
for r in by("throughput", label="broker-10k"):
    print(f"| {r['connections']} (10,000 tokens) | | {r['rps']:,.0f} | | | {r.get('server_cpu_us_per_request', 0):.1f} | | {r['p50_us']:.0f} / {r['p99_us']:.0f} |")

print("\n### Memory and lookup cost\n")
for r in by("rss"):
    print(f"- daemon RSS idle: {r['idle_kb'] / 1024:.1f} MiB; with 10,000 cached tokens: {r['loaded_10k_kb'] / 1024:.1f} MiB"
          + (f" (anonymous: {r['idle_anon_kb'] / 1024:.1f} and {r['loaded_10k_anon_kb'] / 1024:.1f} MiB; the rest are pages"
             " of the executable and libraries)" if "idle_anon_kb" in r else ""))
    if "restarted_10k_kb" in r:
        print(f"- a new daemon opening those 10,000 tokens (as after a reboot): {r['restarted_10k_kb'] / 1024:.1f} MiB"
              f" (anonymous: {r['restarted_10k_anon_kb'] / 1024:.1f} MiB)")
for r in by("lookup"):
    print(f"- cache lookup (TokenBroker.cachedToken, in process) with {r['tokens']:,} tokens: {r['us_per_lookup']:.2f} µs")

print("\n### The managed-identity endpoint (cached token, one TCP connection per request)\n")
for r in by("endpoint"):
    print(f"- {r['connections']} client(s): {r['rps']:,.0f} req/s, p50 {r['p50_us']:.0f} µs, p99 {r['p99_us']:.0f} µs, "
          f"server CPU {r.get('server_cpu_us_per_request', 0):.1f} µs per request, {r['failures']} failures")

print("\n### Whole process\n")
for r in by("process"):
    print(f"- `{r['label']}`: median {r['median_ms']:.2f} ms, mean {r['mean_ms']:.2f} ms, max {r['max_ms']:.2f} ms")
token, peer = by("process", label="tokenbroker token"), by("process", label="oidc-token")
for r in by("process_floor"):
    line = f"- the process floor (`{r['label']}`, a static C client asking the same daemon): median {r['median_ms']:.2f} ms"
    if token:
        line += f"; `tokenbroker token` {token[0]['median_ms'] / r['median_ms']:.2f}× it"
    print(line)
for r in by("process_counts"):
    print(f"- `{r['label']}` (perf stat): {r['task_clock_ms']:.2f} ms of CPU and {r['page_faults']:.0f} page faults a run")
if token:
    target = "target `tokenbroker token` ≤ 1.5 ms median and within 1.5× oidc-token"
    t = token[0]["median_ms"]
    if peer:
        o = peer[0]["median_ms"]
        ratio = t / o
        misses = [m for m, bad in ((f"median {t:.2f} ms > 1.5 ms", t > 1.5), (f"ratio {ratio:.2f} > 1.5", ratio > 1.5)) if bad]
        print(f"- `tokenbroker token` beside `oidc-token` (oidc-agent answering from its cache, same hyperfine -N harness): "
              f"median {t:.2f} ms vs {o:.2f} ms, ratio {ratio:.2f}; {target}: "
              f"{'met' if not misses else 'NOT met (' + ', '.join(misses) + ')'}")
    else:
        print(f"- {target}: not judged, `oidc-token` was not measured (scripts/bench-oidc-token.sh failed or is missing)")

print("\n### Refresh path and single flight (local Entra-shaped test provider)\n")
def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def spread(values, form="{:.0f}"):
    """The median of the rounds, with their range when there are several."""
    text = form.format(median(values))
    return text if len(values) < 2 else f"{text} [{form.format(min(values))}–{form.format(max(values))}]"


trips = by("refresh", label="refresh")
if trips:
    measured = (f"{len(trips)} rounds of {trips[0]['count']} requests, the median of the rounds [their range]"
                if len(trips) > 1 else f"{trips[0]['count']} requests")
    print(f"- silent request that refreshes (one client, {measured}): "
          f"p50 {spread([r['p50_us'] / 1000 for r in trips], '{:.2f}')} ms, "
          f"p90 {spread([r['p90_us'] / 1000 for r in trips], '{:.2f}')} ms, "
          f"p99 {spread([r['p99_us'] / 1000 for r in trips], '{:.2f}')} ms")
shares = by("refresh_share", label="refresh")
floors = {r.get("round"): r for r in by("refresh_share", label="refresh-floor")}
if shares:
    share = median([r["broker_p50_us"] for r in shares])
    print(f"- of that, the provider's answer at its server's edge: {spread([r['provider_us'] for r in shares])} µs per "
          f"answer ({sum(r['calls'] for r in shares)} calls); the broker's share (p50 less the provider): "
          f"{spread([r['broker_p50_us'] for r in shares])} µs, p90 {spread([r['broker_p90_us'] for r in shares])} µs, "
          f"mean {spread([r['broker_mean_us'] for r in shares])} µs; target ≤ 300 µs: {'met' if share <= 300 else 'NOT met'}")
    if "server_busiest_thread_us" in shares[0]:
        floor_cpu = (f"; the floor's {spread([r['server_busiest_thread_us'] for r in floors.values()])} µs"
                     if floors else "")
        print(f"- the broker's CPU a refresh (`/proc/<pid>/task/*/schedstat`): its busiest thread, the event loop, "
              f"{spread([r['server_busiest_thread_us'] for r in shares])} µs; all its threads "
              f"{spread([r['server_threads_us'] for r in shares])} µs{floor_cpu}")
    print(f"- as measured before the seventh pass (less only the endpoint's working time, "
          f"{spread([r['provider_endpoint_us'] for r in shares])} µs, so that the provider's HTTP server counted as the "
          f"broker's): {spread([r['broker_with_provider_http_p50_us'] for r in shares])} µs")
if floors:
    floor_rounds = list(floors.values())
    ratios = [r["broker_mean_us"] / max(1, floors[r.get("round")]["broker_mean_us"]) for r in shares
              if r.get("round") in floors]
    ratio = f"; the broker's mean share is {spread(ratios, '{:.1f}')}× the floor's, round by round" if ratios else ""
    print(f"- the floor of that share (a C server making the same grant over one kept-alive connection, no checks, no "
          f"cache, no disk; same provider; in rounds alternating with the broker's): mean "
          f"{spread([r['broker_mean_us'] for r in floor_rounds])} µs "
          f"(p50 {spread([r['broker_p50_us'] for r in floor_rounds])}, "
          f"p90 {spread([r['broker_p90_us'] for r in floor_rounds])} µs), against a provider answer of "
          f"{spread([r['provider_us'] for r in floor_rounds])} µs{ratio}")
for r in by("single_flight"):
    print(f"- {r['callers']} simultaneous callers needing one refresh, all answered in: p50 {r['p50_us'] / 1000:.2f} ms, "
          f"p90 {r['p90_us'] / 1000:.2f} ms, worst {r['p99_us'] / 1000:.2f} ms ({r['rounds']} rounds)")
for r in by("single_flight_calls"):
    print(f"- token-endpoint calls for those {r['rounds']} rounds of {r['callers']} callers: {r['token_calls']} "
          f"({r['token_calls'] / r['rounds']:.2f} per round)")

counted = {r["path"]: r for r in by("instructions")}
if counted:
    print("\n### Instructions per answer (callgrind; the machine's speed does not move them)\n")
    for path, what in (("cached", "cached `acquireTokenSilently`"), ("refresh", "silent request that refreshes")):
        if path in counted:
            r = counted[path]
            print(f"- {what}: {r['event_loop_per_request'] / 1000:,.1f} k on the event loop, "
                  f"{r['daemon_per_request'] / 1000:,.1f} k in all the daemon's threads ({r['requests']:,} requests)")

# Issue 15's targets, judged against this run alone: where a target has a floor, the ratio to the floor measured in
# the same run decides (the machine's speed moves both alike; see BENCHMARKS.md, sixteenth pass).
verdicts = []


def judge(target, result, met):
    verdicts.append((target, result, "met" if met else "NOT met"))


loaded = {c: list(zip(by("throughput", label="floor", connections=c), by("throughput", label="broker", connections=c)))
          for c in (8, 32, 64)}
loaded = {c: pairs for c, pairs in loaded.items() if pairs}
if loaded:
    cpu = {c: median([b.get("server_cpu_us_per_request", 0) / max(0.1, f.get("server_cpu_us_per_request", 0))
                      for f, b in pairs]) for c, pairs in loaded.items()}
    judge("server CPU per cached request ≤ 2× the floor's, 8–64 clients",
          ", ".join(f"{cpu[c]:.2f}× at {c}" for c in cpu), all(v <= 2 for v in cpu.values()))
    rps = {c: median([b["rps"] / f["rps"] for f, b in pairs]) for c, pairs in loaded.items()}
    absolute = {c: median([b["rps"] for _, b in pairs]) for c, pairs in loaded.items()}
    judge("throughput ≥ 0.6× the floor's, 8–64 clients (the issue's 80,000 req/s, as a ratio)",
          ", ".join(f"{rps[c]:.2f}× ({absolute[c]:,.0f} req/s) at {c}" for c in rps), all(v >= 0.6 for v in rps.values()))
latency = {r["label"]: r for r in by("latency", connection_each=False) + by("latency", connection_each=None)}
if "floor" in latency and "broker" in latency:
    f, b = latency["floor"], latency["broker"]
    judge("one client: p50 ≤ 1.3× the floor's, p99 ≤ 2×",
          f"p50 {b['p50_us'] / f['p50_us']:.2f}×, p99 {b['p99_us'] / f['p99_us']:.2f}×",
          b["p50_us"] <= 1.3 * f["p50_us"] and b["p99_us"] <= 2 * f["p99_us"])
if token and peer:
    t, o = token[0]["median_ms"], peer[0]["median_ms"]
    judge("`tokenbroker token` ≤ 1.5 ms median, and ≤ 1.5× `oidc-token`", f"{t:.2f} ms, {t / o:.2f}×",
          t <= 1.5 and t / o <= 1.5)
for r in by("rss"):
    idle, full = r["idle_kb"] / 1024, r["loaded_10k_kb"] / 1024
    judge("daemon RSS ≤ 20 MiB idle, ≤ 40 MiB with 10,000 tokens", f"{idle:.1f} and {full:.1f} MiB",
          idle <= 20 and full <= 40)
lookups = {r["tokens"]: r["us_per_lookup"] for r in by("lookup")}
if 10 in lookups and 10000 in lookups:
    judge("lookup cost flat (10,000 tokens within 1.5× of 10)", f"{lookups[10000] / lookups[10]:.2f}×",
          lookups[10000] <= 1.5 * lookups[10])
if shares:
    share = median([r["broker_p50_us"] for r in shares])
    floor_note = f"; {spread(ratios, '{:.1f}')}× its floor's mean" if floors and ratios else ""
    if "refresh" in counted:
        floor_note += f"; {counted['refresh']['event_loop_per_request'] / 1000:,.0f} k instructions on the event loop"
    if "server_busiest_thread_us" in shares[0]:
        floor_note += f", {median([r['server_busiest_thread_us'] for r in shares]):.0f} µs of its CPU"
    judge("the broker's share of a silent request that refreshes ≤ 300 µs", f"{share:.0f} µs{floor_note}", share <= 300)
if verdicts:
    print("\n### Against issue 15's targets, in this run\n")
    print("| target | this run | |")
    print("|---|---|---|")
    for target, result, verdict in verdicts:
        print(f"| {target} | {result} | {verdict} |")
