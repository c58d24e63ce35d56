#!/usr/bin/env python3
"""ADAL and MSAL apps share sign-in through tokenbroker: proven with the real MSAL Python and ADAL Python.

Usage (through Tests/interop/run.sh, which gives it a network namespace of its own):

    python3 Tests/interop/interop_test.py --bin .build/debug [--keep]

What it starts, all for real: tokenbroker-test-idp serving HTTPS on 127.0.0.1:443 with a certificate it makes
(ADAL and MSAL refuse http authorities, and MSAL files its cache under the host name alone, without a port, so
the provider must be on the default port), tokenbrokerd trusting that certificate (--idp-ca-file), and the
`tokenbroker` CLI. MSAL Python and ADAL Python sign in through their own code paths (an authorization code the
provider issues after its sign-in form, redeemed by the library), write their own caches, and read the broker's
exports. Every secret stays in the temporary directory; nothing prints a token.

Each check prints `ok` or `FAIL` with the reason; the exit status is 1 when any failed.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.parse
from pathlib import Path
from typing import Any, Callable

import adal
import msal
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "wire"))
from tokenbroker_client import BrokerClient, BrokerError  # noqa: E402

TENANT = "5f0e6d3c-2b1a-4c9d-8e7f-6a5b4c3d2e1f"
MSAL_APP = "aaaaaaaa-0000-4000-8000-0000000000a1"  # an MSAL app, in the FOCI family
FAMILY_APP = "bbbbbbbb-0000-4000-8000-0000000000b2"  # another app of the family
ADAL_APP = "cccccccc-0000-4000-8000-0000000000c3"  # an ADAL-era app, outside the family
REDIRECT = "http://localhost/callback"
MANAGEMENT = "https://management.core.windows.net/"
GRAPH = "https://graph.microsoft.com"
VAULT = "https://vault.azure.net"
ADA = "ada@contoso.example"
GRACE = "grace@contoso.example"
# Times in ADAL's cache are local: the whole test runs in a zone that is not UTC, and neither is DST-free.
TIME_ZONE = "America/Los_Angeles"


class Fail(AssertionError):
    pass


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise Fail(message)


class Provider:
    """tokenbroker-test-idp with TLS on 127.0.0.1:443."""

    def __init__(self, binary: Path, directory: Path) -> None:
        self.certificate = directory / "idp-ca.pem"
        self.log = open(directory / "idp.log", "wb")
        self.process = subprocess.Popen(
            [str(binary), "--port", "443", "--tenant-id", TENANT, "--tls-certificate-out", str(self.certificate),
             "--family-client", MSAL_APP, "--family-client", FAMILY_APP, "--client", ADAL_APP],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log)
        try:
            assert self.process.stdout is not None
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"the test provider exited with status {self.process.wait()}")
            started = json.loads(line)
            self.authority: str = started["authority"]
            self.base: str = started["baseURL"]
            expect(self.authority == f"https://127.0.0.1/{TENANT}", f"unexpected authority {self.authority}")
        except BaseException:
            self.stop()
            raise

    def stats(self) -> dict[str, Any]:
        return requests.get(f"{self.base}/_test/stats", verify=str(self.certificate), timeout=10).json()

    def token_requests(self) -> int:
        """Requests to both token endpoints: v2 (MSAL, the broker) and v1 (ADAL)."""
        stats = self.stats()
        return int(stats["tokenRequests"]) + int(stats["v1TokenRequests"])

    def sign_in(self, client_id: str, username: str, scope: str = "openid profile offline_access") -> tuple[str, str]:
        """The provider's sign-in form, as a browser would fill it: returns an authorization code and its PKCE
        verifier."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        query = urllib.parse.urlencode({
            "client_id": client_id, "redirect_uri": REDIRECT, "response_type": "code", "scope": scope,
            "code_challenge": challenge, "code_challenge_method": "S256", "state": secrets.token_urlsafe(8)})
        url = f"{self.authority}/oauth2/v2.0/authorize?{query}"
        with requests.Session() as browser:
            browser.verify = str(self.certificate)
            browser.get(url, timeout=10).raise_for_status()
            answer = browser.post(url, data={"username": username}, allow_redirects=False, timeout=10)
        expect(answer.status_code == 302, f"the sign-in form answered {answer.status_code}")
        code = urllib.parse.parse_qs(urllib.parse.urlparse(answer.headers["Location"]).query)["code"][0]
        return code, verifier

    def browser_script(self, path: Path, username: str, runs: Path | None = None) -> Path:
        """A browser for the broker to launch: it opens the start page it is given, fills in the provider's sign-in
        form as `username` and follows the redirect back to the broker; each run adds a line to `runs`."""
        mark = f"echo run >> '{runs}'\n" if runs else ""
        path.write_text(f"""#!/bin/sh
{mark}authorize=$(curl --silent --show-error --fail --max-time 30 --output /dev/null --write-out '%{{redirect_url}}' "$1") \\
  || exit 1
exec curl --silent --show-error --fail-with-body --location --max-time 30 --output /dev/null \\
  --cacert '{self.certificate}' --data-urlencode 'username={username}' "$authorize"
""")
        path.chmod(0o700)
        return path

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()


