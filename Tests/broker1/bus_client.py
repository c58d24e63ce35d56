#!/usr/bin/python3
"""Direct Broker1 calls on a session bus, with dbus-python (Debian's python3-dbus), for the Broker1 test and bench.

    bus_client.py ADDRESS call METHOD CORRELATION_ID REQUEST_JSON     # the answer (`-`: the request from stdin)
    bus_client.py ADDRESS signature                                   # getAccounts called with (i) instead of (sss)
    bus_client.py ADDRESS flood COUNT REQUEST_JSON                    # one client floods; a second is served meanwhile
    bus_client.py ADDRESS time COUNT REQUEST_FILE [SOCKET SOCKET_REQUEST_FILE]

`call` prints one JSON object: the answer string as `answer`, and this process's `pid` and `exe` (what the broker's
audit line names as the caller). `time` makes COUNT sequential acquireTokenSilently calls over the bus with the
Broker1 request in REQUEST_FILE, and, given a broker socket and the same request as a socket request line, as many
over the socket from this same process, in alternating rounds (so that both see the same machine); it prints one
JSON line per door (`kind` "door_latency"): p50/p90/p99 in µs of the round trips, each call checked to answer a
token.
"""

import json
import os
import socket
import sys
import time

import dbus
import dbus.mainloop.glib
from gi.repository import GLib  # noqa: F401 - dbus-python's main loop needs it for the flood

NAME = "com.microsoft.identity.broker1"
PATH = "/com/microsoft/identity/broker1"
INTERFACE = "com.microsoft.identity.Broker1"


def broker(address: str):
    connection = dbus.bus.BusConnection(address)
    return connection, dbus.Interface(connection.get_object(NAME, PATH, introspect=False), INTERFACE)


def percentiles(label: str, samples: list, answer_bytes: int) -> dict:
    samples = sorted(samples)

    def at(fraction: float) -> float:
        return round(samples[min(len(samples) - 1, int(len(samples) * fraction))], 1)

    return {"kind": "door_latency", "label": label, "count": len(samples), "p50_us": at(0.50), "p90_us": at(0.90),
            "p99_us": at(0.99), "response_bytes": answer_bytes}


def time_doors(address: str, count: int, request_file: str, socket_path: str | None, socket_request_file: str | None):
    request = open(request_file).read()
    _, interface = broker(address)
    line = None
    connection = None
    if socket_path:
        line = open(socket_request_file, "rb").read().rstrip(b"\n") + b"\n"
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(socket_path)
    reader = connection.makefile("rb") if connection else None

    def over_bus() -> int:
        answer = str(interface.acquireTokenSilently("0.0", "bench", request, timeout=30))
        if '"accessToken"' not in answer:
            raise SystemExit(f"the bus answered no token: {answer[:200]}")
        return len(answer)

    def over_socket() -> int:
        connection.sendall(line)
        answer = reader.readline()
        if b'"accessToken"' not in answer:
            raise SystemExit(f"the socket answered no token: {answer[:200]!r}")
        return len(answer)

    doors = [("bus", over_bus)] + ([("socket", over_socket)] if connection else [])
    samples = {name: [] for name, _ in doors}
    sizes = {}
    for _, call in doors:  # warm-up: connections, caches, the broker's remembered answer
        for _ in range(min(1000, count)):
            call()
    rounds = 10
    for round_index in range(rounds):
        for name, call in doors if round_index % 2 == 0 else reversed(doors):
            for _ in range(count // rounds):
                started = time.perf_counter_ns()
                sizes[name] = call()
                samples[name].append((time.perf_counter_ns() - started) / 1000)
    for name, _ in doors:
        print(json.dumps(percentiles(name, samples[name], sizes[name])), flush=True)


def main() -> int:
    address, mode, *rest = sys.argv[1:]
    if mode == "call":
        method, correlation, request = rest
        if request == "-":
            request = sys.stdin.read()
        _, interface = broker(address)
        answer = str(getattr(interface, method)("0.0", correlation, request, timeout=120))
        print(json.dumps({"pid": os.getpid(), "exe": os.readlink("/proc/self/exe"), "answer": answer}))
    elif mode == "signature":
        connection, _ = broker(address)
        answer = connection.call_blocking(NAME, PATH, INTERFACE, "getAccounts", "i", (7,), timeout=30)
        print(str(answer))
    elif mode == "flood":
        count, request = int(rest[0]), rest[1]
        dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
        loop = GLib.MainLoop()
        flooder, interface = broker(address)
        answers = {"ok": 0, "busy": 0, "other": 0}
        pending = [count]

        def done(answer):
            body = json.loads(str(answer))
            status = body.get("error", {}).get("status")
            answers["ok" if status is None else "busy" if status == 15 else "other"] += 1
            pending[0] -= 1
            if pending[0] == 0:
                loop.quit()

        def failed(error):
            answers["other"] += 1
            answers.setdefault("errors", []).append(str(error)[:200])
            pending[0] -= 1
            if pending[0] == 0:
                loop.quit()

        for index in range(count):
            interface.acquireTokenSilently("0.0", f"flood-{index}", request, reply_handler=done,
                                           error_handler=failed, timeout=120)
        # A second client, while the first one's calls are queued: answered at once.
        _, other = broker(address)
        started = time.monotonic()
        version = json.loads(str(other.getLinuxBrokerVersion("0.0", "other", "{}", timeout=30)))
        answers["other_client_ms"] = round((time.monotonic() - started) * 1000, 1)
        answers["other_client_answered"] = "linuxBrokerVersion" in version
        loop.run()
        print(json.dumps(answers))
    elif mode == "time":
        count, request_file = int(rest[0]), rest[1]
        socket_path, socket_request_file = (rest[2], rest[3]) if len(rest) >= 4 else (None, None)
        time_doors(address, count, request_file, socket_path, socket_request_file)
    else:
        raise SystemExit(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
