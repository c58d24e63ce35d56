#!/usr/bin/env python3
"""The attacks of the 0.3.0 security audit (issue 10), each performed against the built daemon, with the daemon
serving other clients throughout.

Usage: python3 Tests/security/attacks.py --daemon /path/to/tokenbrokerd [--idp /path/to/tokenbroker-test-idp] [--keep]

Reuses the wire battery's daemon, provider and client (Tests/wire). The attacks that come from another local user
run as uid 65534 through `setpriv`, so they need root (scripts/test.sh runs as root in CI); without it they are
skipped, and say so. Prints "ok - ...", "FAIL - ..." or "skip - ..." per attack, measurements as "# ..." lines,
and "N passed, M failed[, K skipped]"; exits 0 only when nothing failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "wire"))
sys.dont_write_bytecode = True

import wire_battery as wb  # noqa: E402
from tokenbroker_client import BrokerClient  # noqa: E402
from wire_battery import Context, Skip, expect  # noqa: E402

OTHER_UID = 65534
RSS_GROWTH_BOUND = 64 << 20  # what a client that never reads may cost the daemon, at most (the audit saw 18.5 GB)
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable


def rss(pid: int) -> int:
    """The process's resident memory, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def descriptor_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def answers_quickly(ctx: Context, timeout: float = 15.0) -> float:
    """A fresh connection's getStatus answered: the seconds it took (the daemon is serving).

    The bound is for a daemon that stopped serving, not a measurement: the time is printed, and a busy machine
    must not fail the check."""
    started = time.monotonic()
    with BrokerClient(str(ctx.socket), connect_timeout=timeout) as client:
        client.call("getStatus", timeout=timeout)
    return time.monotonic() - started


def need_other_uid() -> None:
    if os.getuid() != 0:
        raise Skip("not running as root: cannot act as another uid")
    if shutil.which("setpriv") is None:
        raise Skip("setpriv is not installed")



# ---------------------------------------------------------------------------------------------------------------
# 1. A client that does not read; long correlation ids kept in the status
# ---------------------------------------------------------------------------------------------------------------

def attack_unread_answers(ctx: Context) -> None:
    """Pipelines getStatus without ever reading the answers (the audit's client took the daemon from 54 MB to
    18.5 GB): the daemon stops reading, closes the connection, stays under a memory bound, and answers others."""
    pid = ctx.daemon.process.pid
    base = peak = rss(pid)
    line = b'{"jsonrpc":"2.0","id":1,"method":"getStatus"}\n' * 1024
    attacker = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    attacker.connect(str(ctx.socket))
    attacker.settimeout(0.5)
    sent, stalls, probes, closed = 0, 0, [], False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            sent += attacker.send(line)
        except socket.timeout:
            stalls += 1  # the daemon stopped reading: the answers wait for a reader that never comes
            probes.append(answers_quickly(ctx))
        except (BrokenPipeError, ConnectionResetError):
            closed = True
            break
        peak = max(peak, rss(pid))
    attacker.close()
    print(f"  # sent {sent >> 10} KiB of requests, never read; the daemon stopped reading {stalls} times; RSS "
          f"{base >> 20} MiB -> peak {peak >> 20} MiB; other clients answered in at most "
          f"{max(probes, default=0) * 1000:.0f} ms", flush=True)
    expect(stalls > 0, "the daemon never stopped reading from a client that does not read")
    expect(closed, "the daemon never closed the connection of a client that does not read")
    expect(peak - base < RSS_GROWTH_BOUND, f"RSS grew by {(peak - base) >> 20} MiB")
    answers_quickly(ctx)


def attack_long_correlation_ids(ctx: Context) -> None:
    """20 errors with 1 MB correlation ids (the audit made every getStatus 20 MB with 4.6 KB of requests): the ids
    are refused, and the status stays small."""
    long_id = "x" * (1000 * 1000)
    with BrokerClient(str(ctx.socket)) as client:
        for _ in range(20):
            try:
                client.call("getAccounts", {"correlationId": long_id}, timeout=10)
            except wb.BrokerError as error:
                expect(error.error_code == "invalid_params", f"{error.error_code} for a 1 MB correlationId")
            else:
                wb.fail("a 1 MB correlationId was accepted")
        status = client.call("getStatus", timeout=10)
    size = len(json.dumps(status))
    print(f"  # getStatus after 20 errors with 1 MB ids: {size} bytes, {len(status['recentErrors'])} recent errors",
          flush=True)
    expect(size < 64 * 1024, f"getStatus is {size} bytes")


# ---------------------------------------------------------------------------------------------------------------
# 2. A megabyte of escaped keys
# ---------------------------------------------------------------------------------------------------------------