def wait_for(what: str, condition: Callable[[], bool], seconds: float = 30) -> None:
    """Polls `condition` until it holds (each poll asks the process or the bus itself: the event, not a time)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise Fail(f"{what}: not within {seconds} s")
        time.sleep(0.05)


class Checks:
    """Named checks run one after another, each reported `ok` or `FAIL` with its reason: a failure never stops the
    next check, and the summary's status says whether any failed."""

    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, name: str, action: Callable[[], None]) -> None:
        try:
            action()
        except Exception as error:  # noqa: BLE001 - every failure is reported, then the next check runs
            self.failed += 1
            detail = str(error) if isinstance(error, Fail) else traceback.format_exc(limit=4)
            print(f"FAIL {name}\n     {detail}", flush=True)
        else:
            self.passed += 1
            print(f"ok   {name}", flush=True)

    def summary(self) -> int:
        print(f"\n{self.passed} passed, {self.failed} failed", flush=True)
        return 1 if self.failed else 0


def run_suite(description: str, prefix: str, scrub: tuple[str, ...],
              make: Callable[[Path, Path], Any]) -> int:
    """The main of a suite: `--bin` and `--keep`, a private temporary directory, the environment variables that
    would steer the clients removed, and the suite's `stop()` whatever happens. `make(binaries, directory)` returns
    the suite, with `run()` and `stop()`."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, help="the directory holding tokenbrokerd, tokenbroker and the provider")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    # requests lets these override a session's own `verify`: the provider's certificate must be the one trusted.
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", *scrub):
        os.environ.pop(name, None)
    directory = Path(tempfile.mkdtemp(prefix=prefix))
    directory.chmod(0o700)
    suite = None
    try:
        suite = make(Path(args.bin).resolve(), directory)
        return suite.run()
    finally:
        if suite is not None:
            suite.stop()
        if args.keep:
            print(f"kept {directory}")
        else:
            shutil.rmtree(directory, ignore_errors=True)


class Daemon:
    """tokenbrokerd in the temporary directory, trusting the provider's certificate."""

    def __init__(self, binaries: Path, directory: Path, certificate: Path, bus: bool = False,
                 extra: dict[str, str] | None = None, wait: bool = True) -> None:
        """`bus`: join the session bus of $DBUS_SESSION_BUS_ADDRESS (the Broker1 test's private one); never the
        user's own. `extra`: more environment. `wait`: return only once it answers."""
        self.socket = directory / "run" / "tokenbroker" / "broker.sock"
        self.socket.parent.parent.mkdir(mode=0o700, exist_ok=True)
        self.log = open(directory / "daemon.log", "ab")  # a restarted daemon adds to the first one's log
        self.cli_binary = binaries / "tokenbroker"
        # Without a session bus unless asked for: the daemon keeps its cache key on the bus's keyring, and must
        # never use the developer's own.
        self.environment = {k: v for k, v in os.environ.items()
                            if not k.startswith(("TOKENBROKER_", "XDG_")) and (bus or k != "DBUS_SESSION_BUS_ADDRESS")}
        self.environment.update({"HOME": str(directory), "TOKENBROKER_SOCKET": str(self.socket)}, **(extra or {}))
        self.process = subprocess.Popen(
            [str(binaries / "tokenbrokerd"), "--socket", str(self.socket), "--state-directory",
             str(directory / "state"), "--entra-host", "127.0.0.1", "--idp-ca-file", str(certificate), *([] if bus else ["--no-bus"])],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT, env=self.environment)
        if wait:
            self.wait_until_answering()

    def wait_until_answering(self) -> None:
        deadline = time.monotonic() + 30
        while True:
            try:
                with BrokerClient(str(self.socket), connect_timeout=2) as client:
                    client.negotiate()
                    return
            except (OSError, ConnectionError, BrokerError):
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.process.kill()
                    raise RuntimeError("the daemon did not start; see daemon.log")
                time.sleep(0.1)

    def cli(self, *arguments: str, input: bytes | None = None) -> subprocess.CompletedProcess[str]:
        """Runs `tokenbroker` against this daemon; stdout and stderr as text."""
        return subprocess.run([str(self.cli_binary), *arguments], input=input, capture_output=True,
                              env=self.environment, timeout=60, text=input is None)

    def client(self) -> BrokerClient:
        return BrokerClient(str(self.socket))

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(20)
        self.log.close()
        return status


