#!/usr/bin/env python3
"""MSAL apps use tokenbroker unchanged, over Microsoft's Broker1 interface on the session bus: proven with the real
MSAL Python and pymsalruntime (MSALRuntime), each app a process of its own.

Usage (through Tests/broker1/run.sh, which gives it a network namespace of its own):

    python3 Tests/broker1/broker1_test.py --bin .build/debug [--keep]

What it starts, all for real: a private dbus-daemon (own configuration and service directory), a
gnome-keyring-daemon unlocked on it (MSALRuntime keeps its own account cache there), tokenbroker-test-idp with TLS
on 127.0.0.1:443, and tokenbrokerd joined to that bus. The apps are msal_app.py processes; raw Broker1 calls come
from bus_client.py, and keyring_client.py counts and deletes MSALRuntime's keyring entries. Every secret stays in the
temporary directory; nothing prints a token (an app reports a token's SHA-256 digest; the audit and log checks hold
tokens in memory only).

Each check prints `ok` or `FAIL` with the reason; the exit status is 1 when any failed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "interop"))
from interop_test import (  # noqa: E402
    ADA, ADAL_APP, FAMILY_APP, GRACE, MSAL_APP, REDIRECT, Checks, CountingSession, Daemon, Fail, Provider, expect,
    run_suite, wait_for)

SCOPE = "https://graph.microsoft.com/User.Read"
MAIL = "https://graph.microsoft.com/Mail.Read"
NAME = "com.microsoft.identity.broker1"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-dbus and python3-gi for bus_client.py, keyring_client.py
CAROL = "carol@contoso.example"  # signed in for the removeAccount checks on the bus
DAVE = "dave@contoso.example"  # never signed in: the sign-in that is cancelled
NATIVE_CLIENT = "https://login.microsoftonline.com/common/oauth2/nativeclient"  # the redirect MSAL Python sends
MSALRUNTIME_SCHEMA = "com.microsoft.identity.secret"  # MSALRuntime's own entries in the keyring
BROKER_KEY_SCHEMA = "org.tokenbroker.CacheKey"  # the broker's cache key, in the same keyring
WAIT = 60  # seconds any wait for an event may take: generous, the event ends it


SECRET_MEMBERS = {"accessToken", "idToken", "refreshToken", "clientInfo"}


def shown(answer: Any) -> str:
    """An answer for a failure message, its tokens replaced: a check that fails must not print a secret."""
    def redact(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: "<secret>" if key in SECRET_MEMBERS else redact(item) for key, item in value.items()}
        if isinstance(value, list):
            return [redact(item) for item in value]
        return value
    return json.dumps(redact(answer))[:300]


def shown_output(output: str) -> str:
    """A bus call's printed reply, for a failure message: its answer redacted by `shown`, or only its size when it
    is not the reply expected (it might hold a token)."""
    try:
        return shown(json.loads(json.loads(output)["answer"]))
    except (ValueError, KeyError, TypeError):
        return f"<{len(output)} bytes not a reply>"


class Bus:
    """A private session bus: dbus-daemon with a configuration of its own. `any_user`: every uid may connect (a
    system bus's policy), in a directory all may reach, for the check that another user is refused by the broker
    itself."""

    def __init__(self, directory: Path, any_user: bool = False) -> None:
        self.services = directory / "dbus-services"
        self.services.mkdir()
        self.socket = directory / "bus"
        config = directory / "bus.conf"
        users = '<allow user="*"/>' if any_user else ""
        config.write_text(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={self.socket}</listen>
  <servicedir>{self.services}</servicedir>
  <policy context="default">
    {users}
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <!-- A session bus's limits (Debian's session.conf): a client's many calls are the broker's to bound. -->
  <limit name="max_replies_per_connection">50000</limit>
  <limit name="max_message_size">1000000000</limit>
  <limit name="max_incoming_bytes">1000000000</limit>
  <limit name="max_outgoing_bytes">1000000000</limit>
</busconfig>
""")
        self.log = open(directory / "dbus.log", "wb")
        self.process = subprocess.Popen(["dbus-daemon", f"--config-file={config}", "--nofork", "--print-address"],
                                        stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().decode().strip()
        if not line:
            raise RuntimeError(f"dbus-daemon exited with status {self.process.wait()}")
        self.address = line

    def has_owner(self, name: str) -> bool:
        result = subprocess.run(["busctl", f"--address={self.address}", "status", name], capture_output=True)
        return result.returncode == 0

    def owner_pid(self, name: str) -> int | None:
        result = subprocess.run(["busctl", f"--address={self.address}", "status", name], capture_output=True,
                                text=True)
        for line in result.stdout.splitlines():
            if line.startswith("PID="):
                return int(line.split("=", 1)[1])
        return None

    def ping(self, timeout: float = 5) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["busctl", f"--address={self.address}", f"--timeout={timeout}", "call", NAME,
                               "/com/microsoft/identity/broker1", "org.freedesktop.DBus.Peer", "Ping"],
                              capture_output=True, text=True, timeout=timeout + 10)

    def client(self, *arguments: str, stdin: str | None = None, timeout: float = 130) -> str:
        """bus_client.py; a request argument `-` is read from `stdin` (a megabyte does not fit in argv)."""
        result = subprocess.run([SYSTEM_PYTHON, str(HERE / "bus_client.py"), self.address, *arguments],
                                input=stdin, capture_output=True, text=True, timeout=timeout)
        expect(result.returncode == 0, f"bus_client.py {arguments[0]} failed: {result.stderr.strip()[-400:]}")
        return result.stdout.strip()

    def call(self, method: str, request: dict[str, Any] | str, correlation: str = "c0ffee") -> dict[str, Any]:
        return self.call_as(method, request, correlation)[0]

    def call_as(self, method: str, request: dict[str, Any] | str,
                correlation: str = "c0ffee") -> tuple[dict[str, Any], dict[str, Any]]:
        """The answer, and the calling process (`pid`, `exe`) as the broker sees it."""
        text = request if isinstance(request, str) else json.dumps(request)
        called = json.loads(self.client("call", method, correlation, "-", stdin=text))
        return json.loads(called["answer"]), {"pid": called["pid"], "exe": called["exe"]}

    def start(self, method: str, request: dict[str, Any], correlation: str) -> subprocess.Popen[str]:
        """A call left running (its answer is `answer` of the JSON on its stdout)."""
        process = subprocess.Popen([SYSTEM_PYTHON, str(HERE / "bus_client.py"), self.address, "call", method,
                                    correlation, json.dumps(request)],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return process

    def keyring(self, mode: str, schema: str) -> int:
        """keyring_client.py: how many items of `schema` the keyring holds (`count`), or deletes them (`clear`)."""
        result = subprocess.run([SYSTEM_PYTHON, str(HERE / "keyring_client.py"), self.address, mode, schema],
                                capture_output=True, text=True, timeout=60)
        expect(result.returncode == 0, f"keyring_client.py {mode} failed: {result.stderr.strip()[-400:]}")
        return int(result.stdout)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.log.close()


class Keyring:
    """gnome-keyring-daemon's Secret Service on the private bus, its login collection unlocked."""

    def __init__(self, directory: Path, bus: Bus) -> None:
        runtime = directory / "keyring-runtime"
        runtime.mkdir(mode=0o700)
        environment = dict(os.environ, HOME=str(directory), XDG_RUNTIME_DIR=str(runtime),
                           DBUS_SESSION_BUS_ADDRESS=bus.address)
        self.log = open(directory / "keyring.log", "wb")
        self.process = subprocess.Popen(
            ["gnome-keyring-daemon", "--unlock", "--components=secrets", "--foreground"],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, env=environment)
        assert self.process.stdin is not None
        self.process.stdin.write(b"keyring-password")
        self.process.stdin.close()
        wait_for("the keyring on the bus", lambda: bus.has_owner("org.freedesktop.secrets")
                 or self.process.poll() is not None)
        expect(self.process.poll() is None, "gnome-keyring-daemon exited; see keyring.log")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(10)
        self.log.close()


@dataclass
class AuditLine:
    """One line of the daemon's audit (`tokenbroker.audit`): its event and its one-word fields."""
    event: str
    fields: dict[str, str]

    FIELD = re.compile(r"(?:^|\s)(\w+)=(\S+)")

    @classmethod
    def parse(cls, line: str) -> AuditLine | None:
        if "tokenbroker.audit:" not in line or "] " not in line:
            return None
        head, event = line.rsplit("] ", 1)
        return cls(event.strip(), dict(cls.FIELD.findall(head.split("tokenbroker.audit:", 1)[1])))

    def names(self, pid: int, exe: str) -> bool:
        """Whether the line names this process, called over the bus."""
        return (self.fields.get("caller_via") == "bus" and self.fields.get("caller_pid") == str(pid)
                and self.fields.get("caller_exe") == exe)


@dataclass
class AppRun:
    """One msal_app.py process: its pid and executable, and what each action returned."""
    pid: int
    exe: str
    results: list[dict[str, Any]]


class Broker1Test(Checks):
    def __init__(self, binaries: Path, directory: Path) -> None:
        super().__init__()
        self.binaries = binaries
        self.directory = directory
        self.bus = Bus(directory)
        self.keyring = Keyring(directory, self.bus)
        self.provider = Provider(binaries / "tokenbroker-test-idp", directory)
        # The broker's browser: the test's script, which fills in the provider's sign-in form and leaves a mark.
        self.browser_runs = directory / "browser-runs"
        self.browser = self.provider.browser_script(directory / "browser.sh", GRACE, runs=self.browser_runs)
        config = directory / ".config" / "tokenbroker"
        config.mkdir(parents=True)
        (config / "tokenbrokerd.conf").write_text(f"system-browser = {self.browser}\n")
        # The daemon's environment: the private bus, and a display (the browser is the script, which needs none).
        os.environ["DBUS_SESSION_BUS_ADDRESS"] = self.bus.address
        os.environ["DISPLAY"] = ":99"
        self.daemon = Daemon(binaries, directory, self.provider.certificate, bus=True)
        wait_for("the broker's name on the bus", lambda: self.bus.has_owner(NAME), WAIT)
        # The digest of the token each app was handed through the broker, by client id.
        self.handed: dict[str, str] = {}
        # Every token the suite saw (answers on the bus, the broker's exports): none may appear in a log.
        self.secrets: set[str] = set()

    # -- helpers ---------------------------------------------------------------------------------------------------

    def msal_cache(self, client_id: str) -> Path:
        """The file an app keeps MSAL Python's token cache in, across its processes."""
        return self.directory / f"msal-cache-{client_id}.json"

    def app(self, client_id: str, *actions: str, cache: bool = False) -> AppRun:
        """Runs msal_app.py as a process of its own, with the keyring, the bus and the provider's CA; with `cache`,
        MSAL Python's token cache persists in the app's file, as apps that keep it do."""
        environment = dict(os.environ, HOME=str(self.directory), DBUS_SESSION_BUS_ADDRESS=self.bus.address)
        environment.pop("DISPLAY", None)  # the app has no display: the broker shows any UI
        persisted = ["--cache", str(self.msal_cache(client_id))] if cache else []
        result = subprocess.run([sys.executable, str(HERE / "msal_app.py"), client_id, self.provider.authority,
                                 str(self.provider.certificate), SCOPE, *persisted, *actions],
                                capture_output=True, text=True, env=environment, timeout=180)
        expect(result.returncode == 0, f"the MSAL app failed ({result.returncode}): {result.stderr.strip()[-800:]}")
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        expect(lines and lines[0].get("broker_enabled") is True,
               f"MSAL did not enable the broker: {result.stderr.strip()[-800:]}")
        expect(len(lines) == len(actions) + 1, f"the MSAL app answered {len(lines) - 1} of {len(actions)} actions")
        return AppRun(lines[0]["pid"], lines[0]["exe"], lines[1:])

    def browser_count(self) -> int:
        return len(self.browser_runs.read_text().splitlines()) if self.browser_runs.exists() else 0

    def expect_token(self, answer: dict[str, Any], what: str) -> None:
        expect(answer.get("token_sha256"), f"{what}: no token: {answer.get('error')} {answer.get('error_description')}")
        expect(answer.get("token_source") in ("broker", "cache"), f"{what}: token_source {answer.get('token_source')}")
        expect(not answer.get("has_refresh_token"), f"{what}: a refresh token reached the app")

    def audit(self) -> list[AuditLine]:
        text = (self.directory / "daemon.log").read_text(errors="replace")
        return [line for line in map(AuditLine.parse, text.splitlines()) if line is not None]

    def expect_audited(self, run: AppRun, client_id: str, account: str) -> None:
        """The broker's audit names the app's process (pid, executable, over the bus) for the token it handed it."""
        def audited() -> bool:
            return any(line.event == "token issued" and line.names(run.pid, run.exe)
                       and line.fields.get("client_id") == client_id and line.fields.get("account") == account
                       for line in self.audit())
        wait_for(f"the audit line of the token handed to pid {run.pid} ({client_id})", audited, WAIT)

    def audit_barrier(self) -> None:
        """Exports the broker's cache through the CLI, an audited event, and waits for its audit line: the audit has
        one ordered sink, so every line handed to it before is then in the log too. The export's tokens join
        `secrets`."""
        export = self.directory / f"export-{uuid.uuid4()}.json"
        process = subprocess.Popen([str(self.daemon.cli_binary), "export", "--format", "msal", "--output",
                                    str(export)], env=self.daemon.environment, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        _, error = process.communicate(timeout=WAIT)
        expect(process.returncode == 0, f"tokenbroker export failed: {error.strip()[-400:]}")
        document = json.loads(export.read_text())
        export.unlink()
        self.secrets |= {entry["secret"] for section in ("AccessToken", "RefreshToken", "IdToken")
                         for entry in document.get(section, {}).values() if entry.get("secret")}
        wait_for("the export's audit line", lambda: any(
            line.event == "cache exported" and line.fields.get("caller_pid") == str(process.pid)
            for line in self.audit()), WAIT)

    def tokens_issued_to(self, runs: list[AppRun]) -> list[AuditLine]:
        """The audit's token lines naming any of these processes (after `audit_barrier`, all of them)."""
        return [line for line in self.audit() if line.event.startswith("token issued")
                and any(line.names(run.pid, run.exe) for run in runs)]

    def bus_calls(self) -> int:
        """The Broker1 calls the broker has answered so far (`Ping` is sd-bus's own and not counted)."""
        status = self.daemon.cli("status", "--json")
        expect(status.returncode == 0, f"status failed: {status.stderr}")
        return int(json.loads(status.stdout)["bus"]["calls"])

    def silent_request(self, client_id: str, username: str | None = None, scope: str = SCOPE,
                       **more: Any) -> dict[str, Any]:
        parameters = {"clientId": client_id, "authority": self.provider.authority, "requestedScopes": [scope],
                      "redirectUri": NATIVE_CLIENT, **({"username": username} if username else {})}
        return {"authParameters": parameters, **more}

    def token_of(self, answer: dict[str, Any], what: str) -> dict[str, Any]:
        """The brokerTokenResponse of a bus answer, its access token remembered as a secret."""
        response = answer.get("brokerTokenResponse") or {}
        expect(response.get("accessToken"), f"{what}: no token: {shown(answer)}")
        self.secrets.add(response["accessToken"])
        return response

    def sign_in_and_import(self, client_id: str, username: str) -> Path:
        """`username` signs in through MSAL Python's own code flow, and the broker imports MSAL's cache."""
        cache = msal.SerializableTokenCache()
        app = msal.PublicClientApplication(client_id, authority=self.provider.authority, token_cache=cache,
                                           http_client=CountingSession(self.provider.certificate),
                                           instance_discovery=False)
        code, verifier = self.provider.sign_in(client_id, username)
        result = app.acquire_token_by_authorization_code(code, scopes=[SCOPE], redirect_uri=REDIRECT,
                                                         data={"code_verifier": verifier})
        expect("access_token" in result, f"MSAL did not sign in: {result.get('error')}")
        path = self.directory / f"signed-in-{username}.json"
        path.write_text(cache.serialize())
        path.chmod(0o600)
        imported = self.daemon.cli("import", str(path), "--json")
        expect(imported.returncode == 0, f"import failed: {imported.stderr}")
        return path

    # -- checks ----------------------------------------------------------------------------------------------------

    def user_signs_in_once(self) -> None:
        """ada signs in once (MSAL Python's own code flow), and the broker imports MSAL's cache."""
        self.sign_in_and_import(MSAL_APP, ADA)

    def ping_answers(self) -> None:
        result = self.bus.ping()
        expect(result.returncode == 0, f"Ping failed: {result.stderr}")
        version = self.bus.call("getLinuxBrokerVersion", {"msalCppVersion": "1.28.0"})
        expect(version.get("linuxBrokerVersion") == "2.0.1", f"version answer {shown(version)}")

    def same_client_gets_a_token_without_ui(self) -> None:
        before = self.browser_count()
        run = self.app(MSAL_APP, "interactive", "silent", cache=True)
        interactive, silent = run.results
        self.expect_token(interactive, "acquire_token_interactive")
        expect(interactive["token_source"] == "broker", f"token_source {interactive['token_source']}")
        expect(interactive["username"] == ADA, f"signed in as {interactive['username']}")
        self.expect_token(silent, "acquire_token_silent in the same process")
        expect(self.browser_count() == before, "a browser was shown")
        self.expect_audited(run, MSAL_APP, ADA)
        self.handed[MSAL_APP] = interactive["token_sha256"]

    def claims_challenge_needs_interaction(self) -> None:
        # One process: a token through the broker, then a claims challenge (which skips MSAL Python's and the
        # broker's caches alike). The provider demands interaction for the next refresh, as Entra ID does when the
        # challenge asks for more than the refresh token carries; that fault must be the challenge's, used up here.
        self.provider_control("reset", {})
        before = self.provider.stats()
        self.provider_control("fail-next", {"count": 1, "status": 400, "error": "interaction_required",
                                            "grantType": "refresh_token"})
        try:
            run = self.app(MSAL_APP, "interactive", "claims")
            after = self.provider.stats()
        finally:
            if self.provider.stats()["faultsLeft"]:
                self.provider_control("reset", {})  # never into a later check, whatever happened here
        interactive, claims = run.results
        self.expect_token(interactive, "acquire_token_interactive before the challenge")
        expect(interactive["token_source"] == "broker", f"token_source {interactive['token_source']}")
        expect(claims.get("accounts") != 0, "MSAL knew no account after its own sign-in")
        expect("result" in claims and claims["result"] is None and not claims.get("token_sha256"),
               f"acquire_token_silent answered the challenge: {claims}")
        calls = claims.get("broker_calls") or []
        expect([call["call"] for call in calls] == ["_acquire_token_silently"],
               f"MSAL did not take the challenge to the broker: {calls}")
        (call,) = calls
        expect(call["error"] == "broker_error" and call["broker_status"] == "Status_InteractionRequired",
               f"the broker's answer as MSAL saw it: {call}")
        expect("interaction_required" in str(call["error_description"]),
               f"the provider's reason is not in the broker's answer: {call['error_description']}")
        expect(after["faultsLeft"] == 0, "the provider's fault was not used by the challenge")
        refreshes = after["byGrant"]["refresh_token"] - before["byGrant"]["refresh_token"]
        expect(refreshes == 1, f"{refreshes} refresh requests reached the provider, not the challenge's one")

    def family_sibling_gets_a_token_through_the_family_refresh_token(self) -> None:
        before_browser, before_requests = self.browser_count(), self.provider.token_requests()
        run = self.app(FAMILY_APP, "interactive", cache=True)
        (interactive,) = run.results
        self.expect_token(interactive, "the family app")
        expect(interactive["username"] == ADA, f"signed in as {interactive['username']}")
        expect(self.browser_count() == before_browser, "a browser was shown")
        expect(self.provider.token_requests() > before_requests, "the family refresh token was not redeemed")
        self.expect_audited(run, FAMILY_APP, ADA)
        self.handed[FAMILY_APP] = interactive["token_sha256"]

    def outsider_signs_in_through_the_broker_browser(self) -> None:
        before = self.browser_count()
        run = self.app(ADAL_APP, "interactive", cache=True)
        (interactive,) = run.results
        self.expect_token(interactive, "the app outside the family")
        expect(self.browser_count() == before + 1, "the broker's browser did not run once")
        expect(interactive["username"] == GRACE, f"signed in as {interactive['username']}")
        self.expect_audited(run, ADAL_APP, GRACE)
        self.handed[ADAL_APP] = interactive["token_sha256"]

    def a_bus_token_is_audited_with_its_caller(self) -> None:
        correlation = f"audit-{uuid.uuid4()}"
        answer, caller = self.bus.call_as("acquireTokenSilently", self.silent_request(MSAL_APP, ADA), correlation)
        self.token_of(answer, "acquireTokenSilently")
        def line() -> AuditLine | None:
            return next((line for line in self.audit() if line.fields.get("correlation_id") == correlation), None)
        wait_for("the audit line of the bus call", lambda: line() is not None, WAIT)
        found = line()
        assert found is not None
        expect(found.event == "token issued", f"the call's audit line says {found.event!r}")
        expect(found.names(caller["pid"], caller["exe"]),
               f"the audit line names {found.fields} rather than bus pid {caller['pid']} ({caller['exe']})")
        expect(found.fields.get("client_id") == MSAL_APP and found.fields.get("account") == ADA
               and found.fields.get("source") == "cache", f"the audit line says {found.fields}")
        self.audit_barrier()
        log = (self.directory / "daemon.log").read_text(errors="replace")
        leaked = sum(secret in log for secret in self.secrets)
        expect(leaked == 0, f"{leaked} of {len(self.secrets)} tokens appear in the daemon's log")

    def an_account_at_the_root_is_used(self) -> None:
        for client, user in ((MSAL_APP, ADA), (ADAL_APP, GRACE)):
            # ada and grace are both signed in: with no account named, the broker does not pick one.
            unnamed = self.bus.call("acquireTokenSilently", self.silent_request(client))
            expect(unnamed.get("error", {}).get("status") == 2, f"{client} with no account: {shown(unnamed)}")
            accounts = self.bus.call("getAccounts", {"clientId": client, "redirectUri": client}).get("accounts", [])
            chosen = [account for account in accounts if account.get("username") == user]
            expect(len(chosen) == 1, f"getAccounts for {client}: {shown(accounts)}")
            answer = self.bus.call("acquireTokenSilently", self.silent_request(client, account=chosen[0]))
            response = self.token_of(answer, f"{client} with {user}'s account at the root")
            expect(response.get("account", {}).get("username") == user,
                   f"answered for {response.get('account', {}).get('username')}")

    def remove_account_over_the_bus(self) -> None:
        self.sign_in_and_import(MSAL_APP, CAROL)
        first = self.token_of(self.bus.call("acquireTokenSilently", self.silent_request(MSAL_APP, CAROL)),
                              "carol's token")
        carol = first["account"]
        # With the app's client id: that app's tokens of the account go; the family refresh token stays.
        requests = self.provider.token_requests()
        removed = self.bus.call("removeAccount", {"clientId": MSAL_APP, "account": carol})
        expect(removed == {}, f"removeAccount with clientId answered {shown(removed)}")
        listed = self.bus.call("getAccounts", {"clientId": MSAL_APP, "redirectUri": MSAL_APP}).get("accounts", [])
        expect(CAROL in [account.get("username") for account in listed], "carol's sign-in went with the app's tokens")
        again = self.token_of(self.bus.call("acquireTokenSilently", self.silent_request(MSAL_APP, CAROL)),
                              "carol's token after the app's tokens went")
        expect(again["accessToken"] != first["accessToken"], "the removed access token was served")
        expect(self.provider.token_requests() == requests + 1, "the family refresh token was not redeemed once")
        # Without a client id: the account and all its tokens go, for every app; ada stays.
        removed = self.bus.call("removeAccount", {"account": carol})
        expect(removed == {}, f"removeAccount without clientId answered {shown(removed)}")
        for client in (MSAL_APP, FAMILY_APP):
            listed = self.bus.call("getAccounts", {"clientId": client, "redirectUri": client}).get("accounts", [])
            expect(CAROL not in [account.get("username") for account in listed], f"{client} still lists carol")
            answer = self.bus.call("acquireTokenSilently", self.silent_request(client, CAROL))
            expect(answer.get("error", {}).get("status") == 2, f"{client} for carol: {shown(answer)}")
        self.token_of(self.bus.call("acquireTokenSilently", self.silent_request(MSAL_APP, ADA)), "ada after carol")

    def cancel_stops_a_running_sign_in(self) -> None:
        held, release = self.directory / "browser-held", self.directory / "browser-release"
        # A browser that opens and waits (for the test's word, or two minutes), as a user who has not signed in yet.
        self.browser.write_text(f"#!/bin/sh\necho run >> '{self.browser_runs}'\n: > '{held}'\ni=0\n"
                                f"while [ ! -e '{release}' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\n")
        correlation = str(uuid.uuid4())
        call = self.bus.start("acquireTokenInteractively", self.silent_request(ADAL_APP, DAVE), correlation)
        try:
            wait_for("the sign-in's browser", lambda: held.exists() or call.poll() is not None, WAIT)
            if call.poll() is not None:
                output, error = call.communicate()
                raise Fail(f"the sign-in ended before it was cancelled: {shown_output(output)} {error.strip()[-400:]}")
            cancelled = self.bus.call("cancelInteractiveFlow", {}, correlation)
            expect(cancelled == {}, f"cancelInteractiveFlow answered {shown(cancelled)}")
            output, error = call.communicate(timeout=WAIT)
            expect(call.returncode == 0, f"the interactive call failed: {error.strip()[-400:]}")
            answer = json.loads(json.loads(output)["answer"])
            expect(answer.get("error", {}).get("status") == 7, f"the cancelled sign-in answered {shown(answer)}")
        finally:
            release.touch()
            if call.poll() is None:
                call.kill()
                call.wait()
            self.provider.browser_script(self.browser, GRACE, runs=self.browser_runs)

    def bad_input_gets_error_objects(self) -> None:
        cases = [
            ("acquireTokenSilently", "not json", 6),
            ("acquireTokenSilently", json.dumps({"authParameters": {"clientId": 7}}), 6),
            ("acquireTokenSilently", json.dumps({"authParameters": {"clientId": "x" * (1 << 20)}}), 6),
            ("noSuchMethod", "{}", 6),
            ("acquirePrtSsoCookie", "{}", 9),
            ("generateSignedHttpRequest", "{}", 9),
        ]
        for method, request, status in cases:
            answer = self.bus.call(method, request)
            error = answer.get("error", {})
            expect(error.get("status") == status and isinstance(error.get("errorCode"), int)
                   and isinstance(error.get("tag"), int) and error.get("context"),
                   f"{method} with {request[:40]!r}: {shown(answer)}")
        answer = json.loads(self.bus.client("signature"))
        expect(answer.get("error", {}).get("status") == 6, f"a call with signature (i): {shown(answer)}")
        expect(self.bus.ping().returncode == 0, "the broker stopped answering after bad input")

    def a_flood_from_one_client_leaves_others_served(self) -> None:
        # Claims challenges skip the cache: each call waits on the (slowed) provider, so the calls pile up.
        request = json.dumps({"authParameters": {"clientId": MSAL_APP, "authority": self.provider.authority,
                                                 "requestedScopes": [SCOPE], "username": ADA,
                                                 "decodedClaims": '{"access_token":{"xms_cc":{"values":["cp1"]}}}'}})
        self.provider_control("delay", {"ms": 300})
        try:
            answers = json.loads(self.bus.client("flood", "400", request))
        finally:
            self.provider_control("reset", {})
        expect(answers["other_client_answered"], f"the second client was not served: {answers}")
        expect(answers["other"] == 0, f"unexpected answers: {answers}")
        expect(answers["busy"] > 0, f"no call was refused as busy: {answers}")
        expect(answers["ok"] + answers["busy"] == 400, f"answers: {answers}")

    def removed_account_gets_nothing(self) -> None:
        for user in (ADA, GRACE):
            removed = self.daemon.cli("remove-account", user)
            expect(removed.returncode == 0, f"remove-account {user}: {removed.stderr}")
        for client in (MSAL_APP, FAMILY_APP, ADAL_APP):
            accounts = self.bus.call("getAccounts", {"clientId": client, "redirectUri": client})
            expect(accounts == {"accounts": []}, f"{client}: accounts {shown(accounts)}")
            for user in (ADA, GRACE):
                answer = self.bus.call("acquireTokenSilently", self.silent_request(client, user))
                expect(answer.get("error", {}).get("status") == 2, f"{client} for {user}: {shown(answer)}")
        # Each app that had a token, in a new process (MSAL Python's cache empty; MSALRuntime's entries still in the
        # keyring), with a broker's browser that cannot sign anyone in: MSALRuntime's silent sign-in asks the broker
        # (getAccounts, acquireTokenSilently), which answers InteractionRequired; the interactive sign-in it falls
        # back to gets nothing either.
        self.browser.write_text("#!/bin/sh\necho run >> '%s'\nexit 3\n" % self.browser_runs)
        runs = []
        for client in (MSAL_APP, FAMILY_APP, ADAL_APP):
            browser, calls = self.browser_count(), self.bus_calls()
            run = self.app(client, "interactive")
            (interactive,) = run.results
            expect(not interactive.get("token_sha256"), f"{client} got a token after the account was removed")
            steps = [(call["call"], call.get("broker_status")) for call in interactive["broker_calls"]]
            expect(steps[:1] == [("_signin_silently", "Status_InteractionRequired")]
                   and [step for step, _ in steps[1:]] == ["_signin_interactively"],
                   f"{client}: MSAL's broker calls {interactive['broker_calls']}")
            expect(not interactive["broker_calls"][1].get("token_sha256"), f"{client}: the sign-in gave a token")
            answered = self.bus_calls() - calls
            expect(answered == 3, f"{client}: the broker answered {answered} calls, not getAccounts, "
                                  "acquireTokenSilently and acquireTokenInteractively")
            expect(self.browser_count() == browser + 1, f"{client}: the broker's browser did not run once")
            runs.append(run)
        self.audit_barrier()
        issued = self.tokens_issued_to(runs)
        expect(not issued, f"the broker issued tokens after the removal: {[line.fields for line in issued]}")

    def an_app_keeps_what_it_was_handed(self) -> None:
        # Each app again, now with the MSAL Python cache it kept (so it still knows the account): what it was handed
        # before the removal still serves it, without the broker.
        runs = []
        for client in (MSAL_APP, FAMILY_APP, ADAL_APP):
            calls = self.bus_calls()
            run = self.app(client, "silent", "refresh", "claims", cache=True)
            silent, refresh, claims = run.results
            handed = self.handed.get(client)
            expect(handed is not None, f"{client} was never handed a token")
            # MSAL Python's own access token cache: the broker is not asked.
            expect(silent.get("token_sha256") == handed and silent.get("token_source") == "cache"
                   and silent["broker_calls"] == [], f"{client} silent: {silent}")
            # force_refresh skips MSAL Python's cache; MSALRuntime answers from its own entries in the keyring.
            expect(refresh.get("token_sha256") == handed and [call["call"] for call in refresh["broker_calls"]]
                   == ["_acquire_token_silently"] and refresh["broker_calls"][0]["token_sha256"] == handed,
                   f"{client} force_refresh: {refresh}")
            # A claims challenge skips MSALRuntime's cache too: it reaches the broker, which knows no such account.
            expect(claims.get("result", "") is None and [(call["call"], call["broker_status"])
                   for call in claims["broker_calls"]] == [("_acquire_token_silently", "Status_InteractionRequired")]
                   and "no account" in str(claims["broker_calls"][0]["error_description"]),
                   f"{client} claims: {claims}")
            answered = self.bus_calls() - calls
            expect(answered == 1, f"{client}: the broker answered {answered} calls, not the challenge alone")
            runs.append(run)
        self.audit_barrier()
        issued = self.tokens_issued_to(runs)
        expect(not issued, f"the broker issued tokens after the removal: {[line.fields for line in issued]}")
        # Where that refreshed token came from: MSALRuntime's entries in the keyring. Without them it has nothing.
        entries, keys = self.bus.keyring("count", MSALRUNTIME_SCHEMA), self.bus.keyring("count", BROKER_KEY_SCHEMA)
        expect(entries > 0, "MSALRuntime keeps nothing in the keyring")
        expect(self.bus.keyring("clear", MSALRUNTIME_SCHEMA) == entries, "MSALRuntime's entries were not removed")
        expect(self.bus.keyring("count", MSALRUNTIME_SCHEMA) == 0, "MSALRuntime's entries are still there")
        expect(keys > 0 and self.bus.keyring("count", BROKER_KEY_SCHEMA) == keys, "the brokers' cache keys changed")
        for client in (MSAL_APP, FAMILY_APP, ADAL_APP):
            calls = self.bus_calls()
            (refresh,) = self.app(client, "refresh", cache=True).results
            expect(refresh.get("result", "") is None and refresh["broker_calls"] == [
                {"call": "_acquire_token_silently", "result": None}],
                f"{client} force_refresh without MSALRuntime's entries: {refresh}")
            expect(self.bus_calls() == calls, f"{client}: the broker was asked")

    def an_unreachable_provider_is_status_4(self) -> None:
        self.provider.stop()
        expect(self.provider.process.returncode is not None, "the provider is still running")
        # ada again (her tokens for User.Read), and a scope the broker holds no token for: it must refresh.
        imported = self.daemon.cli("import", str(self.directory / f"signed-in-{ADA}.json"), "--json")
        expect(imported.returncode == 0, f"import failed: {imported.stderr}")
        answer = self.bus.call("acquireTokenSilently", self.silent_request(MSAL_APP, ADA, scope=MAIL))
        error = answer.get("error", {})
        expect(error.get("status") == 4, f"with the provider down: {shown(answer)}")
        self.token_of(self.bus.call("acquireTokenSilently", self.silent_request(MSAL_APP, ADA)),
                      "ada's cached token with the provider down")

    def another_user_on_the_bus_is_refused(self) -> None:
        """A bus that lets every uid connect (as a system bus does, or a session bus shared too widely): a call from
        another user reaches the broker, which refuses it with a Broker1 error object (the caller's uid from the bus
        daemon) and logs the refusal; the broker's own user is still served."""
        if os.getuid() != 0 or shutil.which("setpriv") is None:
            print("     # not checked: needs root and setpriv to call as another uid (CI runs as root)", flush=True)
            return
        place = Path(tempfile.mkdtemp(prefix="tokenbroker-broker1-other-uid-"))
        place.chmod(0o755)
        bus = Bus(place, any_user=True)
        daemon_home = place / "daemon"
        daemon_home.mkdir(mode=0o700)
        daemon = Daemon(self.binaries, daemon_home, self.provider.certificate, bus=True,
                        extra={"DBUS_SESSION_BUS_ADDRESS": bus.address})
        try:
            wait_for("the broker's name on the open bus", lambda: bus.has_owner(NAME), WAIT)
            bus.socket.chmod(0o666)
            other = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
                                    SYSTEM_PYTHON, str(HERE / "bus_client.py"), bus.address, "call",
                                    "getLinuxBrokerVersion", "other-uid", "{}"], capture_output=True, text=True, timeout=WAIT)
            expect(other.returncode == 0, f"the other uid's call failed at the bus: {other.stderr[-300:]}")
            answer = json.loads(json.loads(other.stdout)["answer"])
            error = answer.get("error") or {}
            expect("permission denied" in str(error.get("context")), f"another uid was answered: {shown(answer)}")
            expect("linuxBrokerVersion" not in answer, "another uid was answered")
            own = json.loads(json.loads(bus.client("call", "getLinuxBrokerVersion", "own-uid", "{}"))["answer"])
            expect("linuxBrokerVersion" in own, f"the broker's own user was refused: {shown(own)}")
            log = (daemon_home / "daemon.log").read_text()
            expect("refused a Broker1 call from another user" in log and "caller_uid=65534" in log,
                   "the refusal is not in the log")
        finally:
            daemon.stop()
            bus.stop()
            shutil.rmtree(place, ignore_errors=True)

    def no_token_in_the_logs(self) -> None:
        self.audit_barrier()
        logs = [self.directory / "daemon.log", self.directory / "second" / "daemon.log"]
        text = "".join(log.read_text(errors="replace") for log in logs if log.exists())
        expect(len(self.secrets) > 10, f"only {len(self.secrets)} tokens were collected to look for")
        leaked = sum(secret in text for secret in self.secrets)
        expect(leaked == 0, f"{leaked} of {len(self.secrets)} tokens appear in the daemon's logs")

    def status_says_it_owns_the_name(self) -> None:
        status = self.daemon.cli("status", "--json")
        expect(status.returncode == 0, f"status failed: {status.stderr}")
        bus = json.loads(status.stdout).get("bus", {})
        expect(bus.get("state") == "owner" and bus.get("name") == NAME, f"bus status {bus}")
        expect(bus.get("calls", 0) > 0, f"no calls counted: {bus}")

    def another_owner_is_left_alone(self) -> None:
        owner = self.bus.owner_pid(NAME)
        directory = self.directory / "second"
        directory.mkdir()
        second = Daemon(self.binaries, directory, self.provider.certificate, bus=True)
        try:
            wait_for("the second broker's bus status", lambda: json.loads(
                second.cli("status", "--json").stdout).get("bus", {}).get("state") != "starting", WAIT)
            status = json.loads(second.cli("status", "--json").stdout).get("bus", {})
            expect(status.get("state") == "taken", f"second broker's bus status {status}")
            expect(f"pid {owner}" in str(status.get("message")), f"the owner is not named: {status}")
            text = second.cli("status")
            expect("owned by" in text.stdout, f"tokenbroker status does not say who owns it:\n{text.stdout}")
            expect(self.bus.owner_pid(NAME) == owner, "the name changed hands")
        finally:
            expect(second.stop() == 0, "the second broker did not exit 0")

    def the_first_ping_starts_the_service(self) -> None:
        self.bus_owner_exits()
        state = self.directory / "activated"
        (self.bus.services / f"{NAME}.service").write_text(
            f"[D-BUS Service]\nName={NAME}\nExec={self.binaries / 'tokenbrokerd'} --socket {state}/sock "
            f"--state-directory {state}/state --entra-host 127.0.0.1 --idp-ca-file {self.provider.certificate}\n")
        subprocess.run(["busctl", f"--address={self.bus.address}", "call", "org.freedesktop.DBus",
                        "/org/freedesktop/DBus", "org.freedesktop.DBus", "ReloadConfig"], check=True)
        expect(not self.bus.has_owner(NAME), "the name is still owned")
        result = self.bus.ping(timeout=5)
        expect(result.returncode == 0, f"the first Ping did not start the broker: {result.stderr}")
        pid = self.bus.owner_pid(NAME)
        expect(pid is not None, "no owner after activation")
        answer = self.bus.call("getLinuxBrokerVersion", {})
        expect("linuxBrokerVersion" in answer, f"activated broker answered {shown(answer)}")
        os.kill(pid, signal.SIGTERM)
        wait_for("the activated broker to release the name", lambda: not self.bus.has_owner(NAME), WAIT)

    def bus_owner_exits(self) -> None:
        status = self.daemon.stop()
        expect(status == 0, f"the daemon exited {status}")
        wait_for("the name to be released", lambda: not self.bus.has_owner(NAME), WAIT)

    def provider_control(self, action: str, body: dict[str, Any]) -> None:
        import requests
        response = requests.post(f"{self.provider.base}/_test/{action}", json=body,
                                 verify=str(self.provider.certificate), timeout=10)
        response.raise_for_status()

    def run(self) -> int:
        self.check("ada signs in once; the broker imports MSAL's cache", self.user_signs_in_once)
        self.check("the broker owns the name; Ping and getLinuxBrokerVersion answer", self.ping_answers)
        self.check("an app of the same client gets a token from acquire_token_interactive with no UI, "
                   "then acquire_token_silent in the same process; the audit names the app's process",
                   self.same_client_gets_a_token_without_ui)
        self.check("in one app process, a token from the broker, then acquire_token_silent with a claims challenge: "
                   "the broker answers InteractionRequired (the provider's one fault used by it)",
                   self.claims_challenge_needs_interaction)
        self.check("a FOCI sibling app gets a token with no UI, through the family refresh token",
                   self.family_sibling_gets_a_token_through_the_family_refresh_token)
        self.check("an app outside the family is signed in through the broker's browser",
                   self.outsider_signs_in_through_the_broker_browser)
        self.check("a token over the bus is audited with caller_via=bus and the caller's pid and executable; "
                   "no token is in the daemon's log", self.a_bus_token_is_audited_with_its_caller)
        self.check("an account given at the root of the request, not in authParameters, names the account",
                   self.an_account_at_the_root_is_used)
        self.check("removeAccount on the bus: with clientId that app's tokens go, without it the account",
                   self.remove_account_over_the_bus)
        self.check("cancelInteractiveFlow ends a running sign-in with status 7 (UserCanceled)",
                   self.cancel_stops_a_running_sign_in)
        self.check("bad input on the bus (not JSON, wrong types, 1 MiB strings, unknown methods, PRT/PoP, a wrong "
                   "signature) gets Broker1 error objects", self.bad_input_gets_error_objects)
        self.check("a flood of 400 calls from one client: a second client is served meanwhile",
                   self.a_flood_from_one_client_leaves_others_served)
        self.check("tokenbroker status says it owns the name", self.status_says_it_owns_the_name)
        self.check("a second broker leaves the name to its owner and says who owns it",
                   self.another_owner_is_left_alone)
        self.check("after tokenbroker remove-account, a new process of each app that had a token gets none: "
                   "the broker answers InteractionRequired, its sign-in gives nothing",
                   self.removed_account_gets_nothing)
        self.check("after remove-account, an app that kept MSAL Python's cache still has the token it was handed "
                   "(its own cache; MSALRuntime's keyring entries for force_refresh), never from the broker",
                   self.an_app_keeps_what_it_was_handed)
        self.check("with the provider unreachable, a refresh over the bus is status 4; a cached token still serves",
                   self.an_unreachable_provider_is_status_4)
        self.check("a call from another uid on a bus open to all is refused by the broker and logged",
                   self.another_user_on_the_bus_is_refused)
        self.check("no token the suite saw is in the daemons' logs", self.no_token_in_the_logs)
        self.check("the broker releases the name when it stops; the first Ping starts it again (D-Bus activation)",
                   self.the_first_ping_starts_the_service)
        return self.summary()

    def stop(self) -> None:
        if self.daemon.process.poll() is None:
            self.daemon.process.kill()
        self.provider.stop()
        self.keyring.stop()
        self.bus.stop()


def main() -> int:
    return run_suite(__doc__ or "", "tokenbroker-broker1-",
                     ("DBUS_SESSION_BUS_ADDRESS", "DISPLAY", "WAYLAND_DISPLAY"), Broker1Test)


if __name__ == "__main__":
    sys.exit(main())