def escaped_keys_line(count: int, prefix: str = "") -> bytes:
    """A request whose params hold `count` distinct keys, each written with escapes (the slow path the audit hit)."""
    keys = ",".join(f'"\\u0061{prefix}{index}":0' for index in range(count))
    return ('{"jsonrpc":"2.0","id":"keys","method":"getStatus","params":{' + keys + "}}\n").encode()


def duplicate_key_line(size: int = (1 << 20) - 64) -> bytes:
    """A request of nearly `size` bytes: objects of 3,500 distinct escaped keys each, under the caps of keys per object
    and values per document, where the last key of the last object repeats its first, written without escapes (the
    check that must find it compares the keys' bytes once unescaped)."""
    pad = "p" * 24
    objects, length, index = [], 80, 0
    while True:
        keys = [f'"\\u0061{pad}{index}k{key}":0' for key in range(3500)]
        candidate = f'"o{index}":{{{",".join(keys)}}}'
        if length + len(candidate) + 64 > size:
            break
        objects.append(candidate)
        length += len(candidate) + 1
        index += 1
    last = objects[-1]
    first_key = last[last.index("{") + 1:last.index(":0")]
    objects[-1] = last[:-1] + "," + first_key.replace("\\u0061", "a") + ":1}"
    return ('{"jsonrpc":"2.0","id":"keys","method":"getStatus","params":{' + ",".join(objects) + "}}\n").encode()


def objects_of_escaped_keys_line(size: int = (1 << 20) - 64) -> bytes:
    """A request of about `size` bytes whose params hold objects of 4,000 escaped keys each (under the cap of keys per
    object, over the whole frame)."""
    objects, length, index = [], 80, 0
    while length < size - 100_000:
        keys = ",".join(f'"\\u0062{index}k{key}":0' for key in range(4000))
        objects.append(f'"o{index}":{{{keys}}}')
        length += len(objects[-1]) + 1
        index += 1
    return ('{"jsonrpc":"2.0","id":"keys","method":"getStatus","params":{' + ",".join(objects) + "}}\n").encode()


def attack_escaped_keys(ctx: Context) -> None:
    """Lines of up to 1 MiB full of escaped keys, three clients at once (16,000 keys took 60 s, and two 256 KB lines
    kept other clients waiting two minutes): each is answered in milliseconds, others are served meanwhile."""
    lines = [escaped_keys_line(4096), escaped_keys_line(70000)[: (1 << 20) - 64]]  # the keys cap; a full frame
    lines[1] = lines[1][: lines[1].rindex(b",")] + b"}}\n"
    lines.append(objects_of_escaped_keys_line())
    lines.append(duplicate_key_line())
    timings: list[float] = []
    outcomes: dict[int, list[str]] = {index: [] for index in range(len(lines))}

    def send(index: int) -> None:
        line = lines[index]
        for _ in range(3):  # a connection each time: an envelope error closes it
            with BrokerClient(str(ctx.socket)) as client:
                started = time.monotonic()
                client.send_raw(line)
                answer = client.wait_message(lambda m: "result" in m or "error" in m, 20)
                timings.append(time.monotonic() - started)
                outcomes[index].append(str(answer.get("error", {}).get("data", {}).get("errorCode", "result")))

    threads = [threading.Thread(target=send, args=(index,)) for index in range(len(lines))]
    for thread in threads:
        thread.start()
    probes = []
    while any(thread.is_alive() for thread in threads):
        probes.append(answers_quickly(ctx))
        time.sleep(0.05)  # leave the senders the CPU: the probes only show that others are still served
    for thread in threads:
        thread.join()
    print(f"  # lines of escaped keys ({', '.join(f'{len(line) >> 10} KiB' for line in lines)}), 3 each, at once: "
          f"answered in "
          f"{', '.join(f'{t * 1000:.0f}' for t in timings)} ms; others answered in at most "
          f"{max(probes, default=0) * 1000:.0f} ms meanwhile", flush=True)
    expect(len(timings) == 3 * len(lines) and all(t < 10 for t in timings), f"answers took {timings} s")
    # at the cap of keys per object the request is served; past it, or past the values per document, refused
    expect(outcomes[0] == ["result"] * 3, f"answers to the line at the cap: {outcomes[0]}")
    for index in (1, 2):
        expect(len(outcomes[index]) == 3 and set(outcomes[index]) <= {"invalid_request", "parse_error"},
               f"answers to line {index}: {outcomes[index]}")
    # the repeated key at the end of a megabyte is found (as a parse error), the same key written two ways
    expect(outcomes[3] == ["parse_error"] * 3, f"answers to the line with a repeated key: {outcomes[3]}")


# ---------------------------------------------------------------------------------------------------------------
# 3. The sign-in: argv, another user at the loopback listener, a flood
# ---------------------------------------------------------------------------------------------------------------