class CountingSession(requests.Session):
    """MSAL's HTTP client, counting what MSAL sends."""

    def __init__(self, certificate: Path) -> None:
        super().__init__()
        self.verify = str(certificate)
        self.sent: list[str] = []

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        self.sent.append(f"{method} {urllib.parse.urlparse(url).path}")
        return super().request(method, url, *args, **kwargs)


class Interop(Checks):
    def __init__(self, binaries: Path, directory: Path) -> None:
        super().__init__()
        self.directory = directory
        self.provider = Provider(binaries / "tokenbroker-test-idp", directory)
        try:
            self.daemon = Daemon(binaries, directory, self.provider.certificate)
        except BaseException:
            self.provider.stop()
            raise
        # What the libraries wrote, kept for the later checks.
        self.msal_cache_file = directory / "msal_token_cache.json"
        self.adal_cache_file = directory / "accessTokens.json"
        self.msal_token = ""
        self.adal_token = ""

    # -- helpers ---------------------------------------------------------------------------------------------------

    def msal_app(self, client_id: str, cache: msal.SerializableTokenCache) -> tuple[msal.PublicClientApplication,
                                                                                    CountingSession]:
        session = CountingSession(self.provider.certificate)
        app = msal.PublicClientApplication(client_id, authority=self.provider.authority, token_cache=cache,
                                           http_client=session, instance_discovery=False)
        return app, session

    def adal_context(self, cache: adal.TokenCache) -> adal.AuthenticationContext:
        return adal.AuthenticationContext(self.provider.authority, validate_authority=False,
                                          verify_ssl=str(self.provider.certificate), cache=cache)

    def broker_export(self, format: str, client_id: str | None = None) -> Path:
        path = self.directory / f"export-{format}-{client_id or 'all'}-{secrets.token_hex(4)}.json"
        arguments = ["export", "--format", format, "--output", str(path)]
        if client_id:
            arguments += ["--client-id", client_id]
        result = self.daemon.cli(*arguments)
        expect(result.returncode == 0, f"tokenbroker export failed ({result.returncode}): {result.stderr}")
        expect(path.stat().st_mode & 0o777 == 0o600, f"the export is mode {path.stat().st_mode & 0o777:o}")
        return path

    def token(self, client_id: str, *request: str, account: str) -> dict[str, Any]:
        result = self.daemon.cli("token", "--client-id", client_id, "--authority", self.provider.authority,
                                 *request, "--account", account, "--json")
        expect(result.returncode == 0, f"tokenbroker token failed ({result.returncode}): {result.stderr}")
        return json.loads(result.stdout)

    def cache_snapshot(self) -> dict[str, Any]:
        """Every entry the broker holds, as an MSAL document (secrets included: compared, never printed)."""
        with self.daemon.client() as broker:
            return json.loads(broker.export_cache("msal")["data"])

    # -- MSAL ------------------------------------------------------------------------------------------------------

    def msal_cache_imports_and_is_served(self) -> None:
        cache = msal.SerializableTokenCache()
        app, _ = self.msal_app(MSAL_APP, cache)
        code, verifier = self.provider.sign_in(MSAL_APP, ADA)
        result = app.acquire_token_by_authorization_code(code, scopes=[f"{GRAPH}/User.Read"], redirect_uri=REDIRECT,
                                                         data={"code_verifier": verifier})
        expect("access_token" in result, f"MSAL did not sign in: {result.get('error')} {result.get('error_description')}")
        self.msal_token = result["access_token"]
        self.msal_cache_file.write_text(cache.serialize())
        self.msal_cache_file.chmod(0o600)

        imported = self.daemon.cli("import", str(self.msal_cache_file), "--json")
        expect(imported.returncode == 0, f"import failed: {imported.stderr}")
        report = json.loads(imported.stdout)
        expect(report["imported"]["accounts"] == 1 and report["imported"]["accessTokens"] == 1
               and report["imported"]["refreshTokens"] == 1 and report["imported"]["idTokens"] == 1,
               f"imported {report['imported']}")
        expect(report["skipped"] == [], f"skipped {report['skipped']}")

        before = self.provider.token_requests()
        served = self.token(MSAL_APP, "--scope", f"{GRAPH}/User.Read", account=ADA)
        expect(served["accessToken"] == self.msal_token, "the broker served another token than MSAL's")
        expect(served["tokenSource"] == "cache", f"tokenSource {served['tokenSource']}")
        expect(self.provider.token_requests() == before, "the broker called the provider for a cached token")
        account = served["account"]
        expect(account["username"] == ADA, f"username {account['username']}")
        msal_account = app.get_accounts()[0]
        expect(account["identifier"] == msal_account["home_account_id"], "the identifiers differ")

    def family_app_signs_in_silently_with_msals_refresh_token(self) -> None:
        before = self.provider.token_requests()
        served = self.token(FAMILY_APP, "--scope", f"{GRAPH}/Mail.Read", account=ADA)
        expect(served["tokenSource"] == "identityProvider", f"tokenSource {served['tokenSource']}")
        expect(self.provider.token_requests() == before + 1, "expected exactly one refresh at the provider")

    def broker_export_loads_into_msal(self) -> None:
        exported = self.broker_export("msal", FAMILY_APP)
        cache = msal.SerializableTokenCache()
        cache.deserialize(exported.read_text())
        app, session = self.msal_app(FAMILY_APP, cache)
        accounts = app.get_accounts(username=ADA)
        expect(len(accounts) == 1, f"MSAL found {len(accounts)} accounts named {ADA}")
        sent_before = len(session.sent)
        tokens_before = self.provider.token_requests()
        result = app.acquire_token_silent([f"{GRAPH}/Mail.Read"], account=accounts[0])
        expect(result is not None and "access_token" in result, f"acquire_token_silent: {result}")
        expect(result.get("token_source") == "cache", f"token_source {result.get('token_source')}")
        expect(session.sent[sent_before:] == [], f"MSAL sent {session.sent[sent_before:]}")
        expect(self.provider.token_requests() == tokens_before, "the provider issued a token")
        broker = self.token(FAMILY_APP, "--scope", f"{GRAPH}/Mail.Read", account=ADA)
        expect(result["access_token"] == broker["accessToken"], "MSAL found another token than the broker holds")

    def msal_round_trip_keeps_every_entry(self) -> None:
        original = json.loads(self.msal_cache_file.read_text())
        exported = json.loads(self.broker_export("msal").read_text())
        for section, entries in original.items():
            for key, entry in entries.items():
                expect(key in exported.get(section, {}), f"{section} entry missing from the export")
                kept = exported[section][key]
                for field, value in entry.items():
                    if field in ("family_id",):
                        continue  # the broker learned the family from the provider's foci answer
                    expect(kept.get(field) == value, f"{section}.{field} changed in the round trip")
        # MSAL reads the round trip and finds the same token for the same app.
        cache = msal.SerializableTokenCache()
        cache.deserialize(json.dumps(exported))
        app, session = self.msal_app(MSAL_APP, cache)
        result = app.acquire_token_silent([f"{GRAPH}/User.Read"], account=app.get_accounts(username=ADA)[0])
        expect(result is not None and result.get("access_token") == self.msal_token, "MSAL lost its token")

    # -- ADAL ------------------------------------------------------------------------------------------------------

    def adal_cache_imports_by_username(self) -> None:
        cache = adal.TokenCache()
        context = self.adal_context(cache)
        code, verifier = self.provider.sign_in(ADAL_APP, GRACE)
        result = context.acquire_token_with_authorization_code(code, REDIRECT, MANAGEMENT, ADAL_APP, None, verifier)
        self.adal_token = result["accessToken"]
        self.adal_cache_file.write_text(cache.serialize())
        self.adal_cache_file.chmod(0o600)
        written = json.loads(self.adal_cache_file.read_text())
        expect(isinstance(written, list) and len(written) == 1, "ADAL wrote an unexpected cache")
        expect(written[0]["userId"] == GRACE and written[0]["isMRRT"] is True, "ADAL's entry is no MRRT of grace")
        expect(" " in written[0]["expiresOn"] and "T" not in written[0]["expiresOn"], "expiresOn is not local")

        imported = self.daemon.cli("import", "--format", "adal", str(self.adal_cache_file), "--json")
        expect(imported.returncode == 0, f"import failed: {imported.stderr}")
        report = json.loads(imported.stdout)
        expect(report["imported"] == {"accounts": 1, "accessTokens": 1, "refreshTokens": 1, "idTokens": 0,
                                      "appMetadata": 0}, f"imported {report['imported']}")
        expect(report["skipped"] == [], f"skipped {report['skipped']}")

        found = self.daemon.cli("account", GRACE, "--json")
        expect(found.returncode == 0, f"tokenbroker account {GRACE}: {found.stderr}")
        account = json.loads(found.stdout)
        expect(account["username"] == GRACE, f"username {account['username']}")
        expect(account["identifier"] == f"{written[0]['oid']}.{TENANT}", f"identifier {account['identifier']}")
        listed = self.daemon.cli("accounts", "--json")
        expect(GRACE in [entry["username"] for entry in json.loads(listed.stdout)], "getAccounts misses grace")

        # The same account by its identifier, over the protocol: the lookup rule's first half.
        with self.daemon.client() as broker:
            by_id = broker.get_account(identifier=account["identifier"], username="someone-else@contoso.example")
            expect(by_id["account"]["username"] == GRACE, "the identifier did not win over the username")

    def adal_access_token_is_served_from_the_cache(self) -> None:
        before = self.provider.token_requests()
        served = self.token(ADAL_APP, "--resource", MANAGEMENT, account=GRACE)
        expect(served["accessToken"] == self.adal_token, "the broker served another token than ADAL's")
        expect(served["tokenSource"] == "cache", f"tokenSource {served['tokenSource']}")
        expect(self.provider.token_requests() == before, "the broker called the provider")

    def adal_refresh_token_serves_a_second_resource(self) -> None:
        before = self.provider.stats()
        served = self.token(ADAL_APP, "--resource", GRAPH, account=GRACE)
        after = self.provider.stats()
        expect(served["tokenSource"] == "identityProvider", f"tokenSource {served['tokenSource']}")
        expect(after["tokenRequests"] == before["tokenRequests"] + 1, "expected one call to the provider")
        expect(after["byGrant"]["refresh_token"] == before["byGrant"]["refresh_token"] + 1, "it was no refresh")
        expect(after["authorizeRequests"] == before["authorizeRequests"], "a sign-in page was asked for")
        claims = json.loads(base64.urlsafe_b64decode(served["accessToken"].split(".")[1] + "=="))
        expect(claims["aud"] == GRAPH, f"the token's audience is {claims['aud']}")
        expect(served["account"]["username"] == GRACE, "the token is for someone else")

    def broker_export_loads_into_adal(self) -> None:
        exported = self.broker_export("adal", ADAL_APP)
        cache = adal.TokenCache(state=exported.read_text())
        context = self.adal_context(cache)
        before = self.provider.token_requests()
        management = context.acquire_token(MANAGEMENT, GRACE, ADAL_APP)
        graph = context.acquire_token(GRAPH, GRACE, ADAL_APP)
        expect(self.provider.token_requests() == before, "ADAL called the provider for tokens it was given")
        expect(management["accessToken"] == self.adal_token, "ADAL found another management token")
        broker_graph = self.token(ADAL_APP, "--resource", GRAPH, account=GRACE)
        expect(graph["accessToken"] == broker_graph["accessToken"], "ADAL found another graph token")
        expect(graph["userId"] == GRACE and graph["_clientId"] == ADAL_APP, "ADAL's entry names someone else")

        # The multi-resource refresh token travels too: ADAL redeems it for a resource nobody asked for yet.
        vault = context.acquire_token(VAULT, GRACE, ADAL_APP)
        expect(self.provider.token_requests() == before + 1, "ADAL did not refresh at the provider")
        claims = json.loads(base64.urlsafe_b64decode(vault["accessToken"].split(".")[1] + "=="))
        expect(claims["aud"] == VAULT, f"the vault token's audience is {claims['aud']}")

    def adal_round_trip_keeps_the_entry(self) -> None:
        original = json.loads(self.adal_cache_file.read_text())[0]
        exported = json.loads(self.broker_export("adal", ADAL_APP).read_text())
        same = [entry for entry in exported if entry.get("resource") == MANAGEMENT]
        expect(len(same) == 1, f"{len(same)} management entries in the export")
        entry = same[0]
        for field in ("accessToken", "userId", "_clientId", "_authority", "oid", "tenantId", "tokenType", "isMRRT"):
            expect(entry[field] == original[field], f"{field} changed in the round trip")
        # The same instant, read the way ADAL reads it (local time; the broker drops the microseconds).
        from dateutil import parser
        delta = parser.parse(original["expiresOn"]) - parser.parse(entry["expiresOn"])
        expect(0 <= delta.total_seconds() < 1, f"expiresOn moved by {delta}")

    # -- hostile and broken files ----------------------------------------------------------------------------------

    def refused_files_change_nothing(self) -> None:
        before = self.cache_snapshot()
        good = json.loads(self.adal_cache_file.read_text())
        cases: list[tuple[str, str, bytes, int, str]] = [
            ("truncated ADAL", "adal", self.adal_cache_file.read_bytes()[:-40], 65, "not valid JSON"),
            ("truncated MSAL", "msal", self.msal_cache_file.read_bytes()[:-40], 65, "not valid JSON"),
            ("duplicate keys", "adal", b'[{"userId":"a@b","userId":"mallory@evil"}]', 65, "duplicate key"),
            ("an object, not a list", "adal", json.dumps({"entries": good}).encode(), 65, "JSON list"),
            ("a list, not MSAL", "msal", json.dumps(good).encode(), 65, "object of sections"),
            ("not UTF-8", "adal", b'[{"userId":"\xff\xfe"}]', 65, "UTF-8"),
        ]
        for name, format, data, status, message in cases:
            path = self.directory / "hostile.json"
            path.write_bytes(data)
            result = self.daemon.cli("import", "--format", format, str(path), input=None)
            expect(result.returncode == status, f"{name}: exit {result.returncode}, not {status}: {result.stderr}")
            expect(message in result.stderr, f"{name}: the error does not say '{message}': {result.stderr}")
        expect(self.cache_snapshot() == before, "a refused file changed the cache")

    def oversized_file_is_refused_unread(self) -> None:
        before = self.cache_snapshot()
        path = self.directory / "huge.json"
        with open(path, "wb") as huge:
            huge.write(b"[")
            chunk = json.dumps({"userId": "x", "padding": "p" * 1_000_000}).encode()
            for index in range(100):
                huge.write((b"," if index else b"") + chunk)
            huge.write(b"]")
        expect(path.stat().st_size > 100_000_000, "the file is not 100 MB")
        result = self.daemon.cli("import", "--format", "adal", str(path))
        expect(result.returncode == 65, f"exit {result.returncode}: {result.stderr}")
        expect("larger than" in result.stderr, f"the error does not say why: {result.stderr}")
        path.unlink()
        expect(self.cache_snapshot() == before, "the refused file changed the cache")

    def bad_entries_are_skipped_with_reasons(self) -> None:
        before = self.cache_snapshot()
        good = json.loads(self.adal_cache_file.read_text())[0]
        expired = dict(good, expiresOn="2001-02-03 04:05:06.000007", refreshToken=None)
        del expired["refreshToken"]
        entries: list[Any] = [
            expired,                                                         # [0] expired, nothing else in it
            dict(good, _authority="https://adfs.contoso.example/adfs"),      # [1]
            dict(good, _authority="http://login.evil.example/tenant"),        # [2]
            dict(good, userId=["not", "a", "string"]),                       # [3]
            dict(good, expiresOn=20201113),                                  # [4]
            "a string",                                                      # [5]
            dict(good, _authority="https://login.unknown.example"),          # [6]
        ]
        path = self.directory / "partly-bad.json"
        path.write_text(json.dumps(entries))
        result = self.daemon.cli("import", "--format", "adal", str(path), "--json")
        expect(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
        report = json.loads(result.stdout)
        reasons = {entry["entry"]: entry["reason"] for entry in report["skipped"]}
        expect(reasons == {
            "[0]": "the access token has expired",
            "[1]": "AD FS authorities are not supported",
            "[2]": "_authority is not an https URL",
            "[3]": "userId must be a string",
            "[4]": "expiresOn is not a time like 2020-11-13 14:44:42.492318",
            "[5]": "the entry is not a JSON object",
            "[6]": "_authority is not an Entra ID authority (https://host/tenant)",
        }, f"skipped {reasons}")
        expect(report["imported"] == {"accounts": 0, "accessTokens": 0, "refreshTokens": 0, "idTokens": 0,
                                      "appMetadata": 0}, f"imported {report['imported']}")
        after = self.cache_snapshot()
        for section, members in before.items():
            for key in members:
                expect(key in after.get(section, {}), f"an existing {section} entry was lost")

    def an_older_file_never_replaces_newer_tokens(self) -> None:
        # ADAL's original file holds grace's first refresh token; the broker has since rotated it.
        before = self.cache_snapshot()
        result = self.daemon.cli("import", "--format", "adal", str(self.adal_cache_file), "--json")
        expect(result.returncode == 0, f"exit {result.returncode}: {result.stderr}")
        report = json.loads(result.stdout)
        expect(report["imported"]["refreshTokens"] == 0, f"imported {report['imported']}")
        expect(any(entry["reason"] == "the broker holds a newer refresh token" for entry in report["skipped"]),
               f"skipped {report['skipped']}")
        after = self.cache_snapshot()
        expect(after["RefreshToken"] == before["RefreshToken"], "a refresh token changed")

    def run(self) -> int:
        self.check("MSAL Python's own cache imports, and the broker serves MSAL's token from it",
                   self.msal_cache_imports_and_is_served)
        self.check("MSAL -> broker -> MSAL keeps every entry and field", self.msal_round_trip_keeps_every_entry)
        self.check("another app of the family gets a token silently from MSAL's family refresh token",
                   self.family_app_signs_in_silently_with_msals_refresh_token)
        self.check("a broker export loads into MSAL Python: acquire_token_silent finds account and token offline",
                   self.broker_export_loads_into_msal)
        self.check("ADAL Python's own cache imports; the account is found by its username (ADAL's userId)",
                   self.adal_cache_imports_by_username)
        self.check("the broker serves ADAL's access token for its resource from the cache",
                   self.adal_access_token_is_served_from_the_cache)
        self.check("a second resource comes from ADAL's multi-resource refresh token, without a sign-in",
                   self.adal_refresh_token_serves_a_second_resource)
        self.check("a broker ADAL export loads into ADAL Python, whose MRRT lookup redeems it for a third resource",
                   self.broker_export_loads_into_adal)
        self.check("ADAL -> broker -> ADAL keeps the entry", self.adal_round_trip_keeps_the_entry)
        self.check("truncated, duplicate-key, mistyped and non-UTF-8 files are refused whole; nothing changes",
                   self.refused_files_change_nothing)
        self.check("a 100 MB file is refused; nothing changes", self.oversized_file_is_refused_unread)
        self.check("bad and expired entries are skipped with their reasons; nothing already held is lost",
                   self.bad_entries_are_skipped_with_reasons)
        self.check("re-importing ADAL's older file never replaces the broker's newer refresh token",
                   self.an_older_file_never_replaces_newer_tokens)
        status = self.daemon.stop()
        self.check("the daemon exits 0 on SIGTERM", lambda: expect(status == 0, f"exit status {status}"))
        return self.summary()

    def stop(self) -> None:
        if self.daemon.process.poll() is None:
            self.daemon.process.kill()
        self.provider.stop()


def main() -> int:
    os.environ["TZ"] = TIME_ZONE
    time.tzset()
    return run_suite(__doc__ or "", "tokenbroker-interop-", (), Interop)


if __name__ == "__main__":
    sys.exit(main())
