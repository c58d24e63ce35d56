#!/usr/bin/python3
"""Direct Broker1 calls on a session bus, with dbus-python (Debian's python3-dbus), for the Broker1 test and bench.

    bus_client.py ADDRESS call METHOD CORRELATION_ID REQUEST_JSON     # prints the answer string (`-`: from stdin)
    bus_client.py ADDRESS signature                                   # getAccounts called with (i) instead of (sss)
    bus_client.py ADDRESS flood COUNT REQUEST_JSON                    # one client floods; a second is served meanwhile
    bus_client.py ADDRESS time COUNT REQUEST_JSON                     # COUNT sequential silent calls: p50/p99 in µs
"""

import json
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


def main() -> int:
    address, mode, *rest = sys.argv[1:]
    if mode == "call":
        method, correlation, request = rest
        if request == "-":
            request = sys.stdin.read()
        _, interface = broker(address)
        print(str(getattr(interface, method)("0.0", correlation, request, timeout=120)))
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
        count, request = int(rest[0]), rest[1]
        _, interface = broker(address)
        samples = []
        for index in range(count):
            started = time.perf_counter_ns()
            interface.acquireTokenSilently("0.0", "bench", request, timeout=30)
            samples.append((time.perf_counter_ns() - started) / 1000)
        samples.sort()
        print(json.dumps({"p50_us": round(samples[len(samples) // 2], 1),
                          "p99_us": round(samples[min(len(samples) - 1, len(samples) * 99 // 100)], 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