# Runs as uid 65534: what another local user can do with what it reads in /proc. argv: the start page, the redirect
# URI, the real state (as if it had learnt it); with an empty redirect URI it only fetches the start page. Prints
# what it found as one JSON line once its flood holds its connections, then waits for a line on stdin before
# closing them.
ATTACKER = r'''
import json, socket, sys, urllib.error, urllib.parse, urllib.request
start, redirect, state = sys.argv[1:4]
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def status(url):
    try:
        with opener.open(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except Exception as error:
        return type(error).__name__
found = {"uid": __import__("os").getuid(), "startPage": status(start)}
if not redirect:  # only the start page, before the user's browser takes it
    print(json.dumps(found), flush=True)
    sys.exit()
found["redirectWithOwnCode"] = status(redirect + "?" + urllib.parse.urlencode({"code": "attacker-code",
                                                                           "state": state}))
port = urllib.parse.urlsplit(redirect).port
held, answered403, other = [], 0, 0
for _ in range(400):
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    held.append(connection)
for connection in held:
    connection.settimeout(3)
    try:
        reply = connection.recv(64)
    except OSError:
        continue
    if reply.startswith(b"HTTP/1.1 403"):
        answered403 += 1
    elif reply:
        other += 1
found["flood"] = {"connections": len(held), "answered403": answered403, "other": other}
print(json.dumps(found), flush=True)
sys.stdin.readline()
'''

# The browser of the attack sign-in (a browser profile, so it runs as the user, a child of the daemon). It takes the
# start page it is given, lets the attacker try it first, follows it itself, scans every process's argv for the
# authorization request's secrets, lets the attacker bring its own code and flood the listener while it checks that
# the broker's socket answers, then signs in and lands on the listener. Writes what it saw to @RECORD@.
BROWSER = r'''#!@PYTHON@
import json, os, socket, subprocess, sys, time, urllib.error, urllib.parse, urllib.request
record = {}
start = sys.argv[-1]
class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None
def status(url, data=None, follow=True):
    handlers = [urllib.request.ProxyHandler({})] + ([] if follow else [NoRedirect()])
    try:
        with urllib.request.build_opener(*handlers).open(urllib.request.Request(url, data=data), timeout=20) as r:
            return r.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Location", "")
    except Exception as error:
        return type(error).__name__, ""
attacker = None
try:
    if @ATTACK@:
        # the attacker reads the start page from this process's argv, and gets there first
        attacker = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", @SYSTEM_PYTHON@,
                                     "-c", @ATTACKER@, start, "", ""], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True)
        attacker.stdin.close()
        record["attackerFirst"] = json.loads(attacker.stdout.read() or "{}").get("startPage")
        attacker.wait()
    code, authorize = status(start, follow=False)
    record["startPage"] = code
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(authorize).query))
    secrets = {name: query[name] for name in ("state", "nonce", "code_challenge", "login_hint") if query.get(name)}
    record["secrets"] = sorted(secrets)
    leaks = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace")
        except OSError:
            continue
        leaks += [f"{name} in argv of pid {pid}" for name, value in secrets.items() if value in argv]
    record["argvLeaks"] = leaks
    record["startPageAgain"] = status(start, follow=False)[0]
    if @ATTACK@:
        attacker = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", @SYSTEM_PYTHON@,
                                     "-c", @ATTACKER@, start, query["redirect_uri"], query["state"]],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        record["attacker"] = json.loads(attacker.stdout.readline() or "{}")
        # the flood holds its connections: the broker's socket answers, the daemon's descriptors stay bounded
        pid = int(open(@DAEMON_PID@).read())
        record["daemonDescriptors"] = len(os.listdir(f"/proc/{pid}/fd"))
        started = time.monotonic()
        client = socket.socket(socket.AF_UNIX)
        client.settimeout(10)
        client.connect(@SOCKET@)
        client.sendall(b'{"jsonrpc":"2.0","id":1,"method":"getStatus"}\n')
        record["socketAnswered"] = b'"result"' in client.recv(1 << 16)
        record["socketMilliseconds"] = round((time.monotonic() - started) * 1000)
        client.close()
    record["signIn"] = status(authorize, urllib.parse.urlencode({"username": @USERNAME@}).encode())[0]
finally:
    if attacker is not None and attacker.poll() is None:
        attacker.stdin.write("done\n")
        attacker.stdin.close()
        attacker.wait()
    with open(@RECORD@ + ".part", "w") as out:
        json.dump(record, out)
    os.rename(@RECORD@ + ".part", @RECORD@)
'''


