#!/usr/bin/env python3
"""MSAL apps use tokenbroker unchanged, over Microsoft's Broker1 interface on the session bus: proven with the real
MSAL Python and pymsalruntime (MSALRuntime), each app a process of its own.

Usage (through Tests/broker1/run.sh, which gives it a network namespace of its own):

    python3 Tests/broker1/broker1_test.py --bin .build/debug [--keep]

What it starts, all for real: a private dbus-daemon (own configuration and service directory), a
gnome-keyring-daemon unlocked on it (MSALRuntime keeps its own account cache there), tokenbroker-test-idp with TLS
on 127.0.0.1:443, and tokenbrokerd joined to that bus. Every secret stays in the temporary directory; nothing prints
a token.

Each check prints `ok` or `FAIL` with the reason; the exit status is 1 when any failed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msal

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "interop"))
from interop_test import (  # noqa: E402
    ADA, ADAL_APP, FAMILY_APP, GRACE, MSAL_APP, REDIRECT, Checks, CountingSession, Daemon, Provider, expect,
    run_suite, wait_for)

SCOPE = "https://graph.microsoft.com/User.Read"
NAME = "com.microsoft.identity.broker1"
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's, with python3-dbus and python3-gi for bus_client.py


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


class Bus:
    """A private session bus: dbus-daemon with a configuration of its own."""

    def __init__(self, directory: Path) -> None:
        self.services = directory / "dbus-services"
        self.services.mkdir()
        self.socket = directory / "bus"
        config = directory / "bus.conf"
        config.write_text(f"""<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path={self.socket}</listen>
  <servicedir>{self.services}</servicedir>
  <policy context="default">
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
        text = request if isinstance(request, str) else json.dumps(request)
        return json.loads(self.client("call", method, correlation, "-", stdin=text))

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
        wait_for("the broker's name on the bus", lambda: self.bus.has_owner(NAME))

    # -- helpers ---------------------------------------------------------------------------------------------------

    def app(self, client_id: str, *actions: str, home: Path | None = None) -> list[dict[str, Any]]:
        """Runs msal_app.py as a process of its own, with the keyring, the bus and the provider's CA."""
        environment = dict(os.environ, HOME=str(home or self.directory), DBUS_SESSION_BUS_ADDRESS=self.bus.address)
        environment.pop("DISPLAY", None)  # the app has no display: the broker shows any UI
        result = subprocess.run([sys.executable, str(HERE / "msal_app.py"), client_id, self.provider.authority,
                                 str(self.provider.certificate), SCOPE, *actions],
                                capture_output=True, text=True, env=environment, timeout=180)
        expect(result.returncode == 0, f"the MSAL app failed ({result.returncode}): {result.stderr.strip()[-800:]}")
        lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
        expect(lines and lines[0].get("broker_enabled") is True,
               f"MSAL did not enable the broker: {result.stderr.strip()[-800:]}")
        return lines[1:]

    def browser_count(self) -> int:
        return len(self.browser_runs.read_text().splitlines()) if self.browser_runs.exists() else 0

    def expect_token(self, answer: dict[str, Any], what: str) -> None:
        expect(answer.get("token_sha256"), f"{what}: no token: {answer.get('error')} {answer.get('error_description')}")
        expect(answer.get("token_source") in ("broker", "cache"), f"{what}: token_source {answer.get('token_source')}")
        expect(not answer.get("has_refresh_token"), f"{what}: a refresh token reached the app")

    # -- checks ----------------------------------------------------------------------------------------------------

    def user_signs_in_once(self) -> None:
        """ada signs in once (MSAL Python's own code flow), and the broker imports MSAL's cache."""
        cache = msal.SerializableTokenCache()
        app = msal.PublicClientApplication(MSAL_APP, authority=self.provider.authority, token_cache=cache,
                                           http_client=CountingSession(self.provider.certificate),
                                           instance_discovery=False)
        code, verifier = self.provider.sign_in(MSAL_APP, ADA)
        result = app.acquire_token_by_authorization_code(code, scopes=[SCOPE], redirect_uri=REDIRECT,
                                                         data={"code_verifier": verifier})
        expect("access_token" in result, f"MSAL did not sign in: {result.get('error')}")
        path = self.directory / "signed-in.json"
        path.write_text(cache.serialize())
        path.chmod(0o600)
        imported = self.daemon.cli("import", str(path), "--json")
        expect(imported.returncode == 0, f"import failed: {imported.stderr}")

    def ping_answers(self) -> None:
        result = self.bus.ping()
        expect(result.returncode == 0, f"Ping failed: {result.stderr}")
        version = self.bus.call("getLinuxBrokerVersion", {"msalCppVersion": "1.28.0"})
        expect(version.get("linuxBrokerVersion") == "2.0.1", f"version answer {shown(version)}")

    def same_client_gets_a_token_without_ui(self) -> None:
        before = self.browser_count()
        interactive, silent = self.app(MSAL_APP, "interactive", "silent")
        self.expect_token(interactive, "acquire_token_interactive")
        expect(interactive["token_source"] == "broker", f"token_source {interactive['token_source']}")
        expect(interactive["username"] == ADA, f"signed in as {interactive['username']}")
        self.expect_token(silent, "acquire_token_silent in the same process")
        expect(self.browser_count() == before, "a browser was shown")

    def family_sibling_gets_a_token_through_the_family_refresh_token(self) -> None:
        before_browser, before_requests = self.browser_count(), self.provider.token_requests()
        (interactive,) = self.app(FAMILY_APP, "interactive")
        self.expect_token(interactive, "the family app")
        expect(interactive["username"] == ADA, f"signed in as {interactive['username']}")
        expect(self.browser_count() == before_browser, "a browser was shown")
        expect(self.provider.token_requests() > before_requests, "the family refresh token was not redeemed")

    def claims_challenge_needs_interaction(self) -> None:
        self.provider_control("fail-next", {"count": 1, "status": 400, "error": "interaction_required",
                                            "grantType": "refresh_token"})
        (claims,) = self.app(MSAL_APP, "claims")
        expect(not claims.get("token_sha256"), "a claims challenge was answered with a token")
        description = str(claims.get("error_description"))
        expect("InteractionRequired" in description or claims.get("result") is None,
               f"not interaction required: {claims}")

    def outsider_signs_in_through_the_broker_browser(self) -> None:
        before = self.browser_count()
        (interactive,) = self.app(ADAL_APP, "interactive")
        self.expect_token(interactive, "the app outside the family")
        expect(self.browser_count() == before + 1, "the broker's browser did not run once")
        expect(interactive["username"] == GRACE, f"signed in as {interactive['username']}")

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
                answer = self.bus.call("acquireTokenSilently", {"authParameters": {
                    "clientId": client, "authority": self.provider.authority, "requestedScopes": [SCOPE],
                    "username": user}})
                expect(answer.get("error", {}).get("status") == 2, f"{client} for {user}: {shown(answer)}")
        # A new app, with a keyring of its own (MSALRuntime keeps tokens it was given there), and a browser that
        # cannot sign anyone in: it gets no token.
        self.browser.write_text("#!/bin/sh\necho run >> '%s'\nexit 3\n" % self.browser_runs)
        fresh = self.directory / "fresh-home"
        fresh.mkdir()
        (interactive,) = self.app(FAMILY_APP, "interactive", home=fresh)
        expect(not interactive.get("token_sha256"), "an app got a token after the account was removed")

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
                second.cli("status", "--json").stdout).get("bus", {}).get("state") != "starting")
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
        wait_for("the activated broker to release the name", lambda: not self.bus.has_owner(NAME))

    def bus_owner_exits(self) -> None:
        status = self.daemon.stop()
        expect(status == 0, f"the daemon exited {status}")
        wait_for("the name to be released", lambda: not self.bus.has_owner(NAME))

    def provider_control(self, action: str, body: dict[str, Any]) -> None:
        import requests
        response = requests.post(f"{self.provider.base}/_test/{action}", json=body,
                                 verify=str(self.provider.certificate), timeout=10)
        response.raise_for_status()

    def run(self) -> int:
        self.check("ada signs in once; the broker imports MSAL's cache", self.user_signs_in_once)
        self.check("the broker owns the name; Ping and getLinuxBrokerVersion answer", self.ping_answers)
        self.check("an app of the same client gets a token from acquire_token_interactive with no UI, "
                   "then acquire_token_silent in the same process", self.same_client_gets_a_token_without_ui)
        self.check("a FOCI sibling app gets a token with no UI, through the family refresh token",
                   self.family_sibling_gets_a_token_through_the_family_refresh_token)
        self.check("a claims challenge comes back as interaction required", self.claims_challenge_needs_interaction)
        self.check("an app outside the family is signed in through the broker's browser",
                   self.outsider_signs_in_through_the_broker_browser)
        self.check("bad input on the bus (not JSON, wrong types, 1 MiB strings, unknown methods, PRT/PoP, a wrong "
                   "signature) gets Broker1 error objects", self.bad_input_gets_error_objects)
        self.check("a flood of 400 calls from one client: a second client is served meanwhile",
                   self.a_flood_from_one_client_leaves_others_served)
        self.check("tokenbroker status says it owns the name", self.status_says_it_owns_the_name)
        self.check("a second broker leaves the name to its owner and says who owns it",
                   self.another_owner_is_left_alone)
        self.check("after tokenbroker remove-account no app gets a token", self.removed_account_gets_nothing)
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