def attack_browser(ctx: Context, name: str, username: str, attack: bool) -> tuple[Path, Path]:
    directory = wb.browser_dir(ctx)
    script, record = directory / f"{name}.py", directory / f"{name}.json"
    pid_file = directory / "daemon.pid"
    pid_file.write_text(str(ctx.daemon.process.pid))
    values = {"@PYTHON@": SYSTEM_PYTHON, "@SYSTEM_PYTHON@": repr(SYSTEM_PYTHON), "@ATTACKER@": repr(ATTACKER),
              "@ATTACK@": repr(attack), "@USERNAME@": repr(username), "@RECORD@": repr(str(record)),
              "@DAEMON_PID@": repr(str(pid_file)), "@SOCKET@": repr(str(ctx.socket))}
    text = BROWSER
    for key, value in values.items():
        text = text.replace(key, value)
    script.write_text(text)
    script.chmod(0o755)
    return script, record


def sign_in(ctx: Context, name: str, username: str, attack: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    script, record_path = attack_browser(ctx, name, username, attack)
    ctx.daemon.configure(profiles={name: [str(script)]})
    auth = wb.flow_auth(loginHint=username)
    with ctx.client() as client:
        pending, correlation = wb.start_flow(client, auth, webview_type="customBrowser", browser_profile=name,
                                             timeout_seconds=wb.FLOW_TIMEOUT)
        _, response = wb.flow_outcome(client, pending, correlation, wb.FLOW_TIMEOUT + 15)
    record = json.loads(wb.wait_file(record_path, 10) or "{}")
    print(f"  # the browser saw: {json.dumps(record)}", flush=True)
    return record, response


def attack_argv(ctx: Context) -> None:
    """A sign-in with a login hint: none of state, nonce, code_challenge and login_hint is in any process's argv
    (the audit read them from the browser's command line); the start page serves once."""
    username = "argv.victim@contoso.example"
    record, response = sign_in(ctx, "argv", username, attack=False)
    expect("result" in response, f"the sign-in failed: {wb.shown(response)}")
    expect(record.get("startPage") == 302, f"the start page answered {record.get('startPage')}")
    expect(set(record.get("secrets", [])) == {"state", "nonce", "code_challenge", "login_hint"},
           f"the authorization request held {record.get('secrets')}")
    expect(record.get("argvLeaks") == [], f"leaks: {record.get('argvLeaks')}")
    expect(record.get("startPageAgain") == 404, f"the start page served twice ({record.get('startPageAgain')})")


def attack_other_user_at_the_listener(ctx: Context) -> None:
    """Another uid fetches the start page before the user's browser, brings a redirect with its own code and the
    real state, and floods the listener with 400 connections: 403, 403, every flood connection answered 403 or
    closed, the daemon's descriptors bounded, its socket answering, and the user signed in as themself (the audit's
    attacker got its token into the victim's app)."""
    need_other_uid()
    username = "listener.victim@contoso.example"
    before = wb.provider_grants()
    record, response = sign_in(ctx, "listener", username, attack=True)
    attacker = record.get("attacker", {})
    expect(record.get("attackerFirst") == 403, f"the other uid's start page fetch got {record.get('attackerFirst')}")
    expect(record.get("startPage") == 302, f"the user's start page fetch got {record.get('startPage')} after the "
                                           "other uid's")
    expect(attacker.get("uid") == OTHER_UID, f"the attacker ran as {attacker.get('uid')}")
    expect(attacker.get("redirectWithOwnCode") == 403, f"the other uid's redirect got "
                                                       f"{attacker.get('redirectWithOwnCode')}")
    flood = attacker.get("flood", {})
    expect(flood.get("connections") == 400, f"the flood made {flood.get('connections')} connections")
    expect(flood.get("answered403", 0) > 0 and flood.get("other") == 0,
           f"flood connections: {flood.get('answered403')} answered 403, {flood.get('other')} answered otherwise")
    expect(record.get("daemonDescriptors", 1 << 30) < 100,
           f"the daemon held {record.get('daemonDescriptors')} descriptors during the flood")
    expect(record.get("socketAnswered") is True, "the broker's socket did not answer during the flood")
    expect("result" in response, f"the sign-in failed: {wb.shown(response)}")
    if "result" in response:
        account = response["result"]["brokerTokenResponse"]["account"]
        expect(account.get("username") == username, f"signed in as {account.get('username')}")
    after = wb.provider_grants()
    expect(after.get("authorization_code", 0) == before.get("authorization_code", 0) + 1,
           "more than the user's code was redeemed")


# ---------------------------------------------------------------------------------------------------------------
# Daemons of a check's own (a pid namespace, a tiny file system, few descriptors)
# ---------------------------------------------------------------------------------------------------------------

class OwnDaemon:
    """A tokenbrokerd of one check's own under `ctx.daemon.root / name`, run by `wrapper` (unshare, prlimit…).

    The wrapper's argv comes first; `{state}` in it is replaced by the state directory (created beforehand when
    `make_state`). Started and serving once constructed; `stop()` sends SIGTERM and returns the exit status."""

    def __init__(self, ctx: Context, name: str, wrapper: list[str], arguments: tuple[str, ...] = (),
                 make_state: bool = False) -> None:
        self.root = ctx.daemon.root / name
        self.state, run, self.log_path = self.root / "state", self.root / "run", self.root / "daemon.log"
        for directory in (self.root, run, *((self.state,) if make_state else ())):
            directory.mkdir(mode=0o700)
        self.socket_path = run / "broker.sock"
        daemon = [ctx.daemon.binary, "--socket", str(self.socket_path), "--state-directory", str(self.state),
                  "--no-bus", *arguments]
        command = [part.replace("{state}", str(self.state)) for part in wrapper] + daemon
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not self.serving() and time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.05)
        if not self.serving():
            self.process.kill()
            self.process.wait()
            wb.fail(f"the daemon did not start: {self.log()[-500:]}")

    def serving(self) -> bool:
        """Whether a connection is taken (the socket file appears at bind(), a moment before listen())."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(self.socket_path))
                return True
            except OSError:
                return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, inside_wrapper: bool = False) -> int:
        """SIGTERM to the daemon; `inside_wrapper`: to the wrapper's children (unshare -f ignores SIGTERM while it
        waits for its child, pid 1 of the new namespace)."""
        pids = [self.process.pid]
        if inside_wrapper:
            pids = [int(child) for child in
                    Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()]
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        return self.process.wait(20)


# ---------------------------------------------------------------------------------------------------------------
# 4. Who the audit names
# ---------------------------------------------------------------------------------------------------------------

def audit_lines(log: Path, correlation: str) -> list[dict[str, str]]:
    """The metadata of the audit lines about `correlation`."""
    lines = []
    for line in log.read_text(errors="replace").splitlines():
        if "token issued" in line and f"correlation_id={correlation}" in line:
            lines.append(dict(re.findall(r"(\w+)=(\S+)", line)))
    return lines


def issue_and_find_audit(socket_path: Path, log: Path) -> dict[str, str]:
    correlation = str(wb.uuid.uuid4())
    with BrokerClient(str(socket_path)) as client:
        client.call("acquireTokenSilently", {"authParameters": wb.ada_params(), "correlationId": correlation},
                    timeout=10)
    deadline = time.monotonic() + 60  # the audit's sink writes asynchronously
    while time.monotonic() < deadline:
        found = audit_lines(log, correlation)
        if found:
            return found[0]
        time.sleep(0.05)
    wb.fail(f"no audit line for {correlation}")
    return {}


def check_audit_names_callers(ctx: Context) -> None:
    """The audit names the caller by its pid, its executable (read through its pidfd, so a pid reused since the
    connect cannot pass for it) and a process id that is never reused; a daemon in a pid namespace of its own,
    where the caller has no pid, says so instead of pid 0 (the audit's finding), and still names the process."""
    line = issue_and_find_audit(ctx.socket, ctx.daemon.log_path)
    named = ("caller_pid", "caller_process", "caller_exe")
    print(f"  # audit, same namespace: {json.dumps({k: line.get(k) for k in named})}", flush=True)
    expect(line.get("caller_pid") == str(os.getpid()), f"caller_pid {line.get('caller_pid')}, wanted {os.getpid()}")
    expect(line.get("caller_exe") == os.path.realpath("/proc/self/exe"), f"caller_exe {line.get('caller_exe')}")
    expect((line.get("caller_process") or "").isdigit(), f"caller_process {line.get('caller_process')}")
    if os.getuid() != 0 or shutil.which("unshare") is None:
        raise Skip("needs root and unshare for a pid namespace of the daemon's own")
    daemon = OwnDaemon(ctx, "pid-namespace", ["unshare", "-p", "-f", "--mount-proc", "--kill-child"],
                       ("--entra-host", wb.ENV))
    try:
        with BrokerClient(str(daemon.socket_path)) as client:
            client.import_cache(json.dumps(wb.seed_document()), "msal")
        line = issue_and_find_audit(daemon.socket_path, daemon.log_path)
    finally:
        code = daemon.stop(inside_wrapper=True)
    expect(code == 0, f"the daemon in its pid namespace exited with {code}")
    print(f"  # audit, daemon in its own pid namespace: {json.dumps({k: line.get(k) for k in named})}", flush=True)
    expect(line.get("caller_pid") == "outside", f"caller_pid {line.get('caller_pid')}")
    expect((line.get("caller_process") or "").isdigit(), f"caller_process {line.get('caller_process')}")


def attack_log_forging(ctx: Context) -> None:
    """Values a client chooses and the daemon logs (a scope, a client id, a username) carry newlines and look like log
    entries of their own: a daemon logging at debug level to stderr, as outside systemd, prints every entry on one
    line, the client's text escaped, and no line the client wrote. A correlation id, which also travels in an HTTP
    header to the provider, must hold no control character: one with a newline is refused (it broke the refresh)."""
    daemon = OwnDaemon(ctx, "log-forging", [], ("--entra-host", wb.ENV, "--log-level", "debug"))
    forged = "FORGED tokenbroker.audit : token issued caller_pid=1 caller_exe=/usr/bin/sudo"
    codes = []
    try:
        with BrokerClient(str(daemon.socket_path)) as client:
            client.import_cache(json.dumps(wb.seed_document()), "msal")
            try:
                client.call("acquireTokenSilently", {"authParameters": wb.ada_params(forceRefresh=True),
                                                     "correlationId": f"ok\n{forged}"}, timeout=30)
            except wb.BrokerError as error:
                codes.append((error.error_code, (error.data or {}).get("field")))
            # A refresh (the seed's refresh token is not the provider's: refused): the token endpoint's logger carries
            # the correlation id in its own metadata.
            try:
                client.call("acquireTokenSilently", {"authParameters": wb.ada_params(forceRefresh=True),
                                                     "correlationId": "refresh-1"}, timeout=30)
            except wb.BrokerError:
                pass
            hostile = [
                wb.ada_params(requestedScopes=[f"User.Read\r\n{forged}"]),
                wb.ada_params(clientId=f"x\u2028{forged}"),
                wb.ada_params(account={"username": f"nobody\u0085{forged}"}),
                wb.ada_params(account={"username": f"nobody\n{forged}"}),
            ]
            for params in hostile:
                try:
                    client.call("acquireTokenSilently", {"authParameters": params}, timeout=30)
                except wb.BrokerError as error:
                    codes.append((error.error_code, None))
    finally:
        code = daemon.stop()
    expect(code == 0, f"the daemon exited with {code}")
    expect(codes[:1] == [("invalid_params", "params.correlationId")], f"a correlation id with a newline: {codes[:1]}")
    log = daemon.log_path.read_bytes().decode("utf-8", errors="replace")
    lines = log.split("\n")
    starting = [line for line in lines if line.startswith("FORGED") or "\u2028FORGED" in line or "\rFORGED" in line]
    expect(not starting, f"a client's text began a log line: {starting[:2]}")
    expect("\u2028" not in log and "\u0085" not in log and "\r" not in log, "a line or paragraph separator in the log")
    escaped = [marker for marker in ("\\u{a}FORGED", "\\u{d}\\u{a}FORGED", "\\u{2028}FORGED", "\\u{85}FORGED")
               if marker in log]
    expect(escaped, "none of the client's control characters shows escaped in the log")
    expect("correlation_id=refresh-1" in log, "the refresh's debug lines are not in the log")
    print(f"  # {len(lines)} log lines at debug level; the client's text shows escaped as {', '.join(escaped)}; "
          f"answers {codes}", flush=True)


def check_private_files(ctx: Context) -> None:
    """Outside systemd (no UMask= from a unit), started with a umask of 022 as a login shell has: every file the
    daemon wrote in its state directory is its user's alone (the audit found the database 0644)."""
    files = [path for path in ctx.daemon.state.rglob("*")]
    expect(any(path.name.endswith(".sqlite3") for path in files), f"no database among {files}")
    open_to_others = [f"{path.name} {path.stat().st_mode & 0o777:o}" for path in files
                      if path.stat().st_mode & 0o077]
    print(f"  # {len(files)} files and directories in the state directory, none open to others", flush=True)
    expect(not open_to_others, f"open to others: {open_to_others}")


# ---------------------------------------------------------------------------------------------------------------
# 5. A full disk
# ---------------------------------------------------------------------------------------------------------------

def check_full_disk(ctx: Context) -> None:
    """A daemon whose state directory is a 512 KiB file system of its own (a mount namespace): imports until the
    disk is full. The failed write is refused whole, counted in getStatus with its reason, and logged at error
    level (the audit found it only at debug level); everything acknowledged before it is still there."""
    if os.getuid() != 0 or shutil.which("unshare") is None:
        raise Skip("needs root and unshare for a file system of the daemon's own")
    daemon = OwnDaemon(ctx, "full-disk", ["unshare", "-m", "--propagation", "private", "sh", "-c",
                                          'mount -t tmpfs -o size=512k,mode=0700 tmpfs {state} && exec "$@"', "-"],
                       make_state=True)
    try:
        socket_path = daemon.socket_path
        acknowledged, failure = 0, None
        with BrokerClient(str(socket_path)) as client:
            for batch in range(200):
                tokens = {}
                for index in range(16):
                    target = f"https://full.disk.example/batch{batch}.scope{index}"
                    tokens[wb.at_key(wb.ADA.identifier, wb.ENV, wb.CLIENT_C, wb.TENANT, target)] = wb.at_entry(
                        wb.ADA.identifier, wb.CLIENT_C, target, "full-disk-" + "x" * 4000, wb.NOW, wb.FAR_EXPIRY)
                try:
                    client.import_cache(json.dumps({"AccessToken": tokens}), "msal")
                    acknowledged += len(tokens)
                except wb.BrokerError as error:
                    failure = error
                    break
            expect(failure is not None, "512 KiB never filled up")
            expect(failure.error_code == "internal_error", f"a full disk answered {failure.error_code}")
            status = client.call("getStatus", timeout=10)
        store = status.get("store") or {}
        print(f"  # {acknowledged} tokens acknowledged before the disk filled; status: {json.dumps(store)}",
              flush=True)
        expect(store.get("failedWrites") == 1, f"failedWrites {store.get('failedWrites')}")
        expect("full" in (store.get("lastWriteError") or ""), f"lastWriteError {store.get('lastWriteError')!r}")
        expect(status["cache"]["accessTokens"] == acknowledged,
               f"{status['cache']['accessTokens']} access tokens, {acknowledged} acknowledged")
        lines = daemon.log().splitlines()
        expect(any(" error " in line and "a cache write failed" in line for line in lines),
               "no error-level line about the failed write")
        expect(not any("full-disk-xxxx" in line for line in lines), "a token in the log")
    finally:
        code = daemon.stop()
    expect(code == 0, f"the daemon exited with {code}")


# ---------------------------------------------------------------------------------------------------------------
# 6. Out of descriptors
# ---------------------------------------------------------------------------------------------------------------

def check_out_of_descriptors(ctx: Context) -> None:
    """A daemon limited to 48 descriptors, its connections held open until it has none left: a new client is
    answered broker_busy at once (from the descriptor it keeps in reserve) instead of waiting unanswered in the
    backlog, and once the connections close it serves again."""
    if shutil.which("prlimit") is None:
        raise Skip("prlimit is not installed")
    daemon = OwnDaemon(ctx, "descriptors", ["prlimit", "--nofile=48:48"])
    socket_path = daemon.socket_path
    held: list[socket.socket] = []
    try:
        answers: list[bytes] = []
        for _ in range(60):  # more than the daemon has descriptors for; each one answered or held
            connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            connection.settimeout(30)  # "at once" is judged by the kind of answer, not its time: a busy machine
            connection.connect(str(socket_path))
            try:
                connection.sendall(b'{"jsonrpc":"2.0","id":1,"method":"getLinuxBrokerVersion"}\n')
            except BrokenPipeError:
                pass  # answered and closed before the request went out: the answer is still there to read
            try:
                answers.append(connection.recv(4096))
            except socket.timeout:
                answers.append(b"(no answer in 30 s)")
            held.append(connection)
        busy = [a for a in answers if b"file descriptors" in a and b"broker_busy" in a]
        served = [a for a in answers if b'"result"' in a]
        unanswered = [a for a in answers if a == b"(no answer in 30 s)"]
        descriptors = descriptor_count(daemon.process.pid)
        print(f"  # 60 connections held: {len(served)} served, {len(busy)} answered broker_busy for want of "
              f"descriptors, {len(unanswered)} unanswered; the daemon holds {descriptors} descriptors", flush=True)
        expect(busy and not unanswered, "clients waited unanswered while the daemon had no descriptor")
        for connection in held:
            connection.close()
        held.clear()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with BrokerClient(str(socket_path), connect_timeout=30) as client:
                    status = client.call("getStatus", timeout=30)
                    break
            except (OSError, wb.BrokerError):
                time.sleep(0.1)
        else:
            wb.fail("the daemon did not serve again once the connections closed")
        expect(status["connections"]["refused"] >= len(busy), f"refused {status['connections']['refused']}")
    finally:
        for connection in held:
            connection.close()
        code = daemon.stop()
    expect(code == 0, f"the daemon exited with {code}")


# ---------------------------------------------------------------------------------------------------------------
# 7. Core dumps
# ---------------------------------------------------------------------------------------------------------------

def key_in_excluded_memory(pid: int, key: bytes) -> bool:
    """Whether `key` is in a mapping of the process marked to be left out of core dumps (VmFlags `dd`)."""
    excluded, current = [], None
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            current = [int(part, 16) for part in line.split()[0].split("-")]
        elif line.startswith("VmFlags:") and " dd" in line and current and "rd" in line.split():
            excluded.append(current)
    with open(f"/proc/{pid}/mem", "rb") as memory:
        for start, end in excluded:
            try:
                memory.seek(start)
                if key in memory.read(end - start):
                    return True
            except OSError:
                continue
    return False


def attack_core_dump(ctx: Context) -> None:
    """The daemon, holding tokens, is killed with SIGSEGV: no core file (a control process in the same place dumps
    one). Before that, as root: the key's copy in memory is in a mapping core dumps leave out. Stops the daemon: run
    last."""
    pid = ctx.daemon.process.pid
    key = (ctx.daemon.state / "cache.key").read_bytes()
    expect(len(key) == 32, f"the key file holds {len(key)} bytes")
    limits = Path(f"/proc/{pid}/limits").read_text()
    expect(re.search(r"^Max core file size\s+0\s+0\s", limits, re.M) is not None, "RLIMIT_CORE is not 0")
    if os.getuid() == 0:
        expect(key_in_excluded_memory(pid, key), "the key is not in memory left out of core dumps")
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|"):
        raise Skip(f"core_pattern is a pipe ({pattern.split()[0]}): no core file to look for here (the core limit "
                   f"and the key's placement were checked)")
    # the control: the same directory, the same signal, core dumps allowed
    place = ctx.daemon.root
    control = subprocess.run(["sh", "-c", "ulimit -c unlimited; kill -SEGV $$"], cwd=place)
    control_cores = [p for p in place.iterdir() if p.name.startswith("core")]
    for path in control_cores:
        path.unlink()
    if not control_cores:
        raise Skip(f"a process allowed to dump produced no core here (core_pattern {pattern!r}, "
                   f"status {control.returncode})")
    os.kill(pid, signal.SIGSEGV)
    ctx.daemon.process.wait(30)
    cores = [p for p in place.iterdir() if p.name.startswith("core")]
    expect(ctx.daemon.process.returncode == -signal.SIGSEGV, f"the daemon ended with {ctx.daemon.process.returncode}")
    expect(not cores, f"the daemon left {cores}")
    print(f"  # control process: a core of {control_cores[0].name}; the daemon: none", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--daemon", required=True)
    parser.add_argument("--idp")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    wb.SCHEMAS = wb.Schemas(wb.PROTOCOL_DIR / "schemas")
    binary = os.path.abspath(args.daemon)
    provider = wb.Provider(os.path.abspath(args.idp or os.path.join(os.path.dirname(binary), "tokenbroker-test-idp")))
    wb.configure_provider(f"127.0.0.1:{provider.port}")
    root = Path(tempfile.mkdtemp(prefix="tokenbroker-attacks-"))
    os.chmod(root, 0o755)  # the other uid runs its programs from / and needs nothing here
    os.environ["SWIFT_BACKTRACE"] = "enable=no"  # a crash is the kernel's to handle: no backtracer in between
    os.umask(0o022)  # a login shell's: what the daemon writes must be private all the same
    daemon = wb.Daemon(binary, root, idle_timeout=2)
    ctx = Context(daemon)
    runner = wb.Runner(ctx)
    try:
        daemon.start()
        if not runner.check("the daemon starts", lambda _: daemon.wait_ready()):
            return wb.finish(runner, daemon, args.keep)
        c = runner.check
        c("the cache holds tokens (the wire battery's seed)", wb.check_import_seed)
        c("a client that never reads its answers: closed, memory bounded, others served", attack_unread_answers)
        c("20 errors with 1 MB correlation ids: refused, getStatus stays small", attack_long_correlation_ids)
        c("megabyte lines of escaped keys, one repeating a key at its end, from four clients: milliseconds each, "
          "others served", attack_escaped_keys)
        c("a sign-in: no authorization parameter in any process's argv; the start page serves once", attack_argv)
        c("another uid at the loopback listener: 403 for the start page and its own code, a flood held off",
          attack_other_user_at_the_listener)
        c("the audit names the caller, also from outside the daemon's pid namespace", check_audit_names_callers)
        c("newlines in a client's correlation id, scope and client id forge no log line", attack_log_forging)
        c("started with umask 022, outside systemd: every file in the state directory is private",
          check_private_files)
        c("a full disk: the write refused whole, in getStatus and the log at error level", check_full_disk)
        c("out of descriptors: new clients answered broker_busy at once, served again after", check_out_of_descriptors)
        c("SIGSEGV leaves no core; the key in memory is left out of dumps", attack_core_dump)
    finally:
        provider.stop()
    if daemon.process is not None and daemon.process.poll() is not None:
        daemon.log.close()
        daemon.process = None  # it was killed on purpose by the last attack
    return wb.finish(runner, daemon, args.keep)


if __name__ == "__main__":
    sys.exit(main())
