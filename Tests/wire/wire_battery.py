#!/usr/bin/env python3
"""Wire-protocol battery for tokenbrokerd, written from Protocol/README.md, Protocol/schemas/ and
Protocol/examples/ alone.

Usage: python3 Tests/wire/wire_battery.py --daemon /path/to/tokenbrokerd [--idp /path/to/tokenbroker-test-idp]
       [--keep] [--idle-timeout 2]

Starts the daemon in a fresh temporary directory (its own socket, state directory and a short connection idle
timeout), waits until it answers, runs the checks, stops it with SIGTERM (it must exit 0) and removes the
directory (kept with --keep). Prints "ok - ...", "FAIL - ..." or "skip - ..." per check and a final
"N passed, M failed[, K skipped]" line; exits 0 only when nothing failed.

Standard library only; success results and error responses are also checked against Protocol/schemas when
`jsonschema` and `referencing` (Tests/wire/requirements.txt) can be imported, else those schema checks are
skipped with a note.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree

from tokenbroker_client import (  # noqa: E402
    ERROR_CODES,
    MAX_REQUEST_FRAME,
    PROTOCOL_VERSION,
    BrokerClient,
    BrokerError,
    ConnectionClosed,
    encode_message,
    parse_line,
    private_directory_problem,
    socket_path,
)

PROTOCOL_DIR = HERE.parent.parent / "Protocol"
SCHEMA_BASE = "https://tokenbroker.invalid/protocol/1/"

# The protocol version Protocol/README.md describes (section 7): what the broker must say it speaks.
SPEC_VERSION = PROTOCOL_VERSION
# Connections one process may hold at once (section 13).
PER_PROCESS = 64
ALL_METHODS = (
    "getLinuxBrokerVersion", "getAccounts", "getAccount", "acquireTokenSilently", "acquireTokenInteractively",
    "completeInteractiveFlow", "cancelInteractiveFlow", "removeAccount", "importCache", "exportCache", "getStatus",
    "createGrant", "listGrants", "revokeGrant", "discardAccessToken", "getKeyStatus", "unlockCache", "moveCacheKey",
)
INTERACTIVE_METHODS = ("acquireTokenInteractively", "completeInteractiveFlow", "cancelInteractiveFlow")
NOTIFICATION_NAMES = ("webAuth/didStartLoad", "webAuth/didFinishLoad", "webAuth/didFail", "webAuth/didComplete",
                      "deviceCode/prompt")
PARAMS_REQUIRED = ("getAccount", "acquireTokenSilently", "acquireTokenInteractively", "completeInteractiveFlow",
                   "cancelInteractiveFlow", "removeAccount", "importCache", "createGrant", "revokeGrant",
                   "discardAccessToken", "moveCacheKey")
UPPER_UUID = re.compile(r"^[0-9A-F]{8}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{4}-[0-9A-F]{12}$")


class Skip(Exception):
    pass


class CheckFailed(AssertionError):
    pass


def fail(message: str) -> None:
    raise CheckFailed(message)


def short(value: Any, limit: int = 400) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def expect(condition: bool, message: str) -> None:
    if not condition:
        fail(message)


def same_id(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


# ---------------------------------------------------------------------------------------------------------------
# JSON Schemas
# ---------------------------------------------------------------------------------------------------------------

class Schemas:
    def __init__(self, directory: Path) -> None:
        self.available = False
        self.validators: dict[str, Any] = {}
        self.validated: dict[str, int] = {}
        try:
            from jsonschema import Draft202012Validator
            from referencing import Registry, Resource
            from referencing.jsonschema import DRAFT202012
        except ImportError as error:
            self.note = f"jsonschema/referencing not importable ({error}): schema checks are skipped"
            return
        registry = Registry()
        contents: dict[str, Any] = {}
        for path in sorted(directory.glob("*.json")):
            schema = json.loads(path.read_text(encoding="utf-8"))
            contents[path.name] = schema
            registry = registry.with_resource(schema["$id"], Resource.from_contents(
                schema, default_specification=DRAFT202012))
        for name, schema in contents.items():
            self.validators[name] = Draft202012Validator(schema, registry=registry)
        self.available = True
        self.note = f"schema checks use {len(self.validators)} schemas from {directory}"

    def validate(self, name: str, instance: Any) -> None:
        if not self.available:
            return
        validator = self.validators.get(name)
        if validator is None:
            fail(f"no schema {name}")
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        if errors:
            where = "/".join(str(p) for p in errors[0].absolute_path)
            fail(f"not valid against {name} at /{where}: {errors[0].message[:300]}")
        self.validated[name] = self.validated.get(name, 0) + 1


SCHEMAS: Schemas


# ---------------------------------------------------------------------------------------------------------------
# A client that checks what it gets against the schemas, and remembers every connection for the final sweep.
# ---------------------------------------------------------------------------------------------------------------

ALL_CLIENTS: list[BrokerClient] = []
METHODS_CALLED: set[str] = set()


class CheckedClient(BrokerClient):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # id (as JSON text) -> correlationId of every acquireTokenInteractively sent on this connection, for the
        # final sweep: a notification must be about a request of its own connection that is still unanswered
        self.interactive_requests: dict[str, str | None] = {}
        super().__init__(*args, **kwargs)
        ALL_CLIENTS.append(self)

    def send(self, method: str, params: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        pending = super().send(method, params, **kwargs)
        if method == "acquireTokenInteractively":
            self.interactive_requests[json.dumps(pending.id)] = pending.correlation_id
        return pending

    def call(self, method: str, params: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        METHODS_CALLED.add(method)
        try:
            result = super().call(method, params, **kwargs)
        except BrokerError as error:
            if error.raw is not None:
                SCHEMAS.validate("error-response.json", error.raw)
            raise
        SCHEMAS.validate(f"{method}.result.json", result)
        return result


class Context:
    def __init__(self, daemon: "Daemon") -> None:
        self.daemon = daemon
        self.socket = daemon.socket
        self.idle = daemon.idle_timeout

    def client(self, **kwargs: Any) -> CheckedClient:
        return CheckedClient(str(self.socket), **kwargs)


def expect_error_message(message: dict[str, Any], error_code: str, *, request_id: Any,
                         field: str | None = None, correlation_id: Any = ...) -> dict[str, Any]:
    """An error response with exactly this id, code number, errorCode (and field / data.correlationId)."""
    expect(isinstance(message, dict) and "error" in message,
           f"expected a {error_code} error, got {short(message)}")
    expect("id" in message and same_id(message["id"], request_id),
           f"expected id {request_id!r}, got {message.get('id')!r} in {short(message)}")
    error = message["error"]
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    expect(error.get("code") == ERROR_CODES[error_code] and data.get("errorCode") == error_code,
           f"expected code {ERROR_CODES[error_code]} / errorCode {error_code}, got code {error.get('code')} / "
           f"errorCode {data.get('errorCode')!r}: {short(message)}")
    if field is not None:
        expect(data.get("field") == field, f"expected data.field {field!r}, got {data.get('field')!r}: "
                                           f"{short(message)}")
    if correlation_id is not ...:
        expect(data.get("correlationId") == correlation_id,
               f"expected data.correlationId {correlation_id!r}, got {data.get('correlationId')!r}")
    SCHEMAS.validate("error-response.json", message)
    return message


def expect_broker_error(action: Callable[[], Any], error_code: str, *, field: str | None = None,
                        correlation_id: Any = ...) -> BrokerError:
    try:
        result = action()
    except BrokerError as error:
        assert error.raw is not None
        expect_error_message(error.raw, error_code, request_id=error.raw.get("id"), field=field,
                             correlation_id=correlation_id)
        return error
    fail(f"expected a {error_code} error, got the result {short(result)}")
    raise AssertionError  # unreachable


def raw_request(client: BrokerClient, line: bytes | str, request_id: Any, timeout: float = 10.0) -> dict[str, Any]:
    """Sends one raw line (newline added) and waits for the response carrying request_id."""
    data = line.encode() if isinstance(line, str) else line
    client.send_raw(data + b"\n")
    return client.wait_message(lambda m: "id" in m and same_id(m["id"], request_id)
                               and ("result" in m or "error" in m), timeout)


def raw_null_error(client: BrokerClient, line: bytes | str, timeout: float = 10.0) -> dict[str, Any]:
    """Sends one raw line and waits for the next error response with id null."""
    data = line.encode() if isinstance(line, str) else line
    before = len(client.connection_errors)
    client.send_raw(data + b"\n")
    error = client.wait_connection_error(timeout, before + 1)
    assert error.raw is not None
    return error.raw


def prove_usable(client: BrokerClient) -> None:
    """The same connection still answers a request, by id."""
    result = client.call("getLinuxBrokerVersion", {"protocolVersion": "1.0"})
    expect(result.get("protocolVersion") == SPEC_VERSION, f"unexpected version result {short(result)}")
    expect(not client.closed, "the connection closed after a request")


# ---------------------------------------------------------------------------------------------------------------
# Test data: an MSAL unified cache, as MSAL Python's SerializableTokenCache.serialize() writes it
# ---------------------------------------------------------------------------------------------------------------

NOW = int(time.time())
# The Entra-shaped test provider (Tests/TestIdentityProvider) stands in for login.microsoftonline.com: the cache's
# environment is its host:port, so requests that need a refresh reach it and nothing on the Internet. Set by
# configure_provider() before any check runs.
ENV = "127.0.0.1:0"
BASE = f"http://{ENV}"
TENANT = "7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a"
OTHER_TENANT = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CLIENT_C = "3f8e1d2c-5b4a-4c9d-8e7f-6a5b4c3d2e1f"  # in the family (FOCI), has refresh and id tokens
CLIENT_D = "9e8d7c6b-5a4f-4e3d-9c2b-1a0f9e8d7c6b"  # only an access token of Ada's, not in the family
# The provider's second family client: the battery imports nothing for it, so its tokens can only come through a
# family refresh token obtained by a sign-in of client C.
CLIENT_F = "bbbbbbbb-0000-4000-8000-00000000000b"
GRAPH_USER_READ = "https://graph.microsoft.com/User.Read"
GRAPH_MAIL_READ = "https://graph.microsoft.com/Mail.Read"
D_SCOPE = "api://wire-battery-d/Things.Read"
FAR_EXPIRY = NOW + 400 * 86400  # far in the future (the broker needs more than 300 s left)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def make_jwt(claims: dict[str, Any]) -> str:
    header = {"alg": "RS256", "typ": "JWT", "kid": "wire-battery"}
    return ".".join([b64url(json.dumps(header, separators=(",", ":")).encode()),
                     b64url(json.dumps(claims, separators=(",", ":")).encode()),
                     b64url(b"not-a-real-signature")])


class Person:
    def __init__(self, oid: str, username: str, name: str) -> None:
        self.oid = oid
        self.username = username
        self.name = name
        self.identifier = f"{oid}.{TENANT}"
        self.claims = {
            "aud": CLIENT_C, "iss": f"{BASE}/{TENANT}/v2.0", "iat": NOW - 60, "nbf": NOW - 60,
            "exp": NOW + 3600, "name": name, "oid": oid, "preferred_username": username,
            "sub": f"wire-sub-{oid[:8]}", "tid": TENANT, "ver": "2.0",
        }
        self.id_token = make_jwt(self.claims)
        tag = oid[:8]
        self.access_token = f"wire-battery-access-token-{tag}-{uuid.uuid4().hex}"
        self.refresh_token = f"wire-battery-refresh-token-{tag}-{uuid.uuid4().hex}"


ADA = Person("6a1d9c3b-2e4f-4a8b-9c7d-1e2f3a4b5c6d", "ada.wire@contoso.example", "Ada Wire")
GRACE = Person("4c2e8a1f-7b3d-4e9f-a6c5-3d2b1e0f9a8c", "grace.wire@contoso.example", "Grace Wire")
ADA_D_TOKEN = f"wire-battery-access-token-d-{uuid.uuid4().hex}"
ADA_AT_TARGET = f"{GRAPH_USER_READ} {GRAPH_MAIL_READ}"
ADA_EXT = FAR_EXPIRY + 3600


def at_key(home: str, env: str, client: str, realm: str, target: str) -> str:
    """MSAL's access-token key (as the import example's keys show it)."""
    return "-".join([home, env, "accesstoken", client, realm, target]).lower()


def at_entry(person_home: str, client: str, target: str, secret: str, cached_at: int, expires_on: int,
             extended: int | None = None) -> dict[str, Any]:
    entry = {"credential_type": "AccessToken", "secret": secret, "home_account_id": person_home,
             "environment": ENV, "client_id": client, "realm": TENANT, "target": target, "token_type": "Bearer",
             "cached_at": str(cached_at), "expires_on": str(expires_on)}
    if extended is not None:
        entry["extended_expires_on"] = str(extended)
    return entry


def account_entry(person: Person) -> dict[str, Any]:
    return {"home_account_id": person.identifier, "environment": ENV, "realm": TENANT,
            "local_account_id": person.oid, "username": person.username, "authority_type": "MSSTS",
            "account_source": "authorization_code"}


def id_token_entry(person: Person) -> dict[str, Any]:
    return {"credential_type": "IdToken", "secret": person.id_token, "home_account_id": person.identifier,
            "environment": ENV, "realm": TENANT, "client_id": CLIENT_C}


def rt_entry(person: Person, family: bool) -> dict[str, Any]:
    entry = {"credential_type": "RefreshToken", "secret": person.refresh_token,
             "home_account_id": person.identifier, "environment": ENV, "client_id": CLIENT_C,
             "target": GRAPH_USER_READ, "last_modification_time": str(NOW)}
    if family:
        entry["family_id"] = "1"
    return entry


EXPIRED_AT_TARGET = "https://graph.microsoft.com/Calendars.Read"
EXPIRED_AT_REBUILT_KEY = ""


def configure_provider(environment: str) -> None:
    """Points the test data at the provider listening on `environment` (host:port)."""
    global ENV, BASE, EXPIRED_AT_REBUILT_KEY
    ENV = environment
    BASE = f"http://{ENV}"
    EXPIRED_AT_REBUILT_KEY = at_key(ADA.identifier, ENV, CLIENT_C, TENANT, EXPIRED_AT_TARGET)


class Provider:
    """tokenbroker-test-idp on an ephemeral port: clients C and F in the FOCI family, client D outside it. It never
    issued the refresh tokens the battery imports, so it answers them invalid_grant."""

    def __init__(self, binary: str) -> None:
        self.process = subprocess.Popen(
            [binary, "--port", "0", "--tenant-id", TENANT, "--family-client", CLIENT_C, "--family-client", CLIENT_F,
             "--client", CLIENT_D],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the test provider {binary} exited with status {self.process.wait()}")
        self.port = json.loads(line)["port"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
UNKNOWN_SECTION = {"wire-battery-extra": {"kept": ["as", "it", "is"], "n": 1}}


def seed_document() -> dict[str, Any]:
    ada_at = at_entry(ADA.identifier, CLIENT_C, ADA_AT_TARGET, ADA.access_token, NOW, FAR_EXPIRY, ADA_EXT)
    ada_at["wire_battery_unknown_field"] = "kept"
    return {
        "AccessToken": {
            at_key(ADA.identifier, ENV, CLIENT_C, TENANT, ADA_AT_TARGET): ada_at,
            at_key(ADA.identifier, ENV, CLIENT_D, TENANT, D_SCOPE):
                at_entry(ADA.identifier, CLIENT_D, D_SCOPE, ADA_D_TOKEN, NOW, FAR_EXPIRY),
            at_key(GRACE.identifier, ENV, CLIENT_C, TENANT, GRAPH_USER_READ):
                at_entry(GRACE.identifier, CLIENT_C, GRAPH_USER_READ, GRACE.access_token, NOW, FAR_EXPIRY),
            # expired, under a key that is not MSAL's: skipped under the rebuilt key
            "stale-key-the-broker-must-rebuild":
                at_entry(ADA.identifier, CLIENT_C, EXPIRED_AT_TARGET, "wire-battery-expired", NOW - 7200,
                         NOW - 3600),
            # home_account_id missing: skipped under its key as in the document
            "broken-entry": {"credential_type": "AccessToken", "secret": "wire-battery-broken",
                             "environment": ENV, "client_id": CLIENT_C, "expires_on": str(FAR_EXPIRY)},
        },
        "RefreshToken": {
            f"{ADA.identifier}-{ENV}-refreshtoken-{CLIENT_C}--".lower(): rt_entry(ADA, family=False),
            f"{GRACE.identifier}-{ENV}-refreshtoken-{CLIENT_C}--".lower(): rt_entry(GRACE, family=True),
        },
        "IdToken": {
            f"{ADA.identifier}-{ENV}-idtoken-{CLIENT_C}-{TENANT}-".lower(): id_token_entry(ADA),
            f"{GRACE.identifier}-{ENV}-idtoken-{CLIENT_C}-{TENANT}-".lower(): id_token_entry(GRACE),
        },
        "Account": {
            f"{ADA.identifier}-{ENV}-{TENANT}".lower(): account_entry(ADA),
            f"{GRACE.identifier}-{ENV}-{TENANT}".lower(): account_entry(GRACE),
        },
        "AppMetadata": {
            f"appmetadata-{ENV}-{CLIENT_C}": {"client_id": CLIENT_C, "environment": ENV, "family_id": "1"},
        },
        "WireBatteryUnknownSection": UNKNOWN_SECTION,
    }


def ada_params(**extra: Any) -> dict[str, Any]:
    params = {"clientId": CLIENT_C, "authority": f"{BASE}/{TENANT}", "requestedScopes": [GRAPH_USER_READ],
              "account": {"identifier": ADA.identifier}}
    params.update(extra)
    return params


def strict_json(text: str) -> Any:
    return parse_line(text.encode("utf-8"))


def ordered_pairs(text: str) -> Any:
    return json.loads(text, object_pairs_hook=lambda pairs: pairs)


# ---------------------------------------------------------------------------------------------------------------
# The daemon
# ---------------------------------------------------------------------------------------------------------------

NO_TPM = "device:/nonexistent"  # a TPM TCTI that names no device: the TPM store is not available


class Daemon:
    def __init__(self, binary: str, root: Path, idle_timeout: float) -> None:
        self.binary = binary
        self.root = root
        self.idle_timeout = idle_timeout
        self.runtime = root / "run"
        self.socket_dir = self.runtime / "tokenbroker"
        self.socket = self.socket_dir / "broker.sock"
        self.state = root / "state"
        self.home = root / "home"
        self.log_path = root / "daemon.log"
        # The daemon's own environment gets a DISPLAY and a BROWSER that only records that it ran: section 10.1
        # says the broker takes the display only from params.environment, and runs a system-browser of its
        # configuration before its own BROWSER.
        self.own_browser = root / "daemon-own-browser.sh"
        self.own_browser_ran = root / "daemon-own-browser.ran"
        self.path = "<unset>"  # the daemon's own PATH
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def config_path(self) -> Path:
        """The user's configuration file, tokenbrokerd.conf (section 10.2): what names the programs the broker runs."""
        return self.home / ".config" / "tokenbroker" / "tokenbrokerd.conf"

    def configure(self, profiles: dict[str, list[str]] | None = None, system_browser: list[str] | None = None) -> None:
        """Writes the configuration file (the broker reads it when a sign-in starts)."""
        lines = [f"browser.{name} = {shlex.join(command)}" for name, command in (profiles or {}).items()]
        if system_browser:
            lines.append(f"system-browser = {shlex.join(system_browser)}")
        self.config_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        part = self.config_path.with_suffix(".part")
        part.write_text("\n".join(lines) + "\n")
        part.rename(self.config_path)

    def command(self) -> list[str]:
        return [self.binary, "--socket", str(self.socket), "--state-directory", str(self.state),
                "--connection-idle-timeout", f"{self.idle_timeout:g}", "--entra-host", ENV, "--no-bus"]

    def start(self) -> None:
        self.runtime.mkdir(mode=0o700)
        self.home.mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TOKENBROKER_", "XDG_", "DBUS_"))}
        # No session bus and no TPM (section 9.13): the cache key is kept by the last store of the default order, a
        # plain file, whatever the machine running the battery has; check_cache_key relies on it.
        env["TOKENBROKER_TPM_TCTI"] = NO_TPM
        env.update({"HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.runtime),
                    "XDG_STATE_HOME": str(self.home / ".local" / "state"),
                    "XDG_CONFIG_HOME": str(self.home / ".config"), "XDG_CACHE_HOME": str(self.home / ".cache")})
        self.own_browser.write_text(f"#!/bin/sh\necho \"$@\" >> {shlex.quote(str(self.own_browser_ran))}\n")
        self.own_browser.chmod(0o755)
        env.update({"DISPLAY": ":77", "BROWSER": str(self.own_browser)})
        self.path = env.get("PATH", "<unset>")
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=self.log,
                                        stderr=subprocess.STDOUT, env=env, cwd=str(self.root))

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the daemon exited with status {self.process.returncode}:\n{self.log_tail()}")
            try:
                with BrokerClient(str(self.socket), connect_timeout=2) as client:
                    client.call("getLinuxBrokerVersion", {"protocolVersion": "1.0"}, timeout=5)
                    return
            except (OSError, TimeoutError, ConnectionError, BrokerError) as error:
                last = error
                time.sleep(0.1)
        raise RuntimeError(f"the daemon did not answer within {timeout} s ({last}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                return None
        self.log.close()
        return self.process.returncode


# ---------------------------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------------------------

class Runner:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.passed = 0
        self.failed = 0
        self.skipped = 0

    def check(self, name: str, action: Callable[[Context], Any], *, destructive: bool = False) -> bool:
        ok = self._run(name, action)
        if destructive:
            self._run(f"after '{name}': a fresh connection is still served correctly", still_serving)
        return ok

    def _run(self, name: str, action: Callable[[Context], Any]) -> bool:
        try:
            action(self.ctx)
        except Skip as reason:
            self.skipped += 1
            print(f"skip - {name}: {reason}", flush=True)
            return True
        except CheckFailed as error:
            self.failed += 1
            print(f"FAIL - {name}: {error}", flush=True)
            return False
        except Exception as error:  # noqa: BLE001 - an unexpected exception is a failure of the check
            self.failed += 1
            where = traceback.extract_tb(error.__traceback__)[-1]
            print(f"FAIL - {name}: {type(error).__name__}: {error} (at line {where.lineno})", flush=True)
            return False
        self.passed += 1
        print(f"ok - {name}", flush=True)
        return True


def still_serving(ctx: Context) -> None:
    """A fresh connection gets correct answers: version, Ada's account, Ada's cached token."""
    with ctx.client() as client:
        version = client.get_linux_broker_version("1.0")
        expect(version["protocolVersion"] == SPEC_VERSION, f"version: {short(version)}")
        account = client.get_account(identifier=ADA.identifier)["account"]
        expect(account["identifier"] == ADA.identifier, f"getAccount: {short(account)}")
        token = client.acquire_token_silently(ada_params())["brokerTokenResponse"]
        expect(token["accessToken"] == ADA.access_token and token["tokenSource"] == "cache",
               "acquireTokenSilently did not return Ada's cached token")


# ===============================================================================================================
# (a) every method
# ===============================================================================================================

def check_socket_path_rule(ctx: Context) -> None:
    uid = os.getuid()
    yes = lambda path: True  # noqa: E731
    no = lambda path: False  # noqa: E731
    cases = [
        ({"TOKENBROKER_SOCKET": "/x/b.sock", "XDG_RUNTIME_DIR": "/r"}, yes, "/x/b.sock"),
        ({"TOKENBROKER_SOCKET": "", "XDG_RUNTIME_DIR": "/r"}, yes, "/r/tokenbroker/broker.sock"),
        ({"XDG_RUNTIME_DIR": "relative/dir"}, yes, f"/run/user/{uid}/tokenbroker/broker.sock"),
        ({}, yes, f"/run/user/{uid}/tokenbroker/broker.sock"),
    ]
    for env, is_private, wanted in cases:
        got = socket_path(env, is_private=is_private)
        expect(got == wanted, f"socket_path({env}) = {got!r}, wanted {wanted!r}")
    got = socket_path({}, is_private=no)
    expect(got == f"/tmp/tokenbroker-{uid}/broker.sock",
           f"without a private /run/user/{uid} socket_path gave {got!r}, not /tmp/tokenbroker-{uid}/broker.sock")
    expect(private_directory_problem(ctx.daemon.socket_dir) is None,
           f"the daemon's socket directory fails rule 5: {private_directory_problem(ctx.daemon.socket_dir)}")
    # and the rule finds the live daemon both ways
    via_xdg = socket_path({"XDG_RUNTIME_DIR": str(ctx.daemon.runtime)})
    expect(via_xdg == str(ctx.socket), f"XDG rule gave {via_xdg}")
    for env in ({"TOKENBROKER_SOCKET": str(ctx.socket)}, {"XDG_RUNTIME_DIR": str(ctx.daemon.runtime)}):
        with CheckedClient(socket_path(env)) as client:
            expect(client.peer is not None and client.peer[1] == os.getuid(), f"peer uid {client.peer}")
            expect(client.peer[0] == ctx.daemon.process.pid, f"peer pid {client.peer[0]} is not the daemon's "
                                                               f"{ctx.daemon.process.pid}")
            client.negotiate()


def check_socket_modes(ctx: Context) -> None:
    """Section 2.2: the broker creates the socket's directory with mode 0700 (it was missing here) and the
    socket with mode 0600."""
    directory = os.stat(ctx.daemon.socket_dir)
    sock = os.stat(ctx.socket)
    expect(directory.st_mode & 0o777 == 0o700, f"socket directory mode {directory.st_mode & 0o777:o}")
    expect(sock.st_mode & 0o777 == 0o600, f"socket mode {sock.st_mode & 0o777:o}")
    expect(directory.st_uid == os.getuid() and sock.st_uid == os.getuid(), "not owned by this user")


def check_crlf(ctx: Context) -> None:
    """Section 3: a carriage return before the line feed is tolerated as JSON whitespace."""
    with ctx.client() as client:
        message = raw_request(client, b'{"jsonrpc":"2.0","id":"crlf","method":"getLinuxBrokerVersion"}\r', "crlf")
        expect("result" in message, f"CRLF: {short(message)}")
        message = raw_request(client, b' \t{"jsonrpc":"2.0","id":"ws","method":"getStatus"} \t', "ws")
        expect("result" in message, f"surrounding whitespace: {short(message)}")


def check_version(ctx: Context) -> None:
    with ctx.client() as client:
        result = client.get_linux_broker_version("1.0", msal_cpp_version="wire-battery/1.0")
        expect(result["protocolVersion"].split(".")[0] == "1", f"protocolVersion {result['protocolVersion']}")
        expect(result['protocolVersion'] == SPEC_VERSION,
               f"protocolVersion {result['protocolVersion']} (spec is {SPEC_VERSION})")
        expect(isinstance(result["linuxBrokerVersion"], str) and result["linuxBrokerVersion"], "no version")
        expect_interactive_methods_listing(result["methods"])
        # params omitted, params null, a string id, a newer minor
        omitted = client.send("getLinuxBrokerVersion", request_id="version-2", omit_params=True).result(10)
        SCHEMAS.validate("getLinuxBrokerVersion.result.json", omitted)
        expect(omitted == result, f"params omitted gave {short(omitted)}")
        null = raw_request(client, '{"jsonrpc":"2.0","id":"n","method":"getLinuxBrokerVersion","params":null}',
                           "n")
        expect("result" in null and null["result"] == result, f"params null: {short(null)}")
        expect(client.get_linux_broker_version("1.9")["protocolVersion"] == SPEC_VERSION, "minor 1.9 refused")
        expect(client.get_linux_broker_version("1.0")["protocolVersion"] == SPEC_VERSION, "minor 1.0 refused")


def check_version_unsupported(ctx: Context) -> None:
    with ctx.client() as client:
        expect_broker_error(lambda: client.get_linux_broker_version("2.0"), "unsupported_protocol_version")
        expect_broker_error(lambda: client.get_linux_broker_version("0.9"), "unsupported_protocol_version")
        expect_broker_error(lambda: client.get_linux_broker_version("one"), "invalid_params",
                            field="params.protocolVersion")
        expect(not client.closed, "the connection closed after unsupported_protocol_version")
        prove_usable(client)


def check_import_seed(ctx: Context) -> None:
    document = json.dumps(seed_document())
    with ctx.client() as client:
        result = client.import_cache(document, "msal")
    expect(result["format"] == "msal", f"format {result['format']}")
    wanted = {"accounts": 2, "accessTokens": 3, "refreshTokens": 2, "idTokens": 2, "appMetadata": 1}
    expect(result["imported"] == wanted, f"imported {result['imported']}, wanted {wanted}")
    skipped = {entry["entry"]: entry["reason"] for entry in result["skipped"]}
    wanted_skipped = {"AccessToken/broken-entry", f"AccessToken/{EXPIRED_AT_REBUILT_KEY}"}
    expect(set(skipped) == wanted_skipped and len(result["skipped"]) == 2,
           f"skipped {sorted(skipped)}, wanted {sorted(wanted_skipped)}")
    for reason in skipped.values():
        expect(isinstance(reason, str) and reason and "wire-battery" not in reason, f"reason {reason!r}")


def check_get_accounts(ctx: Context) -> None:
    with ctx.client() as client:
        accounts = client.get_accounts()["accounts"]
        expect([a["identifier"] for a in accounts] == [ADA.identifier, GRACE.identifier],
               f"accounts {[a['identifier'] for a in accounts]}, wanted Ada then Grace (by username)")
        ada = accounts[0]
        wanted = {"identifier": ADA.identifier, "username": ADA.username, "environment": ENV, "realm": TENANT,
                  "localAccountId": ADA.oid}
        for key, value in wanted.items():
            expect(ada.get(key) == value, f"account.{key} = {ada.get(key)!r}, wanted {value!r}")
        claims = ada.get("accountClaims")
        expect(isinstance(claims, dict), "no accountClaims although the broker holds Ada's id token (8.1)")
        for key in ("preferred_username", "oid", "tid", "name"):
            expect(claims.get(key) == ADA.claims[key], f"accountClaims.{key} = {claims.get(key)!r}")
        omitted = client.send("getAccounts", omit_params=True).result(10)
        expect(omitted == {"accounts": accounts}, "getAccounts without params differs from with {}")
        null_member = client.call("getAccounts", {"clientId": None})
        expect(null_member == {"accounts": accounts}, "an optional member null is not treated as absent (4.2)")

        def ids(**filters: Any) -> list[str]:
            return [a["identifier"] for a in client.get_accounts(**filters)["accounts"]]
        expect(ids(client_id=CLIENT_C) == [ADA.identifier, GRACE.identifier], f"clientId C: {ids(client_id=CLIENT_C)}")
        expect(ids(client_id=CLIENT_C.upper()) == [ADA.identifier, GRACE.identifier], "clientId is case-insensitive")
        expect(ids(client_id=CLIENT_D) == [], f"clientId D (access token only, not in the family): "
                                              f"{ids(client_id=CLIENT_D)}, wanted []")
        expect(ids(authority=f"{BASE}/{TENANT}") == [ADA.identifier, GRACE.identifier], "authority tenant")
        expect(ids(authority=f"{BASE}/common") == [ADA.identifier, GRACE.identifier], "authority common")
        expect(ids(authority=f"{BASE}/{OTHER_TENANT}") == [], "another tenant should list nobody")
        expect(ids(authority="https://id.example.org/realms/main") == [], "another issuer should list nobody")
        expect_broker_error(lambda: client.get_accounts(authority="not an authority"), "invalid_params",
                            field="params.authority")


def check_account_name(ctx: Context) -> None:
    """Section 8.1: name is the display name "when the id token carried one". The seeded Account entries have
    no name field (like the Account entry of examples/import-cache.json); Ada's id token carries "name"."""
    with ctx.client() as client:
        for account in (client.get_accounts()["accounts"][0], client.get_account(identifier=ADA.identifier)["account"],
                        client.acquire_token_silently(ada_params())["brokerTokenResponse"]["account"]):
            expect(account.get("name") == ADA.name,
                   f"account.name = {account.get('name')!r}, but the id token the broker holds for "
                   f"{account['identifier']} carries name {ADA.name!r} (accountClaims.name = "
                   f"{(account.get('accountClaims') or {}).get('name')!r})")


def check_get_account(ctx: Context) -> None:
    with ctx.client() as client:
        by_id = client.get_account(identifier=ADA.identifier)["account"]
        expect(by_id["identifier"] == ADA.identifier and by_id["username"] == ADA.username, short(by_id))
        by_id_upper = client.get_account(identifier=ADA.identifier.upper())["account"]
        expect(by_id_upper["identifier"] == ADA.identifier, "identifier lookup is not case-insensitive")
        by_name = client.get_account(username=GRACE.username.upper())["account"]
        expect(by_name["identifier"] == GRACE.identifier, f"by username: {short(by_name)}")
        fallback = client.get_account(identifier=f"00000000-0000-0000-0000-000000000000.{TENANT}",
                                      username=ADA.username)["account"]
        expect(fallback["identifier"] == ADA.identifier, "identifier-then-username rule")
        both = client.get_account(identifier=GRACE.identifier, username=ADA.username)["account"]
        expect(both["identifier"] == GRACE.identifier, "the identifier must win over the username")
        correlation = str(uuid.uuid4())
        expect_broker_error(lambda: client.get_account(username="nobody@contoso.example", correlation_id=correlation),
                            "no_account", correlation_id=correlation)
        expect_broker_error(lambda: client.call("getAccount", {}), "invalid_params", field="params.identifier")
        expect_broker_error(lambda: client.call("getAccount", {"identifier": "", "username": ""}),
                            "invalid_params", field="params.identifier")


def check_acquire_token_silently(ctx: Context) -> None:
    with ctx.client() as client:
        correlation = str(uuid.uuid4())
        token = client.acquire_token_silently(ada_params(), correlation_id=correlation)["brokerTokenResponse"]
        expect(token["accessToken"] == ADA.access_token, "not the access token imported for Ada")
        expect(token["tokenSource"] == "cache", f"tokenSource {token['tokenSource']}")
        expect(token["correlationId"] == correlation, f"correlationId {token['correlationId']} != {correlation}")
        expect(token["accessTokenType"] == "Bearer", f"accessTokenType {token['accessTokenType']!r}")
        expect(token["expiresOn"] == FAR_EXPIRY * 1000, f"expiresOn {token['expiresOn']} != {FAR_EXPIRY * 1000}")
        expect(token.get("extendedExpiresOn") == ADA_EXT * 1000, f"extendedExpiresOn {token.get('extendedExpiresOn')}")
        expect({s.lower() for s in token["grantedScopes"]} == {GRAPH_USER_READ.lower(), GRAPH_MAIL_READ.lower()},
               f"grantedScopes {token['grantedScopes']}")
        expect(token.get("idToken") == ADA.id_token, "idToken is not Ada's id token held by the broker")
        expect(token["account"]["identifier"] == ADA.identifier and token["account"]["realm"] == TENANT,
               f"account {short(token['account'])}")

        generated = client.acquire_token_silently(ada_params(requestedScopes=[GRAPH_MAIL_READ],
                                                             minimumValiditySeconds=1800),
                                                  correlation_id=False)["brokerTokenResponse"]
        expect(bool(UPPER_UUID.match(generated["correlationId"])),
               f"generated correlationId {generated['correlationId']!r} is not an uppercase UUID (section 6)")
        expect(generated["accessToken"] == ADA.access_token, "minimumValiditySeconds 1800: wrong token")

        adal = client.acquire_token_silently({"clientId": CLIENT_C, "authority": f"{BASE}/common",
                                              "resource": "https://graph.microsoft.com",
                                              "username": ADA.username.upper(),
                                              "authorizationType": 1})["brokerTokenResponse"]
        expect(adal["accessToken"] == ADA.access_token and adal["tokenSource"] == "cache",
               "ADAL style (resource + username) did not find Ada's graph token")
        grace = client.acquire_token_silently(ada_params(account={"username": GRACE.username}))
        expect(grace["brokerTokenResponse"]["accessToken"] == GRACE.access_token, "Grace's token")
        other_client = client.acquire_token_silently({"clientId": CLIENT_D, "requestedScopes": [D_SCOPE],
                                                      "authority": f"{BASE}/common",
                                                      "account": {"identifier": ADA.identifier}})
        expect(other_client["brokerTokenResponse"]["accessToken"] == ADA_D_TOKEN, "client D's token")

        def error(params: dict[str, Any], code: str, field: str | None = None) -> None:
            correlation = str(uuid.uuid4())
            expect_broker_error(lambda: client.acquire_token_silently(params, correlation_id=correlation), code,
                                field=field, correlation_id=correlation)
        error(ada_params(forceRefresh=True), "interaction_required")
        error(ada_params(decodedClaims='{"access_token":{"nbf":{"essential":true,"value":"1"}}}'),
              "interaction_required")
        error(ada_params(requestedScopes=["https://storage.azure.com/user_impersonation"]), "interaction_required")
        error(ada_params(minimumValiditySeconds=500 * 86400), "interaction_required")
        error(ada_params(account={"username": "nobody@contoso.example"}), "no_account")
        error(ada_params(authority="https://login.microsoftonline.us/organizations",
                         requestedScopes=["https://graph.microsoft.us/User.Read"], account={}), "no_account")
        two = ada_params()
        del two["account"]
        error(two, "invalid_params", "params.authParameters.account")


def check_export_cache(ctx: Context) -> None:
    with ctx.client() as client:
        full = client.export_cache("msal")
        expect(full["format"] == "msal", f"format {full['format']}")
        document = strict_json(full["data"])
        for section in ("AccessToken", "RefreshToken", "IdToken", "Account", "AppMetadata"):
            expect(isinstance(document.get(section), dict), f"section {section} missing")
        counts = {"accounts": len(document["Account"]), "accessTokens": len(document["AccessToken"]),
                  "refreshTokens": len(document["RefreshToken"]), "idTokens": len(document["IdToken"]),
                  "appMetadata": len(document["AppMetadata"])}
        expect(full["counts"] == counts, f"counts {full['counts']} do not match the document {counts}")
        wanted = {"accounts": 2, "accessTokens": 3, "refreshTokens": 2, "idTokens": 2, "appMetadata": 1}
        expect(counts == wanted, f"the cache holds {counts}, wanted {wanted}")
        ada_entries = [e for e in document["AccessToken"].values() if e.get("secret") == ADA.access_token]
        expect(len(ada_entries) == 1, "Ada's access token is not in the export")
        entry = ada_entries[0]
        expect(entry.get("expires_on") == str(FAR_EXPIRY) and entry.get("cached_at") == str(NOW),
               f"times are not strings of epoch seconds: {entry.get('expires_on')!r} {entry.get('cached_at')!r}")
        expect(entry.get("wire_battery_unknown_field") == "kept", "an unknown entry field was not kept (9.6)")
        expect(document.get("WireBatteryUnknownSection") == UNKNOWN_SECTION, "the unknown section was not kept")
        expect(all(e.get("secret") != "wire-battery-expired" for e in document["AccessToken"].values()),
               "the expired access token was imported")
        pairs = ordered_pairs(full["data"])
        top = [k for k, _ in pairs]
        expect(top == sorted(top), f"sections not sorted by key: {top}")
        for name, section in pairs:
            if name in ("AccessToken", "RefreshToken", "IdToken", "Account", "AppMetadata"):
                keys = [k for k, _ in section]
                expect(keys == sorted(keys), f"{name} entries not sorted by key")

        only_d = client.export_cache("msal", client_id=CLIENT_D)
        wanted_d = {"accounts": 1, "accessTokens": 1, "refreshTokens": 0, "idTokens": 0, "appMetadata": 0}
        expect(only_d["counts"] == wanted_d, f"export for client D: {only_d['counts']}, wanted {wanted_d}")
        doc_d = strict_json(only_d["data"])
        expect([e["secret"] for e in doc_d["AccessToken"].values()] == [ADA_D_TOKEN], "client D's token")
        only_c = client.export_cache("msal", client_id=CLIENT_C.upper())
        wanted_c = {"accounts": 2, "accessTokens": 2, "refreshTokens": 2, "idTokens": 2, "appMetadata": 1}
        expect(only_c["counts"] == wanted_c, f"export for client C: {only_c['counts']}, wanted {wanted_c}")
        omitted = client.send("exportCache", omit_params=True).result(30)
        SCHEMAS.validate("exportCache.result.json", omitted)
        expect(omitted["counts"] == wanted and omitted["format"] == "msal", "params omitted: not the msal default")


def check_import_errors(ctx: Context) -> None:
    with ctx.client() as client:
        before = client.get_status()["cache"]
        for data in ("not json", "[]", '{"AccessToken":{},"AccessToken":{}}', '{"Account":{}} trailing',
                     '{"AccessToken":{"k":NaN}}'):
            expect_broker_error(lambda: client.import_cache(data, "msal"), "invalid_cache")
        for data in ('{"entries":[]}', "[", '[{"userId":"a","userId":"b"}]'):
            expect_broker_error(lambda: client.import_cache(data, "adal"), "invalid_cache")
        empty_adal = client.import_cache("[]", "adal")
        expect(empty_adal["format"] == "adal" and all(v == 0 for v in empty_adal["imported"].values()),
               f"an empty ADAL list: {short(empty_adal)}")
        not_entries = client.import_cache('[1, "two", null]', "adal")
        expect([s["entry"] for s in not_entries["skipped"]] == ["[0]", "[1]", "[2]"],
               f"ADAL list elements that are not entries: {short(not_entries)}")
        empty = client.import_cache("{}", None)
        expect(empty["format"] == "msal" and all(v == 0 for v in empty["imported"].values()),
               f"an empty document with format omitted: {short(empty)}")
        section_not_object = client.import_cache('{"IdToken":[]}', "msal")
        expect([s["entry"] for s in section_not_object["skipped"]] == ["IdToken"],
               f"a known section that is not an object: {short(section_not_object)}")
        expect(client.get_status()["cache"] == before, "a refused import changed the cache")
        adal = client.export_cache("adal")
        SCHEMAS.validate("exportCache.result.json", adal)
        listed = strict_json(adal["data"])
        expect(isinstance(listed, list) and adal["format"] == "adal", "an ADAL export is not a JSON list")
        expect(adal["counts"]["accessTokens"] == sum(1 for e in listed if e.get("accessToken")),
               f"ADAL export counts {adal['counts']} do not match its {len(listed)} entries")
        expect_broker_error(lambda: client.export_cache("ldap"), "invalid_params")


def check_remove_account(ctx: Context) -> None:
    with ctx.client() as client:
        result = client.remove_account(identifier=GRACE.identifier, client_id=CLIENT_C.upper())
        expect(result == {"removedCredentials": 2, "accountRemoved": False},
               f"signing Grace out of client C: {result}, wanted 2 (access + id token; her family refresh "
               f"token stays) and accountRemoved false")
        still = [a["identifier"] for a in client.get_accounts(client_id=CLIENT_C)["accounts"]]
        expect(GRACE.identifier in still, "Grace (family refresh token) is no longer listed for client C")
        result = client.remove_account(username=GRACE.username.upper())
        expect(result == {"removedCredentials": 1, "accountRemoved": True},
               f"removing Grace: {result}, wanted 1 (the family refresh token) and accountRemoved true")
        error = expect_broker_error(lambda: client.remove_account(username=GRACE.username), "no_account")
        expect(error.raw is not None and isinstance(error.raw["id"], int), "no_account without the request id")
        expect_broker_error(lambda: client.call("removeAccount", {"account": {}}), "invalid_params",
                            field="params.account")
        accounts = [a["identifier"] for a in client.get_accounts()["accounts"]]
        expect(accounts == [ADA.identifier], f"after removal: {accounts}")
        alone = client.acquire_token_silently({"clientId": CLIENT_C, "requestedScopes": [GRAPH_USER_READ],
                                               "authority": f"{BASE}/{TENANT}"})
        expect(alone["brokerTokenResponse"]["accessToken"] == ADA.access_token,
               "with one person signed in, no selector should pick Ada")


def check_grants(ctx: Context) -> None:
    """Section 9.9: a grant of the managed-identity endpoint serves its resource over HTTP, is listed without its
    secret, and a revoked one serves nothing."""
    import http.client
    with ctx.client() as client:
        created = client.call("createGrant", {"clientId": CLIENT_C, "authority": f"{BASE}/{TENANT}",
                                              "resources": ["https://graph.microsoft.com"],
                                              "account": {"identifier": ADA.identifier}, "label": "wire battery",
                                              "lifetimeSeconds": 600})
        grant, secret = created["grant"], created["identityHeader"]
        expect(grant["endpoint"].startswith("http://127.0.0.1:") and grant["endpoint"].endswith("/msi/token"),
               f"endpoint {grant['endpoint']}")
        expect(grant["accountIdentifier"] == ADA.identifier and grant["listening"] is True, f"grant {short(grant)}")
        host, port = grant["endpoint"][len("http://"):].split("/")[0].split(":")

        def get(header: str | None) -> tuple[int, dict[str, Any]]:
            connection = http.client.HTTPConnection(host, int(port), timeout=10)
            query = urllib.parse.urlencode({"api-version": "2019-08-01", "resource": "https://graph.microsoft.com"})
            connection.request("GET", f"/msi/token?{query}", headers={"X-IDENTITY-HEADER": header} if header else {})
            answer = connection.getresponse()
            body = json.loads(answer.read())
            connection.close()
            return answer.status, body

        status, body = get(secret)
        expect(status == 200 and body.get("access_token") == ADA.access_token, f"the endpoint answered {status}")
        expect(body.get("expires_on") == str(FAR_EXPIRY) and body.get("token_type") == "Bearer",
               f"expires_on {body.get('expires_on')}")
        status, body = get(None)
        expect(status == 401 and body.get("statusCode") == 401 and "message" in body, f"no secret: {status}")
        listed = client.call("listGrants")
        expect([g["id"] for g in listed["grants"]] == [grant["id"]], f"listGrants {short(listed)}")
        expect(secret not in json.dumps(listed), "listGrants shows the secret")
        expect(listed["grants"][0]["tokensServed"] == 1, f"tokensServed {listed['grants'][0]['tokensServed']}")
        revoked = client.call("revokeGrant", {"grant": "wire battery"})
        expect(revoked["grant"]["id"] == grant["id"], f"revokeGrant {short(revoked)}")
        try:
            status, _ = get(secret)
        except ConnectionRefusedError:
            status = 0  # the listener closed with its last grant
        expect(status in (0, 401), f"a revoked grant's secret: {status}")
        expect(client.call("listGrants") == {"grants": []}, "a revoked grant is still listed")
        expect_broker_error(lambda: client.call("revokeGrant", {"grant": grant["id"]}), "invalid_params",
                            field="params.grant")
        expect_broker_error(lambda: client.call("createGrant", {"clientId": CLIENT_C}), "invalid_params",
                            field="params.resources")
        expect_broker_error(lambda: client.call("createGrant", {"clientId": CLIENT_C, "resources": ["r"],
                                                                "listen": "0.0.0.0:0"}),
                            "invalid_params", field="params.listen")
        expect(client.call("discardAccessToken", {"accessToken": "not a token the broker holds"}) ==
               {"discarded": False}, "discardAccessToken of an unknown token")
        expect_broker_error(lambda: client.call("discardAccessToken", {"accessToken": ""}), "invalid_params",
                            field="params.accessToken")


def check_large_export(ctx: Context) -> None:
    """An export over 1 MiB (responses may be up to 64 MiB), imported in parts under the request limit."""
    bulk = Person("b0b0b0b0-1111-4222-8333-444455556666", "zz.bulk@contoso.example", "Bulk Wire")
    per_part, parts = 700, 3
    with ctx.client() as client:
        baseline = client.export_cache("msal")["counts"]
        for part in range(parts):
            entries = {}
            for i in range(per_part):
                target = f"api://wire-bulk-{part}-{i}/Read.All"
                entries[f"k{part}-{i}"] = at_entry(bulk.identifier, CLIENT_C, target, "s" * 300 + f"{part}-{i}",
                                                   NOW, FAR_EXPIRY)
            document: dict[str, Any] = {"AccessToken": entries}
            if part == 0:
                document["Account"] = {"a": account_entry(bulk)}
            text = json.dumps(document)
            size = len(encode_message({"jsonrpc": "2.0", "id": 1, "method": "importCache",
                                       "params": {"data": text, "correlationId": str(uuid.uuid4())}}))
            expect(size < MAX_REQUEST_FRAME, f"part {part} is {size} bytes")
            result = client.import_cache(text, "msal")
            expect(result["imported"]["accessTokens"] == per_part and result["skipped"] == [],
                   f"part {part}: {short(result)}")
        export = client.export_cache("msal")
        size = len(export["data"].encode())
        expect(size > (1 << 20), f"the export is only {size} bytes")
        wanted = dict(baseline, accounts=baseline["accounts"] + 1,
                      accessTokens=baseline["accessTokens"] + per_part * parts)
        expect(export["counts"] == wanted, f"counts {export['counts']}, wanted {wanted}")
        expect(len(strict_json(export["data"])["AccessToken"]) == wanted["accessTokens"], "document size")
        removed = client.remove_account(identifier=bulk.identifier)
        expect(removed == {"removedCredentials": per_part * parts, "accountRemoved": True}, f"removed {removed}")
        expect(client.export_cache("msal")["counts"] == baseline, "the cache is not back to its former state")


def check_status(ctx: Context) -> None:
    with ctx.client() as client:
        version = client.get_linux_broker_version()
        export = client.export_cache()
        status = client.get_status()
        expect(status["version"] == version["linuxBrokerVersion"], "version differs from linuxBrokerVersion")
        expect(status["protocolVersion"] == SPEC_VERSION, f"protocolVersion {status['protocolVersion']}")
        expect(status["pid"] == ctx.daemon.process.pid, f"pid {status['pid']} != {ctx.daemon.process.pid}")
        # section 9.8: a healthy store says so (nothing damaged on disk, no failed write, the database found)
        expect(status.get("store") == {"damagedEntries": 0, "failedWrites": 0, "databaseWasMissing": False},
               f"store {status.get('store')}")
        expect(status["socketPath"] == str(ctx.socket), f"socketPath {status['socketPath']!r}")
        expect(os.path.realpath(status["stateDirectory"]) == os.path.realpath(ctx.daemon.state),
               f"stateDirectory {status['stateDirectory']!r}, the daemon was started with {ctx.daemon.state}")
        expect(status["activation"] == "bound", f"activation {status['activation']!r} (Appendix A: bound)")
        expect(status["cache"] == export["counts"], f"cache {status['cache']} != export counts {export['counts']}")
        expect(abs(status["startedAt"] / 1000 + status["uptimeSeconds"] - time.time()) < 5,
               "startedAt + uptimeSeconds is not now")
        expect(status["connections"]["open"] >= 1, f"connections {status['connections']}")
        expect(status["connections"]["accepted"] >= status["connections"]["open"], "accepted < open")
        expect(status["requests"]["inFlight"] == 0, f"inFlight {status['requests']['inFlight']} while idle")
        expect(len(status["recentErrors"]) <= 20, f"{len(status['recentErrors'])} recent errors")
        ats = [e["at"] for e in status["recentErrors"]]
        expect(ats == sorted(ats), "recentErrors are not newest last")
        # one failing request moves the counters by exactly one and is listed last
        correlation = str(uuid.uuid4())
        expect_broker_error(lambda: client.get_account(username="status-probe@contoso.example",
                                                       correlation_id=correlation), "no_account")
        after = client.get_status()
        expect(after["requests"]["failed"] == status["requests"]["failed"] + 1,
               f"failed {status['requests']['failed']} -> {after['requests']['failed']}")
        last = after["recentErrors"][-1]
        expect(last["method"] == "getAccount" and last["errorCode"] == "no_account",
               f"last recent error {short(last)}")
        expect(last.get("correlationId") == correlation, f"recentErrors correlationId {last.get('correlationId')!r}")
        expect(ADA.access_token not in json.dumps(after), "a token in getStatus")


KEY_STORES = ("secret-service", "tpm", "passphrase", "file")


def expect_key_status(status: dict[str, Any], *, store: str, chosen: bool, what: str) -> None:
    """Section 9.13: an open cache whose key is in `store`: locked false, no problem or hint; a warning exactly while
    the key is a plain file; the order of stores without the passphrase (the battery's configuration sets none)."""
    expect(status.get("store") == store and status.get("chosen") is chosen and status.get("locked") is False,
           f"{what}: store {status.get('store')!r}, chosen {status.get('chosen')!r}, locked {status.get('locked')!r}, "
           f"wanted {store!r}, {chosen}, False: {short(status)}")
    expect(status.get("order") == ["secret-service", "tpm", "file"], f"{what}: order {status.get('order')}")
    expect(isinstance(status.get("protection"), str) and status["protection"], f"{what}: no protection")
    expect("problem" not in status and "hint" not in status, f"{what}: problem or hint on an open cache")
    expect(("warning" in status) == (store == "file"), f"{what}: warning {status.get('warning')!r} for {store}")


def check_cache_key(ctx: Context) -> None:
    """Sections 9.13-9.15: a daemon without a session bus or a TPM keeps its key in a plain file, says so (and warns),
    and getStatus says the same. moveCacheKey refuses an unknown store (params.to) and the passphrase store without
    a passphrase (params.passphrase); a store this machine does not have is internal_error, the cache still open
    and the key where it was; a move to the file store marks it chosen. unlockCache on an open cache changes
    nothing. No answer, error or log line repeats a passphrase sent. The passphrase store itself is left to
    Tests/keys: after a restart it would lock the battery's own cache."""
    sent: list[str] = []

    def passphrase(what: str) -> str:
        sent.append(f"wire-battery {what} passphrase {uuid.uuid4()}")
        return sent[-1]

    with ctx.client() as client:
        status = client.get_key_status()
        expect_key_status(status, store="file", chosen=False, what="getKeyStatus of a fresh daemon")
        omitted = client.send("getKeyStatus", request_id="key-omitted", omit_params=True).result(10)
        SCHEMAS.validate("getKeyStatus.result.json", omitted)
        expect(omitted == status, f"getKeyStatus with params omitted: {short(omitted)}")
        null = raw_request(client, '{"jsonrpc":"2.0","id":"key-null","method":"getKeyStatus","params":null}',
                           "key-null")
        expect(null.get("result") == status, f"getKeyStatus with params null: {short(null)}")
        expect(client.get_status().get("keyStore") == status, "getStatus.keyStore differs from getKeyStatus")

        expect_broker_error(lambda: client.move_cache_key("nowhere"), "invalid_params", field="params.to")
        expect_broker_error(lambda: client.move_cache_key("File", passphrase=passphrase("unknown store")),
                            "invalid_params", field="params.to")
        expect_broker_error(lambda: client.move_cache_key("passphrase"), "invalid_params",
                            field="params.passphrase")
        expect_broker_error(lambda: client.move_cache_key("passphrase", passphrase=""), "invalid_params",
                            field="params.passphrase")
        expect_broker_error(lambda: client.call("moveCacheKey", {"to": "file", "passphrase": 7}), "invalid_params",
                            field="params.passphrase")
        expect_broker_error(lambda: client.call("unlockCache", {"passphrase": ["x"]}), "invalid_params",
                            field="params.passphrase")
        # stores this daemon does not have: the cache stays open, the key where it was
        for store in ("secret-service", "tpm"):
            expect_broker_error(lambda: client.move_cache_key(store, passphrase=passphrase(store)), "internal_error")
            expect(client.get_key_status() == status, f"after a failed move to {store}: {short(client.get_key_status())}")
            expect(client.get_account(identifier=ADA.identifier)["account"]["identifier"] == ADA.identifier,
                   f"the cache is not served after a failed move to {store}")

        # an open cache: unlockCache changes nothing, whatever passphrase it carries
        expect(client.unlock_cache() == status, "unlockCache without a passphrase changed the status")
        expect(client.unlock_cache(passphrase("unlock")) == status, "unlockCache with a passphrase changed the status")
        unlocked = client.send("unlockCache", request_id="unlock-omitted", omit_params=True).result(10)
        SCHEMAS.validate("unlockCache.result.json", unlocked)
        expect(unlocked == status, f"unlockCache with params omitted: {short(unlocked)}")

        # the file store, chosen: the key stays the same, so every token is still served
        moved = client.move_cache_key("file", passphrase=passphrase("file"))
        expect_key_status(moved, store="file", chosen=True, what="moveCacheKey to file")
        expect(client.get_key_status() == moved, "getKeyStatus after the move differs from its result")
        expect(client.get_status().get("keyStore") == moved, "getStatus.keyStore after the move differs")
        token = client.acquire_token_silently(ada_params())["brokerTokenResponse"]
        expect(token["accessToken"] == ADA.access_token, "Ada's cached token is not served after the move")
        expect(ADA.access_token not in json.dumps(client.get_status()), "a token in getStatus")

        answers = json.dumps(client.received)
    leaked = [text for text in sent if text in answers]
    expect(not leaked, f"{len(leaked)} of {len(sent)} passphrases sent came back in an answer")
    log = ctx.daemon.log_path.read_text(errors="replace")
    logged = [text for text in sent if text in log]
    expect(not logged, f"{len(logged)} of {len(sent)} passphrases sent are in the daemon's log")


# ---------------------------------------------------------------------------------------------------------------
# Interactive methods: what the current release does. Update this one function when the sign-in release lands.
# ---------------------------------------------------------------------------------------------------------------

INTERACTIVE_AVAILABLE = True  # the sign-in release serves them (section 10)


def expect_interactive_methods_listing(methods: list[str]) -> None:
    """getLinuxBrokerVersion.methods lists every method the broker serves."""
    served = [m for m in ALL_METHODS if INTERACTIVE_AVAILABLE or m not in INTERACTIVE_METHODS]
    expect(sorted(methods) == sorted(served), f"methods {methods}, wanted {served}")


def expect_interactive_params_checked(ctx: Context) -> None:
    """Section 10: the interactive methods are listed; shape errors are invalid_params naming the field;
    completeInteractiveFlow and cancelInteractiveFlow for a flow that does not run answer accepted false; a
    failure found before any notification gets only the error response."""
    with ctx.client() as client:
        expect_interactive_methods_listing(client.get_linux_broker_version()["methods"])
        correlation = str(uuid.uuid4())
        auth = {"clientId": CLIENT_C, "requestedScopes": [GRAPH_USER_READ]}
        expect(client.complete_interactive_flow(
            correlation, "https://login.microsoftonline.com/common/oauth2/nativeclient?code=x&state=y")
            == {"accepted": False}, "completeInteractiveFlow of no flow was accepted")
        expect(client.cancel_interactive_flow(correlation) == {"accepted": False},
               "cancelInteractiveFlow of no flow was accepted")
        shape_errors = [
            ("acquireTokenInteractively", {"authParameters": auth, "webviewType": "popup"}, "params.webviewType"),
            ("acquireTokenInteractively", {"authParameters": auth, "timeoutSeconds": "30"}, "params.timeoutSeconds"),
            ("acquireTokenInteractively", {"authParameters": auth, "browserCommand": ["firefox", 3],
                                           "webviewType": "customBrowser"}, "params.browserCommand[1]"),
            # section 10.1: a client never names a program; browserCommand is refused whatever it holds
            ("acquireTokenInteractively", {"authParameters": auth, "browserCommand": ["/usr/bin/id"],
                                           "webviewType": "customBrowser"}, "params.browserCommand"),
            ("acquireTokenInteractively", {"authParameters": auth, "webviewType": "customBrowser"},
             "params.browserProfile"),
            ("acquireTokenInteractively", {"authParameters": auth, "webviewType": "customBrowser",
                                           "browserProfile": "no-such-profile"}, "params.browserProfile"),
            ("acquireTokenInteractively", {"authParameters": auth, "webviewType": "embedded"},
             "params.authParameters.redirectUri"),
            ("acquireTokenInteractively", {"webviewType": "deviceCode"}, "params.authParameters"),
            ("completeInteractiveFlow", {"correlationId": correlation}, "params.responseUrl"),
            ("cancelInteractiveFlow", {}, "params.correlationId"),
            ("cancelInteractiveFlow", {"correlationId": 7}, "params.correlationId"),
        ]
        for method, params, field in shape_errors:
            expect_broker_error(lambda: client.call(method, params, correlation_id=False), "invalid_params",
                                field=field)
        for method in INTERACTIVE_METHODS:
            pending = client.send(method, omit_params=True)
            expect_error_message(pending.wait_message(10), "invalid_params", request_id=pending.id, field="params")
        time.sleep(0.2)
        expect(client.notifications == [], f"notifications were sent: {short(client.notifications)}")


# ===============================================================================================================
# Interactive sign-in end to end (sections 10, 11), against the test provider
# ===============================================================================================================

EMBEDDED_REDIRECT = "https://login.microsoftonline.com/common/oauth2/nativeclient"
START, FINISH, COMPLETE, FAIL, PROMPT = ("webAuth/didStartLoad", "webAuth/didFinishLoad", "webAuth/didComplete",
                                         "webAuth/didFail", "deviceCode/prompt")
BROWSER_SEQUENCE = [START, FINISH, COMPLETE]  # section 10.2: systemBrowser, customBrowser
FLOW_TIMEOUT = 30  # timeoutSeconds of the flows meant to succeed: a broken one fails its check, not the battery
SEEN_FLOW_VALUES: set[str] = set()  # state, nonce, code_challenge of every flow seen: each must be fresh
SIGNED_IN: dict[str, Any] = {}  # the customBrowser sign-in's account and token, for the checks that follow it
SECRET_MEMBERS = ("accessToken", "idToken", "responseUrl", "refreshToken")


def redact(value: Any) -> Any:
    """A copy safe to print: token and responseUrl members, and cache documents, replaced."""
    if isinstance(value, dict):
        return {k: ("<redacted>" if k in SECRET_MEMBERS or (k == "data" and isinstance(v, str)) else redact(v))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v) for v in value]
    return value


def shown(value: Any, limit: int = 600) -> str:
    return short(redact(value), limit)


def http_request(method: str, url: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                 timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 exchange that never follows redirects."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request(method, target, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def provider_control(method: str, path: str, payload: Any = None) -> tuple[int, Any]:
    """The test provider's control API (Tests/TestIdentityProvider/README.md)."""
    body = None if payload is None else json.dumps(payload).encode()
    status, _, data = http_request(method, f"{BASE}{path}", body,
                                   {"Content-Type": "application/json"} if body is not None else {})
    try:
        return status, json.loads(data)
    except ValueError:
        return status, None


def provider_grants() -> dict[str, int]:
    status, stats = provider_control("GET", "/_test/stats")
    expect(status == 200 and isinstance(stats, dict), f"the provider's /_test/stats answered {status}")
    return dict(stats.get("byGrant", {}))


def sign_in_without_following(url: str, form: dict[str, str]) -> str:
    """What an app's web view does: loads the sign-in page, submits its form, and stops at the redirect. Returns
    the Location (it carries the authorization code: never print it)."""
    status, _, page = http_request("GET", url)
    expect(status == 200 and b"<form" in page.lower(), f"the provider's sign-in page answered {status}")
    status, headers, _ = http_request("POST", url, urllib.parse.urlencode(form).encode(),
                                      {"Content-Type": "application/x-www-form-urlencoded"})
    expect(status == 302 and bool(headers.get("location")), f"the sign-in form answered {status}, not a redirect")
    return headers["location"]


def with_query(url: str, **changes: str | None) -> str:
    """url with query parameters replaced (None removes one)."""
    parts = urllib.parse.urlsplit(url)
    pairs = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query, keep_blank_values=True) if k not in changes]
    pairs += [(k, v) for k, v in changes.items() if v is not None]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(pairs)))


def browser_dir(ctx: Context) -> Path:
    directory = ctx.daemon.root / "browsers"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


def curl_browser(ctx: Context, name: str, field: str, value: str) -> tuple[Path, Path, Path]:
    """A tiny browser: records its arguments, gets its last one (the loopback listener's start page, section 10.2)
    and records where it is sent (the authorization URL), POSTs the provider's sign-in form with field=value there
    and follows the 302 with curl --location, which lands on the broker's loopback listener. Exits with curl's
    status. Returns (script, arguments file, status file); `<script>.authorize` holds where the start page sent
    it."""
    curl = shutil.which("curl")
    if curl is None:
        raise Skip("curl is not installed")
    directory = browser_dir(ctx)
    script, arguments, status = (directory / f"{name}.sh", directory / f"{name}.args", directory / f"{name}.status")
    q = shlex.quote
    process = script.with_suffix(".process")
    # how the broker started it (section 10.1): process group, signal mask and ignored signals, standard streams,
    # and the variables it got (the daemon's own DISPLAY/BROWSER and unlisted ones must not be among them)
    authorize = script.with_suffix(".authorize")
    variables = " ".join(f'"{name}=${{{name}-<unset>}}"' for name in PROCESS_VARIABLES)
    script.write_text(
        "#!/bin/sh\n"
        "wire_path=\"${PATH-<unset>}\"\n"
        "PATH=/usr/bin:/bin\n"  # for this script's own tools; the PATH it was given is recorded
        # every descriptor it holds, and what it is, before the shell makes any of its own for redirections and
        # substitutions (the redirection is another shell's): section 10.1 gives it 0-2 only
        f"sh -c 'ls -l /proc/$1/fd > \"$2\"' - $$ {q(str(script.with_suffix('.fds')))}\n"
        f"fds=$(sed -n 's/.* \\([0-9][0-9]*\\) -> \\(.*\\)$/\\1=\\2/p' {q(str(script.with_suffix('.fds')))} | tr '\\n' ' ')\n"
        "fd0=$(readlink /proc/$$/fd/0); fd1=$(readlink /proc/$$/fd/1); fd2=$(readlink /proc/$$/fd/2)\n"
        # shell builtins only for the signal state: dash blocks every signal for a moment whenever it forks, so a
        # forked grep reading the shell's status would sometimes see that instead of what the broker gave it
        f"{{ while read -r key value; do case $key in SigBlk:|SigIgn:) echo \"$key $value\";; esac; done "
        f"< /proc/$$/status; echo \"stat: $(cat /proc/$$/stat)\"; "
        f"echo \"fd0: $fd0\"; echo \"fd1: $fd1\"; echo \"fd2: $fd2\"; "
        f"echo \"env PATH=$wire_path\"; for line in {variables}; do echo \"env $line\"; done; "
        # every descriptor it holds, and what it is: section 10.1 gives it 0-2 only (the shell adds its script)
        "echo \"fds:$fds\"; } "
        f"> {q(str(process))}.part\n"
        f"mv {q(str(process))}.part {q(str(process))}\n"
        f"for arg in \"$@\"; do printf '%s\\n' \"$arg\"; done > {q(str(arguments))}.part\n"
        f"mv {q(str(arguments))}.part {q(str(arguments))}\n"
        "for url in \"$@\"; do :; done\n"
        f"authorize=$({q(curl)} --silent --noproxy '*' --max-time 20 --output /dev/null --write-out "
        f"'%{{redirect_url}}' \"$url\")\n"
        f"printf '%s\\n' \"$authorize\" > {q(str(authorize))}\n"
        f"code=$({q(curl)} --silent --noproxy '*' --max-time 20 --output /dev/null --write-out '%{{http_code}}' "
        f"--location --data-urlencode {q(f'{field}={value}')} \"$authorize\")\n"
        "rc=$?\n"
        f"printf '%s %s\\n' \"$rc\" \"$code\" > {q(str(status))}\n"
        "exit $rc\n")
    script.chmod(0o755)
    return script, arguments, status


PYTHON_BROWSER = r'''#!@PYTHON@
# A browser for the wire battery: gets the start page it is given (section 10.2) without following it, first sends
# the loopback listener redirects it must refuse (a wrong state, no state), then signs in at the authorization URL
# the start page named and follows the provider's 302 to the listener. Records statuses, never the code.
import json, sys, urllib.error, urllib.parse, urllib.request
class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args):
        return None
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
record = {"argv": sys.argv[1:]}
try:
    urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect()).open(sys.argv[-1], timeout=20)
    url = ""
except urllib.error.HTTPError as error:
    url = error.headers.get("Location", "") if error.code == 302 else ""
record["authorize"] = url
redirect = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query)).get("redirect_uri", "")
def status(request):
    try:
        with opener.open(request, timeout=20) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except Exception as error:
        return type(error).__name__
if redirect.startswith("http://127.0.0.1:"):
    record["wrongState"] = status(redirect + "?code=wire-battery-fake-code&state=wire-battery-wrong-state")
    record["noState"] = status(redirect + "?code=wire-battery-fake-code")
record["signIn"] = status(urllib.request.Request(url, data=urllib.parse.urlencode({"username": @USERNAME@}).encode()))
with open(@RECORD@ + ".part", "w") as out:
    json.dump(record, out)
import os
os.rename(@RECORD@ + ".part", @RECORD@)
'''


def python_browser(ctx: Context, name: str, username: str) -> tuple[Path, Path]:
    directory = browser_dir(ctx)
    script, record = directory / f"{name}.py", directory / f"{name}.json"
    script.write_text(PYTHON_BROWSER.replace("@PYTHON@", sys.executable).replace("@USERNAME@", repr(username))
                      .replace("@RECORD@", repr(str(record))))
    script.chmod(0o755)
    return script, record


PROCESS_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "XDG_SESSION_TYPE", "WIRE_NOT_A_SESSION_VARIABLE")
DISPLAY_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE")  # of PROCESS_VARIABLES, section 10.1


def browser_process(ctx: Context, script: Path) -> dict[str, str]:
    """What a curl_browser recorded about its own process."""
    text = wait_file(script.with_suffix(".process"), 5)
    expect(bool(text), "the browser did not record its process")
    record: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("env "):
            name, _, value = line[4:].partition("=")
            record[f"env {name}"] = value
        else:
            key, _, value = line.partition(":")
            record[key] = value.strip()
    stat = record.get("stat", "")
    record["pgrp"] = stat.rsplit(")", 1)[-1].split()[2] if ")" in stat else "?"
    record["pid"] = stat.split(" ", 1)[0]
    return record


BROWSER_RUNS: list[tuple[str, Path, dict[str, str]]] = []  # (what, browser script, params.environment) per run


def expect_browser_process(ctx: Context, script: Path, environment: dict[str, str]) -> None:
    """Section 10.1: the browser runs in a process group of its own, with no signal blocked or ignored, stdin,
    stdout and stderr on /dev/null, and no other descriptor of the broker's; it gets the display variables only
    from params.environment, never from the broker's own environment, and nothing else from params.environment
    (no BROWSER, no PATH: PATH is the broker's own)."""
    record = browser_process(ctx, script)
    problems = []
    daemon_group = str(os.getpgid(ctx.daemon.process.pid))
    if record["pgrp"] in (daemon_group, "?"):
        problems.append(f"process group {record['pgrp']} is the broker's ({daemon_group})")
    for key in ("SigBlk", "SigIgn"):
        value = record.get(key, "?")
        mask = int(value, 16) if re.fullmatch(r"[0-9a-fA-F]+", value) else -1
        # section 10.1: no signal blocked; none of the standard signals 1-31 ignored (glibc's posix_spawn leaves
        # its two internal real-time signals, 32 and 33, ignored, out of any caller's reach)
        relevant = mask if key == "SigBlk" or mask < 0 else mask & 0x7FFFFFFF
        if relevant != 0:
            numbers = [str(bit + 1) for bit in range(64) if mask >> bit & 1]
            problems.append(f"{key} {value}: signals {', '.join(numbers) or '?'} "
                            f"{'blocked' if key == 'SigBlk' else 'ignored'}")
    for fd in ("fd0", "fd1", "fd2"):
        if record.get(fd) != "/dev/null":
            problems.append(f"{fd} is {record.get(fd)!r}, not /dev/null")
    wanted_variables = {name: environment.get(name, "<unset>") if name in DISPLAY_VARIABLES else "<unset>"
                        for name in PROCESS_VARIABLES}
    wanted_variables["PATH"] = ctx.daemon.path  # the broker's own, whatever params.environment says
    descriptors = record.get("fds", "").split()
    foreign = [d for d in descriptors if d.split("=", 1)[0] not in ("0", "1", "2")
               and d.split("=", 1)[-1] != str(script)]
    if foreign or not descriptors:
        problems.append(f"descriptors besides 0-2 and its script: {foreign or 'none recorded'}")
    for name, wanted in wanted_variables.items():
        if record.get(f"env {name}") != wanted:
            problems.append(f"{name}={short(record.get(f'env {name}'), 80)}, wanted {short(wanted, 80)}")
    expect(not problems, "; ".join(problems))


def expect_start_page(argument: str, authorize: str, url: str) -> None:
    """Section 10.2: the browser is given the loopback listener's start page, never the authorization URL (a command
    line is readable by every local user); the start page sends it on to the authorization URL of didStartLoad."""
    expect(re.fullmatch(r"http://(127\.0\.0\.1|localhost):\d+/tokenbroker/start/[A-Za-z0-9_-]+", argument) is not None,
           f"the browser's argument is not a start page of the loopback listener: {short(argument, 120)}")
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query))
    leaked = [name for name in ("state", "nonce", "code_challenge") if query.get(name, "\0") in argument]
    expect(not leaked, f"the browser's command line holds {leaked} of the authorization request")
    expect(authorize == url, f"the start page sent the browser to {short(authorize, 120)}, not to the "
                             f"authorization URL of didStartLoad")


def wait_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return ""
        time.sleep(0.05)
    return path.read_text()


def flow_auth(client_id: str = CLIENT_C, **extra: Any) -> dict[str, Any]:
    auth: dict[str, Any] = {"clientId": client_id, "authority": f"{BASE}/{TENANT}", "requestedScopes": [GRAPH_USER_READ]}
    auth.update(extra)
    return auth


def start_flow(client: CheckedClient, auth: dict[str, Any], **options: Any) -> tuple[Any, str]:
    """Sends acquireTokenInteractively and returns (pending request, correlation id) at once."""
    METHODS_CALLED.add("acquireTokenInteractively")
    correlation = options.pop("correlation_id", None) or str(uuid.uuid4())
    return client.start_interactive(auth, correlation_id=correlation, **options), correlation


def methods_of(notes: list[dict[str, Any]]) -> list[str]:
    return [n.get("method", "?") for n in notes]


def validate_notification(note: dict[str, Any]) -> None:
    SCHEMAS.validate("notification.json", note)
    name = f"{note['method'].replace('/', '.')}.params.json"
    if SCHEMAS.available and name in SCHEMAS.validators:
        SCHEMAS.validate(name, note["params"])


def flow_outcome(client: CheckedClient, pending: Any, correlation: str,
                 timeout: float) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Waits for an interactive request's response and returns the notifications about it (by correlationId, in
    arrival order) and the response. Each notification is checked against its schema and must have come before
    the response (sections 5.3, 11); a request answered after the response shows that none trails it."""
    response = pending.wait_message(timeout)
    if "error" in response:
        SCHEMAS.validate("error-response.json", response)
    else:
        SCHEMAS.validate("acquireTokenInteractively.result.json", response["result"])
    prove_usable(client)  # a barrier: whatever the broker sent about the flow before this answer is here now
    notes = client.notifications_for(correlation)
    at = client.position(response)
    for note in notes:
        validate_notification(note)
        expect(client.position(note) < at, f"{note['method']} came after the response to the request "
                                           f"(notifications {methods_of(notes)})")
    return notes, response


def expect_same_error(notes: list[dict[str, Any]], response: dict[str, Any]) -> None:
    """Section 10.2 / 11: didFail carries the error and the error response the same error object."""
    expect(notes and notes[-1].get("method") == FAIL, f"the last notification is not {FAIL}: {methods_of(notes)}")
    expect(notes[-1]["params"].get("error") == response.get("error"),
           f"didFail's error {shown(notes[-1]['params'].get('error'))} is not the response's "
           f"{shown(response.get('error'))}")


def expect_authorize_url(url: str, client_id: str, scopes: list[str],
                         redirect: "str | re.Pattern[str] | None" = None) -> dict[str, str]:
    """Section 10.1: an authorization-code request with PKCE (S256), state, nonce and client_info=1 for the scopes
    plus openid profile offline_access; section 10.2: the loopback redirect URI http://127.0.0.1:<port>/ for the
    browser types, authParameters.redirectUri for embedded. state, nonce and the challenge are fresh per flow."""
    parts = urllib.parse.urlsplit(url)
    endpoint = f"{parts.scheme}://{parts.netloc}{parts.path}"
    expect(endpoint == f"{BASE}/{TENANT}/oauth2/v2.0/authorize", f"the authorization endpoint is {endpoint}")
    query: dict[str, str] = {}
    for key, value in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        expect(key not in query, f"the authorization URL has {key} twice")
        query[key] = value
    problems = []
    for key, wanted in (("client_id", client_id), ("response_type", "code"), ("code_challenge_method", "S256"),
                        ("client_info", "1")):
        if query.get(key) != wanted:
            problems.append(f"{key}={query.get(key)!r} (wanted {wanted!r})")
    if not re.fullmatch(r"[A-Za-z0-9_-]{43}", query.get("code_challenge", "")):
        problems.append(f"code_challenge {query.get('code_challenge')!r} is not an S256 challenge (43 base64url chars)")
    for key in ("state", "nonce"):
        if not query.get(key):
            problems.append(f"no {key}")
    scope = {s.lower() for s in query.get("scope", "").split(" ") if s}
    wanted_scope = {s.lower() for s in scopes} | {"openid", "profile", "offline_access"}
    if not wanted_scope <= scope:
        problems.append(f"scope {query.get('scope')!r} lacks {sorted(wanted_scope - scope)}")
    if redirect is None or isinstance(redirect, re.Pattern):
        pattern = redirect or re.compile(r"http://127\.0\.0\.1:(\d+)/")
        match = pattern.fullmatch(query.get("redirect_uri", ""))
        if not match or not 0 < int(match.group(1)) < 65536:
            problems.append(f"redirect_uri {query.get('redirect_uri')!r} is not {pattern.pattern}")
    elif query.get("redirect_uri") != redirect:
        problems.append(f"redirect_uri {query.get('redirect_uri')!r}, wanted {redirect!r}")
    expect(not problems, "authorization URL: " + "; ".join(problems))
    for key in ("state", "nonce", "code_challenge"):
        expect(query[key] not in SEEN_FLOW_VALUES, f"{key} was already used by an earlier flow")
        SEEN_FLOW_VALUES.add(query[key])
    return query


def jwt_claims(token: str) -> dict[str, Any]:
    try:
        payload = token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as error:
        fail(f"not a JWT ({type(error).__name__})")
        raise


def expect_signed_in(result: dict[str, Any], correlation: str, username: str, client_id: str,
                     account_source: str) -> dict[str, Any]:
    """Sections 8.4, 10.1: a token the provider just issued, for the account that signed in, stored in the cache."""
    token = result["brokerTokenResponse"]
    account = token["account"]
    problems = []
    for key, got, wanted in (("tokenSource", token["tokenSource"], "identityProvider"),
                             ("correlationId", token["correlationId"], correlation),
                             ("accessTokenType", token["accessTokenType"], "Bearer"),
                             ("account.username", account["username"], username),
                             ("account.environment", account["environment"], ENV),
                             ("account.realm", account["realm"], TENANT),
                             ("account.identifier", account["identifier"], f"{account['localAccountId']}.{TENANT}")):
        if got != wanted:
            problems.append(f"{key} {got!r}, wanted {wanted!r}")
    if GRAPH_USER_READ.lower() not in {s.lower() for s in token["grantedScopes"]}:
        problems.append(f"grantedScopes {token['grantedScopes']}")
    if token["expiresOn"] % 1000 or abs(token["expiresOn"] / 1000 - (time.time() + 3600)) > 120:
        problems.append(f"expiresOn {token['expiresOn']} is not about an hour from now in epoch ms")
    if account.get("accountSource") not in (None, account_source):
        problems.append(f"accountSource {account.get('accountSource')!r}, wanted {account_source!r}")
    expect(not problems, "; ".join(problems))
    expect(isinstance(token.get("idToken"), str), "no idToken although the provider just sent one")
    claims = jwt_claims(token["idToken"])
    expect(claims.get("aud") == client_id and claims.get("preferred_username") == username
           and claims.get("oid") == account["localAccountId"],
           f"the id token is not this sign-in's: aud {claims.get('aud')!r}, preferred_username "
           f"{claims.get('preferred_username')!r}, oid {claims.get('oid')!r}")
    expect(isinstance(token.get("clientInfo"), str), "no clientInfo although client_info=1 was sent")
    info = jwt_claims("x." + token["clientInfo"])
    expect(info == {"uid": account["localAccountId"], "utid": TENANT}, f"clientInfo {info}")
    expect((account.get("accountClaims") or {}).get("preferred_username") == username,
           "accountClaims are not those of the new id token")
    if "name" in claims:
        expect(account.get("name") == claims["name"], f"account.name {account.get('name')!r}, the id token says "
                                                      f"{claims['name']!r}")
    return token


def expect_own_browser_unused(ctx: Context) -> None:
    expect(not ctx.daemon.own_browser_ran.exists(),
           "the broker ran the BROWSER of its own environment although its configuration names a system-browser "
           "(section 10.2: the configuration's comes first)")


def check_interactive_custom_browser(ctx: Context) -> None:
    """customBrowser: the browser profile named by browserProfile (section 10.2: browser.<name> in the user's
    configuration) runs with the start page as its last argument (in a process group of its own, no signal blocked
    or ignored, standard streams on /dev/null, none of the daemon's session variables); didStartLoad (the
    authorization URL), didFinishLoad, didComplete, in order, before the response, with the request's
    correlationId; the token; then the same client's silent request is served from the cache."""
    username = "Lin.Interactive@Contoso.example"
    script, arguments, status = curl_browser(ctx, "custom", "username", username)
    ctx.daemon.configure(profiles={"battery": [str(script), "--wire-profile=battery"]},
                         system_browser=[str(browser_dir(ctx) / "no-such-browser")])
    with ctx.client() as client:
        before = provider_grants()
        pending, correlation = start_flow(client, flow_auth(), webview_type="customBrowser", browser_profile="battery",
                                          timeout_seconds=FLOW_TIMEOUT)
        notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
        curl = wait_file(status, 2).strip() or "no status"
        expect(methods_of(notes) == BROWSER_SEQUENCE and "result" in response,
               f"notifications {methods_of(notes)} then {shown(response)} (browser: curl exit and HTTP code {curl})")
        url = notes[0]["params"]["url"]
        query = expect_authorize_url(url, CLIENT_C, [GRAPH_USER_READ])
        expect(notes[1]["params"]["url"] == url, "didFinishLoad's url is not didStartLoad's")
        argv = wait_file(arguments, 5).splitlines()
        expect(len(argv) == 2 and argv[0] == "--wire-profile=battery",
               f"the browser profile got {len(argv)} arguments, wanted its own then the start page")
        if len(argv) == 2:
            expect_start_page(argv[1], wait_file(script.with_suffix(".authorize"), 5).strip(), url)
        BROWSER_RUNS.append(("customBrowser, no environment", script, {}))
        token = expect_signed_in(response["result"], correlation, username, CLIENT_C, "authorization_code")
        after = provider_grants()
        expect(after.get("authorization_code", 0) == before.get("authorization_code", 0) + 1,
               f"authorization_code grants {before.get('authorization_code')} -> {after.get('authorization_code')}")
        SIGNED_IN.update(account=token["account"], accessToken=token["accessToken"])
        silent = client.acquire_token_silently(flow_auth(account={"identifier": token["account"]["identifier"]}))
        cached = silent["brokerTokenResponse"]
        expect(cached["tokenSource"] == "cache" and cached["accessToken"] == token["accessToken"],
               f"the silent request after the sign-in: tokenSource {cached['tokenSource']}, same token "
               f"{cached['accessToken'] == token['accessToken']}")
        print(f"  # customBrowser: redirect_uri {query['redirect_uri']}; browser: {curl}", flush=True)


def signed_in_identifier() -> str:
    account = SIGNED_IN.get("account")
    expect(account is not None, "the customBrowser sign-in did not succeed, so there is no account to use")
    return account["identifier"]


def check_interactive_family(ctx: Context) -> None:
    """Sections 9.4, 10.1: the other family client gets a token through the family refresh token of the sign-in
    (one refresh at the provider); a client outside the family gets interaction_required; the family refresh
    token survives that refusal."""
    identifier = signed_in_identifier()
    with ctx.client() as client:
        before = provider_grants()
        family = client.acquire_token_silently(flow_auth(CLIENT_F, account={"identifier": identifier}))
        token = family["brokerTokenResponse"]
        after = provider_grants()
        expect(token["tokenSource"] == "identityProvider" and token["account"]["identifier"] == identifier,
               f"client F: tokenSource {token['tokenSource']}, account {token['account']['identifier']}")
        expect(token["accessToken"] != SIGNED_IN["accessToken"], "client F got client C's access token")
        if "idToken" in token:
            expect(jwt_claims(token["idToken"]).get("aud") == CLIENT_F, "client F's id token is not for client F")
        expect(after.get("refresh_token", 0) == before.get("refresh_token", 0) + 1,
               f"refresh_token grants at the provider {before.get('refresh_token')} -> {after.get('refresh_token')}, "
               f"wanted one more")
        listed = [a["identifier"] for a in client.get_accounts(client_id=CLIENT_F)["accounts"]]
        expect(identifier in listed, "getAccounts with client F (now known to be in the family) does not list the "
                                     "account of the family refresh token (section 9.2)")
        again = client.acquire_token_silently(flow_auth(CLIENT_F, account={"identifier": identifier}))
        expect(again["brokerTokenResponse"]["tokenSource"] == "cache"
               and again["brokerTokenResponse"]["accessToken"] == token["accessToken"],
               "client F's second silent request was not served from the cache")
        correlation = str(uuid.uuid4())
        expect_broker_error(lambda: client.acquire_token_silently(
            {"clientId": CLIENT_D, "authority": f"{BASE}/{TENANT}", "requestedScopes": [D_SCOPE],
             "account": {"identifier": identifier}}, correlation_id=correlation),
            "interaction_required", correlation_id=correlation)
        forced = client.acquire_token_silently(flow_auth(account={"identifier": identifier}, forceRefresh=True))
        expect(forced["brokerTokenResponse"]["tokenSource"] == "identityProvider",
               "client C's forced refresh after client D's refusal did not reach the provider")
        SIGNED_IN["accessToken"] = forced["brokerTokenResponse"]["accessToken"]


def check_interactive_silent_first(ctx: Context) -> None:
    """Section 10.1: with authParameters.account naming a signed-in account (and no prompt), the broker first does
    what acquireTokenSilently would: a token, no notification, nothing shown."""
    identifier = signed_in_identifier()
    script, arguments, _ = curl_browser(ctx, "silent-first", "username", "never@contoso.example")
    ctx.daemon.configure(profiles={"silent-first": [str(script)]})
    with ctx.client() as client:
        pending, correlation = start_flow(client, flow_auth(account={"identifier": identifier}),
                                          webview_type="customBrowser", browser_profile="silent-first",
                                          timeout_seconds=FLOW_TIMEOUT)
        notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
        expect(notes == [], f"notifications were sent: {methods_of(notes)}")
        expect("result" in response, f"silent first: {shown(response)}")
        token = response["result"]["brokerTokenResponse"]
        expect(token["tokenSource"] == "cache" and token["accessToken"] == SIGNED_IN["accessToken"]
               and token["correlationId"] == correlation,
               f"tokenSource {token['tokenSource']}, the cached token: {token['accessToken'] == SIGNED_IN['accessToken']}")
        expect(not arguments.exists(), "the browser command ran although the cache had a token")


def check_interactive_system_browser(ctx: Context) -> None:
    """systemBrowser runs the system-browser of the user's configuration on the start page; the loopback listener
    refuses a redirect with a wrong or no state (400) and takes the right one; didStartLoad, didFinishLoad,
    didComplete; the token. A BROWSER and a PATH (with an xdg-open) in params.environment are not used: a client
    never chooses what the broker runs (section 10.1)."""
    username = "sys.browser@contoso.example"
    script, record_path = python_browser(ctx, "system", username)
    hostile = browser_dir(ctx) / "hostile"
    hostile.mkdir(exist_ok=True)
    ran = hostile / "ran"
    for name in ("evil-browser", "xdg-open"):
        (hostile / name).write_text(f"#!/bin/sh\necho {name} >> {shlex.quote(str(ran))}\n")
        (hostile / name).chmod(0o755)
    ctx.daemon.configure(system_browser=[str(script)])
    with ctx.client() as client:
        environment = {"BROWSER": str(hostile / "evil-browser"), "PATH": str(hostile), "DISPLAY": ":9"}
        pending, correlation = start_flow(client, flow_auth(), webview_type="systemBrowser", environment=environment,
                                          timeout_seconds=FLOW_TIMEOUT)
        notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
        record = json.loads(wait_file(record_path, 5) or "{}")
        expect(methods_of(notes) == BROWSER_SEQUENCE and "result" in response,
               f"notifications {methods_of(notes)} then {shown(response)} (browser: {short(record)})")
        url = notes[0]["params"]["url"]
        expect_authorize_url(url, CLIENT_C, [GRAPH_USER_READ])
        expect(notes[1]["params"]["url"] == url, "didFinishLoad's url is not didStartLoad's")
        argv = record.get("argv") or [""]
        expect(len(argv) == 1, f"the system browser got {len(argv)} arguments, wanted the start page alone")
        expect_start_page(argv[-1], record.get("authorize", ""), url)
        expect(record.get("wrongState") == 400 and record.get("noState") == 400,
               f"the loopback listener answered a redirect with a wrong state {record.get('wrongState')} and one "
               f"without state {record.get('noState')}, wanted 400 (section 10.2)")
        expect_signed_in(response["result"], correlation, username, CLIENT_C, "authorization_code")
        expect(not ran.exists(), f"the broker ran a program the client named: {wait_file(ran, 0).split()}")
        expect_own_browser_unused(ctx)


def check_interactive_default(ctx: Context) -> None:
    """webviewType default with a non-empty DISPLAY in environment is systemBrowser: the three webAuth
    notifications, the configured system browser runs (with the display of environment, and nothing else of it),
    the token."""
    username = "default.display@contoso.example"
    script, _, status = curl_browser(ctx, "default-display", "username", username)
    ctx.daemon.configure(system_browser=[str(script)])
    with ctx.client() as client:
        environment = {"DISPLAY": ":9", "BROWSER": "/nonexistent/client-browser", "XDG_SESSION_TYPE": "x11",
                       "WIRE_NOT_A_SESSION_VARIABLE": "not for the browser"}
        pending, correlation = start_flow(client, flow_auth(), webview_type="default", environment=environment,
                                          timeout_seconds=FLOW_TIMEOUT)
        notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
        expect(methods_of(notes) == BROWSER_SEQUENCE and "result" in response,
               f"with DISPLAY: notifications {methods_of(notes)} then {shown(response)} "
               f"(browser: {wait_file(status, 1).strip() or 'did not run'})")
        expect_authorize_url(notes[0]["params"]["url"], CLIENT_C, [GRAPH_USER_READ])
        BROWSER_RUNS.append(("default with DISPLAY, BROWSER and more in environment", script, environment))
        expect_own_browser_unused(ctx)
        expect_signed_in(response["result"], correlation, username, CLIENT_C, "authorization_code")


def check_interactive_default_device_code(ctx: Context) -> None:
    """webviewType default without a (non-empty) DISPLAY or WAYLAND_DISPLAY in environment (the daemon's own
    DISPLAY does not count) is deviceCode: deviceCode/prompt and nothing else; completeInteractiveFlow is refused
    for it; the user approves at the provider and the token comes."""
    with ctx.client() as client:
        username = "device.code@contoso.example"
        pending, correlation = start_flow(client, flow_auth(), webview_type="default",
                                          environment={"DISPLAY": "", "XDG_SESSION_TYPE": "tty"},
                                          timeout_seconds=FLOW_TIMEOUT)
        try:
            prompt = client.wait_notification(correlation, PROMPT, 15)
        except TimeoutError:
            fail(f"no deviceCode/prompt; got {methods_of(client.notifications_for(correlation))}, response "
                 f"{shown(pending.message) if pending.done() else 'none yet'}")
        validate_notification(prompt)
        params = prompt["params"]
        expect(params["verificationUri"] == f"{BASE}/devicelogin", f"verificationUri {params['verificationUri']!r}")
        expect(params["userCode"] and params["message"], "an empty userCode or message")
        expect(0 < params["expiresIn"] <= 600, f"expiresIn {params['expiresIn']} (the provider's codes last 600 s)")
        expect(not pending.done(), f"the request ended before the user answered: {shown(pending.message)}")
        # completeInteractiveFlow is for embedded flows only
        expect(client.complete_interactive_flow(correlation, f"{EMBEDDED_REDIRECT}?code=wire-fake&state=wire-fake")
               == {"accepted": False}, "completeInteractiveFlow was accepted for a device code flow")
        status_code, answer = provider_control("POST", "/_test/device", {"userCode": params["userCode"],
                                                                         "username": username, "action": "approve"})
        expect(status_code == 200, f"the provider refused the approval of the user code: {status_code} {answer}")
        notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
        expect(methods_of(notes) == [PROMPT] and "result" in response,
               f"without DISPLAY: notifications {methods_of(notes)} then {shown(response)}")
        expect_signed_in(response["result"], correlation, username, CLIENT_C, "device_code")
        expect_own_browser_unused(ctx)


def check_interactive_browser_process(ctx: Context) -> None:
    """Section 10.1, for each browser the sign-ins above started: a process group of its own, no signal blocked or
    ignored, stdin/stdout/stderr on /dev/null, no other descriptor; DISPLAY, WAYLAND_DISPLAY, XDG_SESSION_TYPE only
    from params.environment (never the daemon's own); no BROWSER; PATH the daemon's own; nothing unlisted."""
    expect(len(BROWSER_RUNS) >= 2, f"only {len(BROWSER_RUNS)} browser runs to look at; the sign-ins above failed")
    problems = []
    for what, script, environment in BROWSER_RUNS:
        try:
            expect_browser_process(ctx, script, environment)
        except CheckFailed as failure:
            problems.append(f"{what}: {failure}")
    expect(not problems, " | ".join(problems))


def check_interactive_embedded(ctx: Context) -> None:
    """Section 10.3, 10.5: didStartLoad gives the URL; the app signs in and stops at the redirect;
    completeInteractiveFlow with a tampered URL is invalid_params (params.responseUrl) and the flow keeps waiting;
    the real URL is accepted, a second time not; didComplete (no didFinishLoad), then the token."""
    username = "embedded.view@contoso.example"
    with ctx.client() as client:
        pending, correlation = start_flow(client, flow_auth(redirectUri=EMBEDDED_REDIRECT), webview_type="embedded",
                                          timeout_seconds=FLOW_TIMEOUT)
        start = client.wait_notification(correlation, START, 10)
        url = start["params"]["url"]
        query = expect_authorize_url(url, CLIENT_C, [GRAPH_USER_READ], redirect=EMBEDDED_REDIRECT)
        location = sign_in_without_following(url, {"username": username})
        expect(location.startswith(EMBEDDED_REDIRECT + "?"), "the provider did not redirect to the redirect URI")
        returned = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query))
        expect(returned.get("state") == query["state"] and bool(returned.get("code")),
               "the provider's redirect does not carry the flow's state and a code")
        refused = [("a tampered state", with_query(location, state=query["state"] + "x")),
                   ("no state", with_query(location, state=None)),
                   ("another redirect URI", location.replace(EMBEDDED_REDIRECT, "https://wire.example/callback", 1))]
        for label, bad in refused:
            try:
                error = expect_broker_error(lambda: client.complete_interactive_flow(correlation, bad),
                                            "invalid_params", field="params.responseUrl", correlation_id=correlation)
            except CheckFailed as failure:
                fail(f"completeInteractiveFlow with {label}: {failure}")
            expect(returned["code"] not in json.dumps(error.error), "the error repeats the authorization code")
        expect(not pending.done(), f"the flow ended after a refused responseUrl: {shown(pending.message)}")
        expect(methods_of(client.notifications_for(correlation)) == [START],
               f"after the refused URLs: {methods_of(client.notifications_for(correlation))}")
        METHODS_CALLED.add("completeInteractiveFlow")
        accepted = client.send("completeInteractiveFlow", {"correlationId": correlation, "responseUrl": location},
                               correlation_id=False)
        accepted_message = accepted.wait_message(15)
        expect(accepted_message.get("result") == {"accepted": True}, f"the real URL: {shown(accepted_message)}")
        SCHEMAS.validate("completeInteractiveFlow.result.json", accepted_message["result"])
        expect(client.complete_interactive_flow(correlation, location) == {"accepted": False},
               "the same URL was accepted a second time")
        notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
        expect(methods_of(notes) == [START, COMPLETE] and "result" in response,
               f"notifications {methods_of(notes)} then {shown(response)}")
        expect(client.position(accepted_message) < client.position(notes[1]),
               "webAuth/didComplete came before the answer accepted: true (section 10.3 step 4)")
        expect_signed_in(response["result"], correlation, username, CLIENT_C, "authorization_code")
        expect(client.complete_interactive_flow(correlation, location) == {"accepted": False},
               "the URL was accepted after the flow finished")


def check_interactive_generated_correlation(ctx: Context) -> None:
    """Section 10.1: without a correlationId the broker generates one (section 6: an uppercase UUID), which the
    client learns from the first notification, and which names the flow for cancelInteractiveFlow."""
    with ctx.client() as client:
        METHODS_CALLED.add("acquireTokenInteractively")
        pending = client.send("acquireTokenInteractively",
                              {"authParameters": flow_auth(redirectUri=EMBEDDED_REDIRECT), "webviewType": "embedded",
                               "timeoutSeconds": FLOW_TIMEOUT}, correlation_id=False)
        start = client.wait_message(lambda m: m.get("method") == START, 10)
        generated = start["params"]["correlationId"]
        client.interactive_requests[json.dumps(pending.id)] = generated
        expect(bool(UPPER_UUID.match(generated)), f"the generated correlationId {generated!r} is not an uppercase UUID")
        expect(client.cancel_interactive_flow(generated) == {"accepted": True},
               "cancelInteractiveFlow with the generated correlation id was not accepted")
        notes, response = flow_outcome(client, pending, generated, 15)
        expect(methods_of(notes) == [START, FAIL], f"notifications {methods_of(notes)}")
        expect_error_message(response, "user_canceled", request_id=pending.id, correlation_id=generated)
        expect_same_error(notes, response)


def check_interactive_url_parameters(ctx: Context) -> None:
    """Section 10.1: prompt, loginHint, domainHint and additionalQueryParametersForAuthorization go into the
    authorization URL; an extra parameter that names one the broker sets itself is invalid_params (field
    params.authParameters.additionalQueryParametersForAuthorization), before any notification."""
    with ctx.client() as client:
        auth = flow_auth(redirectUri=EMBEDDED_REDIRECT, prompt="login", loginHint="hint.user@contoso.example",
                         domainHint="contoso.example",
                         additionalQueryParametersForAuthorization={"wire_extra": "yes please & more"})
        pending, correlation = start_flow(client, auth, webview_type="embedded", timeout_seconds=FLOW_TIMEOUT)
        url = client.wait_notification(correlation, START, 10)["params"]["url"]
        query = expect_authorize_url(url, CLIENT_C, [GRAPH_USER_READ], redirect=EMBEDDED_REDIRECT)
        wanted = {"prompt": "login", "login_hint": "hint.user@contoso.example", "domain_hint": "contoso.example",
                  "wire_extra": "yes please & more"}
        got = {k: query.get(k) for k in wanted}
        expect(got == wanted, f"authorization URL parameters {got}, wanted {wanted}")
        expect(client.cancel_interactive_flow(correlation) == {"accepted": True}, "the cancel was not accepted")
        expect_error_message(flow_outcome(client, pending, correlation, 15)[1], "user_canceled",
                             request_id=pending.id, correlation_id=correlation)
        for name in ("state", "redirect_uri", "code_challenge_method"):
            refused, refused_correlation = start_flow(
                client, flow_auth(redirectUri=EMBEDDED_REDIRECT, additionalQueryParametersForAuthorization={name: "x"}),
                webview_type="embedded", timeout_seconds=FLOW_TIMEOUT)
            try:
                expect_error_message(refused.wait_message(10), "invalid_params", request_id=refused.id,
                                     field="params.authParameters.additionalQueryParametersForAuthorization",
                                     correlation_id=refused_correlation)
            except CheckFailed as failure:
                fail(f"additionalQueryParametersForAuthorization {{{name!r}: 'x'}}: {failure}")
            prove_usable(client)
            expect(client.notifications_for(refused_correlation) == [],
                   f"the refused request got {methods_of(client.notifications_for(refused_correlation))}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def check_interactive_loopback_redirect_uri(ctx: Context) -> None:
    """Section 10.2: with a loopback authParameters.redirectUri, the browser types use its host, path and port
    (an ephemeral one when it names none); the sign-in completes through it."""
    fixed = free_port()
    cases = [("http://localhost/wire-callback", re.compile(r"http://localhost:(\d+)/wire-callback")),
             (f"http://127.0.0.1:{fixed}/wire/fixed", re.compile(rf"http://127\.0\.0\.1:({fixed})/wire/fixed"))]
    with ctx.client() as client:
        for index, (redirect, pattern) in enumerate(cases):
            username = f"loopback{index}.path@contoso.example"
            script, _, status = curl_browser(ctx, f"loopback-{index}", "username", username)
            ctx.daemon.configure(profiles={"loopback": [str(script)]})
            pending, correlation = start_flow(client, flow_auth(redirectUri=redirect), webview_type="customBrowser",
                                              browser_profile="loopback", timeout_seconds=FLOW_TIMEOUT)
            notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
            expect(methods_of(notes) == BROWSER_SEQUENCE and "result" in response,
                   f"redirectUri {redirect}: notifications {methods_of(notes)} then {shown(response)} "
                   f"(browser: {wait_file(status, 1).strip()})")
            expect_authorize_url(notes[0]["params"]["url"], CLIENT_C, [GRAPH_USER_READ], redirect=pattern)
            expect_signed_in(response["result"], correlation, username, CLIENT_C, "authorization_code")


def check_interactive_cancel(ctx: Context) -> None:
    """Section 10.6: cancelInteractiveFlow during an embedded flow (in flight, and keeping its connection from
    idling out meanwhile): accepted true; didFail with user_canceled; the request's error response carries the same
    error object; a second cancel is accepted false. Canceling a customBrowser flow closes its loopback listener."""
    with ctx.client() as client:
        pending, correlation = start_flow(client, flow_auth(redirectUri=EMBEDDED_REDIRECT), webview_type="embedded",
                                          timeout_seconds=FLOW_TIMEOUT)
        client.wait_notification(correlation, START, 10)
        with ctx.client() as other:
            in_flight = other.get_status()["requests"]["inFlight"]
        expect(in_flight >= 1, f"getStatus shows {in_flight} requests in flight while a sign-in waits")
        # section 10.1: the running request keeps the connection from idling out
        expect(not client.wait_closed(ctx.idle * 1.5 + 0.5),
               f"the connection was closed for idleness ({ctx.idle} s) while its sign-in was waiting")
        expect(client.cancel_interactive_flow(correlation) == {"accepted": True}, "the cancel was not accepted")
        notes, response = flow_outcome(client, pending, correlation, 15)
        expect(methods_of(notes) == [START, FAIL], f"notifications {methods_of(notes)}")
        expect_error_message(response, "user_canceled", request_id=pending.id, correlation_id=correlation)
        expect_same_error(notes, response)
        expect(client.cancel_interactive_flow(correlation) == {"accepted": False}, "a second cancel was accepted")
        expect(client.complete_interactive_flow(correlation, f"{EMBEDDED_REDIRECT}?code=x&state=y")
               == {"accepted": False}, "completeInteractiveFlow was accepted for a canceled flow")

        # a customBrowser flow whose browser shows the page and leaves it to the user (exits 0 at once)
        script = browser_dir(ctx) / "open-only.sh"
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o755)
        ctx.daemon.configure(profiles={"open-only": [str(script)]})
        pending, correlation = start_flow(client, flow_auth(), webview_type="customBrowser",
                                          browser_profile="open-only", timeout_seconds=FLOW_TIMEOUT)
        url = client.wait_notification(correlation, FINISH, 10)["params"]["url"]
        redirect = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(url).query)).get("redirect_uri", "")
        port = urllib.parse.urlsplit(redirect).port
        expect(port is not None and loopback_listening(port), f"nothing listens on the redirect URI {redirect}")
        expect(client.cancel_interactive_flow(correlation) == {"accepted": True}, "the cancel was not accepted")
        notes, response = flow_outcome(client, pending, correlation, 15)
        expect(methods_of(notes) == [START, FINISH, FAIL], f"customBrowser: notifications {methods_of(notes)}")
        expect_error_message(response, "user_canceled", request_id=pending.id, correlation_id=correlation)
        expect_same_error(notes, response)
        deadline = time.monotonic() + 5
        while loopback_listening(port):
            expect(time.monotonic() < deadline, f"the loopback listener on port {port} is still open 5 s after the "
                                                f"cancel (section 10.6: the broker closes it)")
            time.sleep(0.1)


def loopback_listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except ConnectionRefusedError:
        return False


def check_interactive_timeout(ctx: Context) -> None:
    """timeoutSeconds 1 on an embedded flow nobody completes: didStartLoad, didFail, then the error timeout (the
    same error object), after about a second."""
    with ctx.client() as client:
        started = time.monotonic()
        pending, correlation = start_flow(client, flow_auth(redirectUri=EMBEDDED_REDIRECT), webview_type="embedded",
                                          timeout_seconds=1)
        notes, response = flow_outcome(client, pending, correlation, 20)
        elapsed = time.monotonic() - started
        expect(methods_of(notes) == [START, FAIL], f"notifications {methods_of(notes)}")
        expect_error_message(response, "timeout", request_id=pending.id, correlation_id=correlation)
        expect_same_error(notes, response)
        expect(0.9 <= elapsed <= 10, f"the timeout came after {elapsed:.2f} s (timeoutSeconds 1)")
        expect(client.cancel_interactive_flow(correlation) == {"accepted": False}, "the timed-out flow still runs")


def check_interactive_correlation_in_use(ctx: Context) -> None:
    """Section 10.1: a request whose correlationId is that of a running flow is invalid_params
    (params.correlationId), on the same connection or another, and gets no notification; the running flow is not
    disturbed. Appendix A: 0.4.0 takes a cancel from another connection; the flow's notifications stay on the
    connection that started it (section 5.3)."""
    with ctx.client() as first, ctx.client() as second:
        pending, correlation = start_flow(first, flow_auth(redirectUri=EMBEDDED_REDIRECT), webview_type="embedded",
                                          timeout_seconds=FLOW_TIMEOUT)
        first.wait_notification(correlation, START, 10)
        same, _ = start_flow(first, flow_auth(redirectUri=EMBEDDED_REDIRECT), webview_type="embedded",
                             correlation_id=correlation, timeout_seconds=FLOW_TIMEOUT)
        expect_error_message(same.wait_message(10), "invalid_params", request_id=same.id,
                             field="params.correlationId", correlation_id=correlation)
        other, _ = start_flow(second, flow_auth(), webview_type="deviceCode", correlation_id=correlation,
                              timeout_seconds=FLOW_TIMEOUT)
        expect_error_message(other.wait_message(10), "invalid_params", request_id=other.id,
                             field="params.correlationId", correlation_id=correlation)
        prove_usable(first)
        prove_usable(second)
        expect(second.notifications == [], f"the refused request got notifications: {methods_of(second.notifications)}")
        expect(methods_of(first.notifications_for(correlation)) == [START],
               f"the running flow's notifications: {methods_of(first.notifications_for(correlation))}")
        expect(not pending.done(), f"the running flow ended: {shown(pending.message)}")
        expect(second.cancel_interactive_flow(correlation) == {"accepted": True},
               "a cancel from another connection was not accepted (Appendix A)")
        notes, response = flow_outcome(first, pending, correlation, 15)
        expect(methods_of(notes) == [START, FAIL], f"notifications {methods_of(notes)}")
        expect_error_message(response, "user_canceled", request_id=pending.id, correlation_id=correlation)
        expect_same_error(notes, response)
        prove_usable(second)
        expect(second.notifications == [], f"the canceling connection got notifications: "
                                           f"{methods_of(second.notifications)}")


def check_interactive_connection_closed(ctx: Context) -> None:
    """Section 10.1: when the connection that started a flow closes, the broker cancels the flow: the same
    correlation id can start a new flow on another connection soon after."""
    first = ctx.client()
    pending, correlation = start_flow(first, flow_auth(redirectUri=EMBEDDED_REDIRECT), webview_type="embedded",
                                      timeout_seconds=FLOW_TIMEOUT)
    first.wait_notification(correlation, START, 10)
    first.close()
    closed_at = time.monotonic()
    with ctx.client() as second:
        attempts = 0
        while True:
            attempts += 1
            retry, _ = start_flow(second, flow_auth(redirectUri=EMBEDDED_REDIRECT), webview_type="embedded",
                                  correlation_id=correlation, timeout_seconds=FLOW_TIMEOUT)
            message = second.wait_message(
                lambda m: (same_id(m.get("id"), retry.id) and ("result" in m or "error" in m))
                or (m.get("method") == START and (m.get("params") or {}).get("correlationId") == correlation), 10)
            if message.get("method") == START:
                break
            expect_error_message(message, "invalid_params", request_id=retry.id, field="params.correlationId")
            expect(time.monotonic() - closed_at < 5, f"the flow still ran 5 s after its connection closed "
                                                     f"({attempts} attempts)")
            time.sleep(0.1)
        settled = time.monotonic() - closed_at
        expect(second.cancel_interactive_flow(correlation) == {"accepted": True}, "the new flow could not be canceled")
        notes, response = flow_outcome(second, retry, correlation, 15)
        expect(methods_of(notes) == [START, FAIL], f"the new flow's notifications {methods_of(notes)}")
        expect_error_message(response, "user_canceled", request_id=retry.id, correlation_id=correlation)
    print(f"  # the correlation id was free again {settled:.2f} s after the close ({attempts} attempts)", flush=True)


def check_interactive_no_browser(ctx: Context) -> None:
    """Section 10.2: when a browser profile's program is missing, or exits non-zero before the redirect came, the
    request fails with invalid_params, field params.webviewType, after didStartLoad and didFail."""
    ctx.daemon.configure(profiles={"missing": [str(browser_dir(ctx) / "no-such-browser")],
                                   "failing": ["/bin/sh", "-c", "exit 1", "wire-browser"]})
    cases = [
        ("customBrowser, program missing", {"webview_type": "customBrowser", "browser_profile": "missing"},
         [[START, FAIL]]),
        # the program started (didFinishLoad may come), then failed
        ("customBrowser, program exits 1", {"webview_type": "customBrowser", "browser_profile": "failing"},
         [[START, FAIL], [START, FINISH, FAIL]]),
    ]
    problems = []
    with ctx.client() as client:
        for label, options, sequences in cases:
            pending, correlation = start_flow(client, flow_auth(), timeout_seconds=FLOW_TIMEOUT, **options)
            notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
            try:
                expect(methods_of(notes) in sequences, f"notifications {methods_of(notes)}, wanted "
                                                       f"{' or '.join(str(s) for s in sequences)}")
                expect_error_message(response, "invalid_params", request_id=pending.id, field="params.webviewType",
                                     correlation_id=correlation)
                expect_same_error(notes, response)
            except CheckFailed as failure:
                problems.append(f"{label}: {failure}")
    expect(not problems, " | ".join(problems))


def check_interactive_denied(ctx: Context) -> None:
    """Section 10.4: the provider answered access_denied -> user_canceled, after didFail carrying the same error:
    through the loopback listener (customBrowser), and through completeInteractiveFlow (embedded: accepted true,
    then "with an error, the flow fails", section 10.5). No code comes back, so there is no didComplete ("the
    redirect came back; the code is being redeemed", sections 10.2, 11)."""
    script, _, status = curl_browser(ctx, "deny", "action", "deny")
    ctx.daemon.configure(profiles={"deny": [str(script)]})
    with ctx.client() as client:
        pending, correlation = start_flow(client, flow_auth(), webview_type="customBrowser", browser_profile="deny",
                                          timeout_seconds=FLOW_TIMEOUT)
        notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
        problems = []
        try:
            expect_error_message(response, "user_canceled", request_id=pending.id, correlation_id=correlation)
            expect_same_error(notes, response)
            expect(methods_of(notes) == [START, FINISH, FAIL],
                   f"notifications {methods_of(notes)}, wanted {[START, FINISH, FAIL]} (no code came back, so "
                   f"nothing is redeemed: didComplete does not apply; browser: {wait_file(status, 1).strip()})")
        except CheckFailed as failure:
            problems.append(f"customBrowser: {failure}")

        pending, correlation = start_flow(client, flow_auth(redirectUri=EMBEDDED_REDIRECT), webview_type="embedded",
                                          timeout_seconds=FLOW_TIMEOUT)
        url = client.wait_notification(correlation, START, 10)["params"]["url"]
        location = sign_in_without_following(url, {"action": "deny"})
        expect(dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(location).query)).get("error") == "access_denied",
               "the provider's deny redirect carries no error=access_denied")
        expect(client.complete_interactive_flow(correlation, location) == {"accepted": True},
               "the redirect with error=access_denied was not accepted (section 10.5)")
        notes, response = flow_outcome(client, pending, correlation, FLOW_TIMEOUT + 15)
        try:
            expect_error_message(response, "user_canceled", request_id=pending.id, correlation_id=correlation)
            expect_same_error(notes, response)
            expect(methods_of(notes) == [START, FAIL],
                   f"notifications {methods_of(notes)}, wanted {[START, FAIL]} (section 10.5: with an error the "
                   f"flow fails; didComplete and the token request are for a code)")
        except CheckFailed as failure:
            problems.append(f"embedded: {failure}")
    expect(not problems, " | ".join(problems))



# ===============================================================================================================
# (b) bad input
# ===============================================================================================================

def check_invalid_json(ctx: Context) -> None:
    frames = [
        '{"jsonrpc":"2.0","id":1,"method":"getStatus"',  # truncated
        "{'jsonrpc':'2.0','id':1,'method':'getStatus'}",
        '{"jsonrpc":"2.0","id":1,"method":"getStatus",}',
        '{"jsonrpc":"2.0","id":01,"method":"getStatus"}',
        '{"jsonrpc":"2.0","id":+1,"method":"getStatus"}',
        '{"jsonrpc":"2.0","id":NaN,"method":"getStatus"}',
        '{"jsonrpc":"2.0","id":Infinity,"method":"getStatus"}',
        '{"jsonrpc":"2.0","id":1,"method":"getStatus"} // comment',
        '{"jsonrpc":"2.0","id":1,"method":"getStatus"}{"jsonrpc":"2.0","id":2,"method":"getStatus"}',
        '{"jsonrpc":"2.0","id":1,"method":"getStatus","params":{"correlationId":"a\tb"}}',  # raw control char
        '{"jsonrpc":"2.0","id":1,"method":"getStatus","params":{"correlationId":"unterminated}}',
        "\ufeff" + '{"jsonrpc":"2.0","id":1,"method":"getStatus"}',  # a byte-order mark
    ]
    with ctx.client() as client:
        for frame in frames:
            message = raw_null_error(client, frame)
            expect_error_message(message, "parse_error", request_id=None)
            expect(not client.closed, f"closed after {frame!r}")
        prove_usable(client)


def check_binary_garbage(ctx: Context) -> None:
    garbage = bytes(b if b != 0x0A else 0x00 for b in random.Random(20251121).randbytes(8192))
    try:
        json.loads(garbage)
        fail("the garbage happens to be JSON")
    except ValueError:
        pass
    with ctx.client() as client:
        client.send_raw(garbage)
        time.sleep(0.2)
        expect(client.received == [], f"an answer before the newline: {short(client.received)}")
        expect_error_message(raw_null_error(client, b""), "parse_error", request_id=None)
        expect(not client.closed, "closed after binary garbage")
        prove_usable(client)


def check_empty_line(ctx: Context) -> None:
    with ctx.client() as client:
        for frame in ("", "   ", " \t ", "\r"):
            expect_error_message(raw_null_error(client, frame), "parse_error", request_id=None)
        prove_usable(client)


def check_batch(ctx: Context) -> None:
    with ctx.client() as client:
        for frame in ('[{"jsonrpc":"2.0","id":1,"method":"getStatus"},{"jsonrpc":"2.0","id":2,"method":"getAccounts"}]',
                      "[]", '[{"jsonrpc":"2.0","id":1,"method":"getStatus"}]'):
            expect_error_message(raw_null_error(client, frame), "invalid_request", request_id=None)
        time.sleep(0.2)
        expect(not any("result" in m for m in client.received), "a batch element was executed")
        prove_usable(client)


def check_non_object(ctx: Context) -> None:
    with ctx.client() as client:
        for frame in ("42", '"getStatus"', "null", "true", "-1.5e3"):
            expect_error_message(raw_null_error(client, frame), "invalid_request", request_id=None)
        prove_usable(client)


def check_bad_id(ctx: Context) -> None:
    with ctx.client() as client:
        for bad in ("1.5", "true", "false", "{}", "[]", "[1]", "9223372036854775808", "-9223372036854775809",
                    "1e3", "1.0"):
            frame = f'{{"jsonrpc":"2.0","id":{bad},"method":"getStatus"}}'
            expect_error_message(raw_null_error(client, frame), "invalid_request", request_id=None)
        # the id check comes before the jsonrpc check (the table's order): still id null
        expect_error_message(raw_null_error(client, '{"jsonrpc":"1.0","id":1.5,"method":"getStatus"}'),
                             "invalid_request", request_id=None)
        # the extreme valid ids are echoed exactly, and 1 and "1" are different ids
        for good in (9223372036854775807, -9223372036854775808, 0, "", "1", 1, "ü-ñ"):
            message = raw_request(client, encode_message({"jsonrpc": "2.0", "id": good, "method": "getStatus"}),
                                  good)
            expect("result" in message, f"id {good!r}: {short(message)}")
        prove_usable(client)


def check_null_id(ctx: Context) -> None:
    """Section 5.4's table: an id that is not an integer or a string -> invalid_request with id null; section
    5.1: the id MUST NOT be null; section 5.3: a request whose id is null is answered (not a notification),
    with id null; response.json allows no null id in a success response. So: an invalid_request error."""
    problems: list[str] = []
    with ctx.client() as client:
        for frame in ('{"jsonrpc":"2.0","id":null,"method":"getStatus"}',
                      '{"jsonrpc":"2.0","id":null,"method":"getAccount","params":{"username":"x@y.example"}}'):
            count = len(client.received)
            client.send_raw(frame.encode() + b"\n")
            client.wait_received(count + 1, 5)
            answers = client.received[count:]
            try:
                expect(len(answers) == 1, f"{len(answers)} answers")
                expect_error_message(answers[0], "invalid_request", request_id=None)
            except CheckFailed as error:
                problems.append(f"sent {frame} -> {error}")
        prove_usable(client)
    expect(not problems, "; ".join(problems))


def check_bad_jsonrpc(ctx: Context) -> None:
    with ctx.client() as client:
        cases = [
            ('{"jsonrpc":"1.0","id":3,"method":"getStatus"}', 3),
            ('{"id":"no-version","method":"getStatus"}', "no-version"),
            ('{"jsonrpc":2.0,"id":5,"method":"getStatus"}', 5),
            ('{"jsonrpc":"2.0","id":"q","method":42}', "q"),
            ('{"jsonrpc":"2.0","id":6}', 6),
            ('{"jsonrpc":"2.0","id":7,"method":null}', 7),
            ('{"jsonrpc":"2.0","id":8,"method":"\\ud800"}', 8),  # an escaped unpaired surrogate as the method
        ]
        for frame, request_id in cases:
            expect_error_message(raw_request(client, frame, request_id), "invalid_request", request_id=request_id)
        # malformed and without id: still answered, with id null
        for frame in ('{"jsonrpc":"1.0","method":"getStatus"}', '{"jsonrpc":"2.0"}', '{"jsonrpc":"2.0","method":1}'):
            expect_error_message(raw_null_error(client, frame), "invalid_request", request_id=None)
        prove_usable(client)


def check_unknown_method(ctx: Context) -> None:
    with ctx.client() as client:
        for method, request_id in (("getTokens", 1), ("getstatus", "case"), ("", 2), ("webAuth/didStartLoad", 3)):
            frame = encode_message({"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"x": 1}})
            expect_error_message(raw_request(client, frame, request_id), "method_not_found", request_id=request_id)
        # method_not_found comes before the params check
        expect_error_message(raw_request(client, '{"jsonrpc":"2.0","id":9,"method":"nope","params":[1]}', 9),
                             "method_not_found", request_id=9)
        prove_usable(client)


def check_missing_params(ctx: Context) -> None:
    with ctx.client() as client:
        for index, method in enumerate(PARAMS_REQUIRED):
            for suffix, variant in (("", "omitted"), (',"params":null', "null"), (',"params":[]', "array"),
                                    (',"params":"x"', "string")):
                request_id = f"{method}-{variant}"
                frame = f'{{"jsonrpc":"2.0","id":"{request_id}","method":"{method}"{suffix}}}'
                expect_error_message(raw_request(client, frame, request_id), "invalid_params",
                                     request_id=request_id, field="params", correlation_id=None)
        for frame, request_id in (('{"jsonrpc":"2.0","id":50,"method":"getStatus","params":[]}', 50),
                                  ('{"jsonrpc":"2.0","id":51,"method":"getAccounts","params":7}', 51)):
            expect_error_message(raw_request(client, frame, request_id), "invalid_params", request_id=request_id,
                                 field="params")
        for frame, request_id in (('{"jsonrpc":"2.0","id":60,"method":"getStatus","params":null}', 60),
                                  ('{"jsonrpc":"2.0","id":61,"method":"getStatus","extra":{"a":[1]},'
                                   '"params":{"future":{"x":[{}]}}}', 61)):
            message = raw_request(client, frame, request_id)
            expect("result" in message, f"{frame}: {short(message)}")
        prove_usable(client)


def check_wrong_types_deep(ctx: Context) -> None:
    base = {"clientId": CLIENT_C, "requestedScopes": [GRAPH_USER_READ]}
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("acquireTokenSilently", {"authParameters": dict(base, account={"identifier": 42})},
         "params.authParameters.account.identifier"),
        ("acquireTokenSilently", {"authParameters": dict(base, requestedScopes=[GRAPH_USER_READ, 5])},
         "params.authParameters.requestedScopes[1]"),
        ("acquireTokenSilently", {"authParameters": dict(base, requestedScopes=GRAPH_USER_READ)},
         "params.authParameters.requestedScopes"),
        ("acquireTokenSilently", {"authParameters": dict(base, forceRefresh="yes")},
         "params.authParameters.forceRefresh"),
        ("acquireTokenSilently", {"authParameters": dict(base, forceRefresh=1)},
         "params.authParameters.forceRefresh"),
        ("acquireTokenSilently", {"authParameters": dict(base, minimumValiditySeconds=1.5)},
         "params.authParameters.minimumValiditySeconds"),
        ("acquireTokenSilently", {"authParameters": dict(base, authorizationType="1")},
         "params.authParameters.authorizationType"),
        ("acquireTokenSilently", {"authParameters": dict(base, additionalQueryParametersForAuthorization={"a": 1})},
         "params.authParameters.additionalQueryParametersForAuthorization.a"),
        ("acquireTokenSilently", {"authParameters": "x"}, "params.authParameters"),
        ("acquireTokenSilently", {"authParameters": dict(base), "correlationId": 12}, "params.correlationId"),
        ("removeAccount", {"account": {"username": ["a"]}}, "params.account.username"),
        ("removeAccount", {"account": "ada"}, "params.account"),
        ("importCache", {"data": {"AccessToken": {}}}, "params.data"),
        ("importCache", {"data": "{}", "format": "xml"}, "params.format"),
        ("exportCache", {"format": "MSAL"}, "params.format"),
        ("getAccounts", {"clientId": 5}, "params.clientId"),
        ("getAccount", {"identifier": True}, "params.identifier"),
        ("getLinuxBrokerVersion", {"protocolVersion": 1.0}, "params.protocolVersion"),
        ("getStatus", {"correlationId": {"a": 1}}, "params.correlationId"),
    ]
    with ctx.client() as client:
        # shape errors are found while decoding: no data.correlationId even when one was sent (section 6)
        for method, params, field in cases:
            pending = client.send(method, params)
            message = pending.wait_message(10)
            expect_error_message(message, "invalid_params", request_id=pending.id, field=field, correlation_id=None)
        # integers written with a fraction or an exponent, or beyond 64 bits, are invalid_params
        for text in ("30.0", "3e1", "9223372036854775808"):
            frame = ('{"jsonrpc":"2.0","id":"int","method":"acquireTokenSilently","params":{"authParameters":'
                     f'{{"clientId":"{CLIENT_C}","requestedScopes":["{GRAPH_USER_READ}"],'
                     f'"minimumValiditySeconds":{text}}}}}}}')
            expect_error_message(raw_request(client, frame, "int"), "invalid_params", request_id="int",
                                 field="params.authParameters.minimumValiditySeconds")
        # an escaped unpaired surrogate inside params is invalid_params
        frame = '{"jsonrpc":"2.0","id":"sur","method":"getStatus","params":{"correlationId":"\\ud800"}}'
        expect_error_message(raw_request(client, frame, "sur"), "invalid_params", request_id="sur",
                             field="params.correlationId")
        # impossible values are found when the broker runs the request: data.correlationId is the one sent;
        # the message never repeats the value sent
        secretish = "wire-battery-do-not-echo-me"
        pending = client.send("acquireTokenSilently",
                              {"authParameters": dict(base, clientId=f"bad client {secretish}")})
        error = expect_error_message(pending.wait_message(10), "invalid_params", request_id=pending.id,
                                     field="params.authParameters.clientId", correlation_id=pending.correlation_id)
        expect(secretish not in json.dumps(error), "the invalid_params error repeats the value sent")
        pending = client.send("acquireTokenSilently", {"authParameters": dict(base, minimumValiditySeconds=-1)})
        expect_error_message(pending.wait_message(10), "invalid_params", request_id=pending.id,
                             field="params.authParameters.minimumValiditySeconds",
                             correlation_id=pending.correlation_id)
        for authority in ("http://login.microsoftonline.com/common", "https://login.microsoftonline.com/common?x=1",
                          "https://user@login.microsoftonline.com/common", "not a url"):
            pending = client.send("acquireTokenSilently", {"authParameters": dict(base, authority=authority)})
            expect_error_message(pending.wait_message(10), "invalid_params", request_id=pending.id,
                                 field="params.authParameters.authority", correlation_id=pending.correlation_id)
        loopback = client.send("acquireTokenSilently", {"authParameters": dict(
            base, authority="http://localhost:8080/realms/main", account={"identifier": ADA.identifier})})
        expect_error_message(loopback.wait_message(10), "no_account", request_id=loopback.id,
                             correlation_id=loopback.correlation_id)
        prove_usable(client)


def check_missing_fields(ctx: Context) -> None:
    # a missing required member is a shape error: no data.correlationId although one is sent (section 6)
    shape: list[tuple[str, dict[str, Any], str]] = [
        ("acquireTokenSilently", {"authParameters": {"requestedScopes": [GRAPH_USER_READ]}},
         "params.authParameters.clientId"),
        ("acquireTokenSilently", {}, "params.authParameters"),
        ("acquireTokenSilently", {"authParameters": None}, "params.authParameters"),
        ("removeAccount", {}, "params.account"),
        ("importCache", {"format": "msal"}, "params.data"),
        ("importCache", {"data": None}, "params.data"),
        ("completeInteractiveFlow", {"responseUrl": "https://x/?code=1"}, "params.correlationId"),
    ]
    # no usable value (no scope, an empty id, an empty selector): found when the broker runs the request, so
    # data.correlationId is the one sent
    value: list[tuple[str, dict[str, Any], str]] = [
        ("acquireTokenSilently", {"authParameters": {"clientId": CLIENT_C}}, "params.authParameters.requestedScopes"),
        ("acquireTokenSilently", {"authParameters": {"clientId": CLIENT_C, "requestedScopes": []}},
         "params.authParameters.requestedScopes"),
        ("acquireTokenSilently", {"authParameters": {"clientId": CLIENT_C,
                                                     "requestedScopes": ["openid", "profile offline_access"]}},
         "params.authParameters.requestedScopes"),
        ("acquireTokenSilently", {"authParameters": {"clientId": CLIENT_C, "resource": ""}},
         "params.authParameters.requestedScopes"),
        ("acquireTokenSilently", {"authParameters": {"clientId": "", "requestedScopes": [GRAPH_USER_READ]}},
         "params.authParameters.clientId"),
        ("removeAccount", {"account": {"identifier": "", "username": ""}}, "params.account"),
        ("getAccount", {"username": ""}, "params.identifier"),
    ]
    with ctx.client() as client:
        for method, params, field in shape:
            pending = client.send(method, params, correlation_id=False if method == "completeInteractiveFlow" else True)
            expect_error_message(pending.wait_message(10), "invalid_params", request_id=pending.id, field=field,
                                 correlation_id=None)
        for method, params, field in value:
            pending = client.send(method, params)
            expect_error_message(pending.wait_message(10), "invalid_params", request_id=pending.id, field=field,
                                 correlation_id=pending.correlation_id)
        prove_usable(client)


def check_duplicate_keys(ctx: Context) -> None:
    with ctx.client() as client:
        for frame in ('{"jsonrpc":"2.0","id":2,"id":3,"method":"getStatus"}',
                      '{"jsonrpc":"2.0","id":5,"method":"getAccount","params":{"username":"a","username":"b"}}',
                      '{"jsonrpc":"2.0","id":6,"method":"getStatus","params":{"a":1,"\\u0061":2}}',
                      '{"jsonrpc":"2.0","id":7,"method":"getStatus","params":{"x":[{"k":1,"k":1}]}}'):
            expect_error_message(raw_null_error(client, frame), "parse_error", request_id=None)
        prove_usable(client)


def check_invalid_utf8(ctx: Context) -> None:
    prefix = b'{"jsonrpc":"2.0","id":1,"method":"getStatus","params":{"correlationId":"'
    with ctx.client() as client:
        for bad in (b"\xff\xfe", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf8\x88\x80\x80\x80", b"\x80"):
            expect_error_message(raw_null_error(client, prefix + bad + b'"}}'), "parse_error", request_id=None)
        good = raw_request(client, prefix + "é-✓-😀".encode() + b'"}}', 1)
        expect("result" in good, f"valid UTF-8 refused: {short(good)}")
        prove_usable(client)


def deep_frame(total_depth: int, request_id: int) -> str:
    arrays = total_depth - 2  # the request object and params count as two
    return (f'{{"jsonrpc":"2.0","id":{request_id},"method":"getStatus","params":{{"deep":'
            + "[" * arrays + "]" * arrays + "}}")


def check_deep_nesting(ctx: Context) -> None:
    with ctx.client() as client:
        at_limit = raw_request(client, deep_frame(128, 128), 128)
        expect("result" in at_limit, f"nesting of exactly 128 refused: {short(at_limit)}")
        expect_error_message(raw_null_error(client, deep_frame(129, 129)), "parse_error", request_id=None)
        expect_error_message(raw_null_error(client, deep_frame(100000, 1)), "parse_error", request_id=None)
        expect_error_message(raw_null_error(client, '{"a":' * 5000 + "1" + "}" * 5000), "parse_error",
                             request_id=None)
        prove_usable(client)


def sized_request(size: int, request_id: int) -> bytes:
    base = encode_message({"jsonrpc": "2.0", "id": request_id, "method": "getStatus",
                           "params": {"correlationId": str(uuid.uuid4()), "pad": ""}})
    pad = size - len(base)
    assert pad >= 0
    line = base.replace(b'"pad":""', b'"pad":"' + b"x" * pad + b'"')
    assert len(line) == size
    return line


def check_largest_request(ctx: Context) -> None:
    with ctx.client() as client:
        message = raw_request(client, sized_request(MAX_REQUEST_FRAME, 77), 77, timeout=30)
        expect("result" in message, f"a request of exactly {MAX_REQUEST_FRAME} bytes was refused: {short(message)}")
        SCHEMAS.validate("getStatus.result.json", message["result"])
        prove_usable(client)


def send_in_background(client: BrokerClient, data: bytes) -> threading.Thread:
    def run() -> None:
        try:
            client.send_raw(data)
        except OSError:
            pass  # the broker stops reading and closes: EPIPE / ECONNRESET are expected
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def expect_frame_too_large(client: BrokerClient, ctx: Context) -> None:
    error = client.wait_connection_error(15)
    assert error.raw is not None
    expect_error_message(error.raw, "frame_too_large", request_id=None)
    expect(client.wait_closed(10), "the connection stayed open after frame_too_large")


def check_frame_one_over(ctx: Context) -> None:
    with ctx.client() as client:
        sender = send_in_background(client, sized_request(MAX_REQUEST_FRAME + 1, 78) + b"\n")
        expect_frame_too_large(client, ctx)
        sender.join(10)
        expect(not any("result" in m for m in client.received), "the oversized request was executed")


def check_frame_2mib(ctx: Context) -> None:
    with ctx.client() as client:
        head = b'{"jsonrpc":"2.0","id":9,"method":"importCache","params":{"data":"'
        frame = head + b"A" * (2 * 1024 * 1024 - len(head))
        before = raw_request(client, '{"jsonrpc":"2.0","id":"before","method":"getAccounts"}', "before")
        expect("result" in before, "the request before the oversized frame failed")
        # a request in the same write as the oversized frame is still answered (frames read before it are processed)
        sender = send_in_background(client, b'{"jsonrpc":"2.0","id":"same-write","method":"exportCache"}\n' + frame)
        expect_frame_too_large(client, ctx)
        sender.join(10)
        same = [m for m in client.received if m.get("id") == "same-write"]
        expect(len(same) == 1 and "result" in same[0], f"the request before the frame: {short(same)}")
        nulls = [m for m in client.received if m.get("id", 0) is None]
        expect(len(nulls) == 1, f"{len(nulls)} id-null errors, wanted exactly one")


def check_half_frame_stall(ctx: Context) -> None:
    with ctx.client() as client:
        client.send_raw(b'{"jsonrpc":"2.0","id":4,"meth')
        start = time.monotonic()
        error = client.wait_connection_error(ctx.idle * 3 + 10)
        elapsed = time.monotonic() - start
        assert error.raw is not None
        expect_error_message(error.raw, "timeout", request_id=None)
        expect(elapsed >= ctx.idle * 0.9, f"the timeout came after {elapsed:.2f} s, before the idle timeout "
                                          f"({ctx.idle} s)")
        expect(elapsed <= ctx.idle * 2 + 3, f"the timeout came after {elapsed:.2f} s (idle timeout {ctx.idle} s)")
        expect(client.wait_closed(5), "the connection stayed open after the timeout error")
        expect(len(client.received) == 1, f"more than the timeout error: {short(client.received)}")


def check_idle_without_partial_frame(ctx: Context) -> None:
    with ctx.client() as silent, ctx.client() as answered:
        answered.get_status()
        start = time.monotonic()
        expect(silent.wait_closed(ctx.idle * 3 + 10), "a silent connection was not closed for idleness")
        elapsed = time.monotonic() - start
        expect(elapsed >= ctx.idle * 0.8, f"closed after {elapsed:.2f} s (idle timeout {ctx.idle} s)")
        expect(silent.received == [], f"a silent connection got {short(silent.received)} (no partial line: "
                                      f"no timeout error)")
        expect(answered.wait_closed(ctx.idle * 3 + 10), "an answered connection was not closed for idleness")
        expect(len(answered.received) == 1, f"after its answer the connection got {short(answered.received[1:])}")


def check_activity_keeps_open(ctx: Context) -> None:
    """Traffic more often than the idle timeout keeps a connection open past it."""
    with ctx.client() as client:
        end = time.monotonic() + ctx.idle * 2.5
        while time.monotonic() < end:
            client.get_linux_broker_version()
            time.sleep(ctx.idle / 4)
        expect(not client.closed, "the connection was closed although requests kept arriving")


def check_client_notification(ctx: Context) -> None:
    temp = Person("7e7e7e7e-2222-4333-8444-555566667777", "temp.notify@contoso.example", "Temp Notify")
    with ctx.client() as client:
        client.import_cache(json.dumps({"Account": {"a": account_entry(temp)}}), "msal")
        client.get_account(identifier=temp.identifier)
        before = len(client.received)
        client.notify("getTokens", {"clientId": CLIENT_C})  # unknown method
        client.notify("getAccount", {})  # invalid params
        client.notify("getAccount", {"username": "nobody@contoso.example"})  # no_account
        client.notify("getStatus")
        client.notify("removeAccount", {"account": {"identifier": temp.identifier}})  # executed
        client.send_raw(b'{"jsonrpc":"2.0","method":"getStatus","params":{"correlationId":"\\ud800"}}\n')
        first = client.call("getLinuxBrokerVersion", {"protocolVersion": "1.0"})
        expect(first["protocolVersion"] == SPEC_VERSION, "")
        # the removal runs concurrently: wait (bounded) until it took effect
        deadline = time.monotonic() + 10
        gone = False
        while time.monotonic() < deadline and not gone:
            try:
                client.get_account(identifier=temp.identifier)
                time.sleep(0.1)
            except BrokerError as error:
                gone = error.error_code == "no_account"
        expect(gone, "the removeAccount notification was not executed")
        time.sleep(0.3)
        # every message since the notifications answers one of this client's own requests (matched by id)
        expect(client.connection_errors == [], f"a notification was answered with id null: "
                                               f"{short([e.raw for e in client.connection_errors])}")
        expect(client.unmatched == [], f"a notification was answered: {short(client.unmatched)}")
        expect(all("id" in m and m["id"] is not None for m in client.received[before:]),
               f"unexpected messages: {short(client.received[before:])}")


def check_pipelined(ctx: Context) -> None:
    with ctx.client() as client:
        requests = [
            ({"jsonrpc": "2.0", "id": 1, "method": "importCache", "params": {"data": "{}"}}, "importCache"),
            ({"jsonrpc": "2.0", "id": "accounts", "method": "getAccounts", "params": {"clientId": CLIENT_C}},
             "getAccounts"),
            ({"jsonrpc": "2.0", "id": 3, "method": "acquireTokenSilently", "params": {"authParameters": ada_params()}},
             "acquireTokenSilently"),
            ({"jsonrpc": "2.0", "id": "1", "method": "exportCache"}, "exportCache"),
            ({"jsonrpc": "2.0", "id": -9223372036854775808, "method": "getLinuxBrokerVersion"},
             "getLinuxBrokerVersion"),
            ({"jsonrpc": "2.0", "id": 9223372036854775807, "method": "getAccount",
              "params": {"identifier": ADA.identifier}}, "getAccount"),
            ({"jsonrpc": "2.0", "id": "bad", "method": "getAccount", "params": {}}, "getAccount"),
            ({"jsonrpc": "2.0", "id": 4, "method": "getStatus"}, "getStatus"),
        ]
        client.send_raw(b"".join(encode_message(r) + b"\n" for r, _ in requests))
        for request, method in requests:
            message = client.wait_message(lambda m, i=request["id"]: "id" in m and same_id(m["id"], i), 30)
            if request["id"] == "bad":
                expect_error_message(message, "invalid_params", request_id="bad", field="params.identifier")
                continue
            expect("result" in message, f"{method} id {request['id']!r}: {short(message)}")
            SCHEMAS.validate(f"{method}.result.json", message["result"])
        time.sleep(0.2)
        expect(len(client.received) == len(requests), f"{len(client.received)} answers to {len(requests)} requests")
        by_id = {json.dumps(m["id"]): m for m in client.received}
        expect("brokerTokenResponse" in by_id["3"]["result"] and "data" in by_id['"1"']["result"]
               and "version" in by_id["4"]["result"] and "imported" in by_id["1"]["result"],
               "a response carries the result of another request")
        order = [json.dumps(m["id"]) for m in client.received]
        print(f"  # pipelined answer order: {' '.join(order)}", flush=True)


def check_in_flight_limit(ctx: Context) -> None:
    """64 exportCache requests (may wait) of a large cache, written at once: each is answered exactly once, by
    its own id, with a result or broker_busy (section 13: at most 32 in flight per connection; the extra ones are
    refused with their own id and the connection stays open). Since broker_busy needs 32 requests in flight,
    at least 32 results must come back."""
    bulk = Person("c0c0c0c0-1111-4222-8333-444455556666", "zz.inflight@contoso.example", "In Flight")
    with ctx.client() as client:
        entries = {f"k{i}": at_entry(bulk.identifier, CLIENT_C, f"api://wire-inflight-{i}/Read", "t" * 200,
                                     NOW, FAR_EXPIRY) for i in range(1500)}
        client.import_cache(json.dumps({"Account": {"a": account_entry(bulk)}, "AccessToken": entries}), "msal")
        count = 64
        first = len(client.received)
        client.send_raw(b"".join(encode_message({"jsonrpc": "2.0", "id": f"x{i}", "method": "exportCache"}) + b"\n"
                                 for i in range(count)))
        for i in range(count):
            client.wait_message(lambda m, i=i: same_id(m.get("id"), f"x{i}"), 120)
        time.sleep(0.2)
        answers = client.received[first:]
        busy = results = 0
        for message in answers:
            if "error" in message:
                expect_error_message(message, "broker_busy", request_id=message["id"])
                busy += 1
            else:
                SCHEMAS.validate("exportCache.result.json", message["result"])
                results += 1
        ids = sorted(m["id"] for m in answers)
        expect(ids == sorted(f"x{i}" for i in range(count)), f"answers by id: {ids}")
        print(f"  # {busy} of {count} pipelined exportCache requests were answered broker_busy", flush=True)
        expect(results >= 32, f"only {results} results: broker_busy before 32 requests were in flight")
        expect(not client.closed, "the connection closed")
        removed = client.remove_account(identifier=bulk.identifier)
        expect(removed["removedCredentials"] == 1500, f"removed {removed}")
        prove_usable(client)


def check_half_close(ctx: Context) -> None:
    with ctx.client() as client:
        client.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"getLinuxBrokerVersion","params":{"protocolVersion":"1.0"}}\n'
                        b'{"jsonrpc":"2.0","id":2,"method":"exportCache"}\n'
                        b'{"jsonrpc":"2.0","id":3,"method":"importCache","params":{"data":"{}"}}\n')
        client.shutdown_write()
        expect(client.wait_closed(20), "the broker did not close after answering a half-closed connection")
        ids = sorted(m.get("id") for m in client.received)
        expect(ids == [1, 2, 3] and all("result" in m for m in client.received),
               f"answers after shutdown(SHUT_WR): {short(client.received)}")
    with ctx.client() as client:
        # bytes after the last newline when the client's side ends are discarded without an answer
        client.send_raw(b'{"jsonrpc":"2.0","id":1,"method":"getStatus"}\n{"jsonrpc":"2.0","id":2,"meth')
        client.shutdown_write()
        expect(client.wait_closed(20), "the broker did not close")
        expect([m.get("id") for m in client.received] == [1] and "result" in client.received[0],
               f"answers: {short(client.received)}")


# A helper process that holds connections open: it connects N times, sends getLinuxBrokerVersion on each, checks
# each answer, prints one JSON line {"served": n, "refused": [errorCode…]}, and keeps the connections until its
# stdin closes. Section 13 limits connections per process as well as in all, so holding 256 takes several.
HOLDER = r"""
import json, socket, sys
path, count = sys.argv[1], int(sys.argv[2])
socks, served, refused = [], 0, []
for i in range(count):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    socks.append(sock)
for i, sock in enumerate(socks):
    try:
        sock.sendall(json.dumps({"jsonrpc": "2.0", "id": i, "method": "getLinuxBrokerVersion"}).encode() + b"\n")
    except OSError:
        pass
for i, sock in enumerate(socks):
    sock.settimeout(10)
    data = b""
    try:
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    try:
        message = json.loads(data) if data else {}
    except ValueError:
        message = {}
    if "result" in message and message.get("id") == i:
        served += 1
    else:
        refused.append((message.get("error") or {}).get("data", {}).get("errorCode", "closed"))
print(json.dumps({"served": served, "refused": refused}), flush=True)
sys.stdin.read()
"""


def hold_connections(ctx: Context, count: int) -> tuple[subprocess.Popen, dict]:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ctx.socket), str(count)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    report = json.loads(holder.stdout.readline() or "{}")
    return holder, report


def release(holders: list[subprocess.Popen]) -> None:
    for holder in holders:
        if holder.stdin:
            holder.stdin.close()
        holder.wait(10)


def check_connection_limit(ctx: Context) -> None:
    """256 open connections (the default limit) are served; the 257th gets broker_busy with id null. One process
    may hold at most 64 (section 13), so four processes hold them here, and a fifth's 65th is refused too."""
    for client in ALL_CLIENTS:
        client.close()
    with ctx.client() as status:
        deadline = time.monotonic() + 10
        while status.get_status()["connections"]["open"] != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = status.get_status()["connections"]
        expect(before["open"] == 1, f"other connections still open: {before}")
        holders: list[subprocess.Popen] = []
        try:
            # One process over its quota: 64 served, the 65th refused, while the broker has room.
            holder, report = hold_connections(ctx, 65)
            holders.append(holder)
            expect(report == {"served": 64, "refused": ["broker_busy"]},
                   f"one process opening 65 connections: {report}")
            release(holders)
            holders.clear()
            deadline = time.monotonic() + 10
            while status.get_status()["connections"]["open"] != 1 and time.monotonic() < deadline:
                time.sleep(0.1)
            # 255 more from four processes: all served; then the 257th connection in all is refused.
            for count in (64, 64, 64, 63):
                holder, report = hold_connections(ctx, count)
                holders.append(holder)
                expect(report == {"served": count, "refused": []}, f"a process holding {count}: {report}")
            extra = CheckedClient(str(ctx.socket))
            error = extra.wait_connection_error(10)
            assert error.raw is not None
            expect_error_message(error.raw, "broker_busy", request_id=None)
            expect(extra.wait_closed(10), "the connection over the limit was not closed")
            expect(len(extra.received) == 1, f"more than one line: {short(extra.received)}")
        finally:
            release(holders)
    with ctx.client() as status:
        deadline = time.monotonic() + 10
        after = status.get_status()["connections"]
        while after["open"] != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
            after = status.get_status()["connections"]
        expect(after["refused"] == before["refused"] + 2, f"refused {before['refused']} -> {after['refused']}")
        expect(after["accepted"] == before["accepted"] + 322, f"accepted {before['accepted']} -> {after['accepted']}"
                                                              f", wanted +322 (65 + 255 + 1 refused + this one)")
        expect(after["open"] == 1, f"open {after['open']} after closing them")


def read_line(sock: socket.socket, timeout: float) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    return data


def churn_batch(ctx: Context, start: int, batch: int, names: list[str], kinds: dict[str, int]) -> None:
    """Opens `batch` connections, does one of the `names` things on each (by position), and closes them all."""
    socks = []
    for i in range(start, start + batch):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(ctx.socket))
        socks.append((names[i % len(names)], sock))
    for kind, sock in socks:
        kinds[kind] += 1
        try:
            if kind == "mid-frame":
                sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"getSta')
            elif kind == "request-no-read":
                sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"exportCache"}\n')
            elif kind == "request-read":
                sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"getStatus"}\n')
                answer = read_line(sock, 10)
                # getStatus and error objects carry no secrets: the answer is shown as it came.
                expect(b'"result"' in answer, f"a request on a short connection failed: {answer[:300]!r}")
            elif kind == "mid-frame-shutwr":
                sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"getAccounts","par')
                sock.shutdown(socket.SHUT_WR)
            elif kind == "oversize-mid-frame":
                sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"importCache","params":{"data":"' + b"z" * 65536)
        except OSError:
            pass
    for _, sock in socks:
        sock.close()


def check_thousand_connections(ctx: Context) -> None:
    for client in ALL_CLIENTS:
        client.close()
    with ctx.client() as status:
        deadline = time.monotonic() + 10
        while status.get_status()["connections"]["open"] != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = status.get_status()["connections"]
    total, batch = 1000, 50
    kinds = {"connect-close": 0, "mid-frame": 0, "request-no-read": 0, "request-read": 0, "mid-frame-shutwr": 0,
             "oversize-mid-frame": 0}
    names = list(kinds)
    probes = 0  # the connections that asked the broker how far it is, counted like the others
    for start in range(0, total, batch):
        # A connection the client already closed still waits in the listen backlog until the broker accepts it,
        # and counts as open until the broker has seen it close. On a busy 2-CPU machine the churn could outrun
        # the broker and meet the limit of 64 connections per process (all of these are this process's) or of
        # 256 in all, which are checks of their own (check_connection_limit): before
        # each batch, let it accept and close what came before. (A probe connection is opened each time: one kept
        # open would meet the idle timeout while a batch runs.)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with ctx.client() as probe:
                now = probe.get_status()["connections"]
            probes += 1
            if now["accepted"] >= before["accepted"] + start + probes and now["open"] <= PER_PROCESS - batch - 1:
                break
            time.sleep(0.05)
        churn_batch(ctx, start, batch, names, kinds)
    with ctx.client() as status:
        deadline = time.monotonic() + 15
        now = status.get_status()["connections"]
        wanted = total + probes + 1
        while (now["open"] != 1 or now["accepted"] < before["accepted"] + wanted) and time.monotonic() < deadline:
            time.sleep(0.1)
            now = status.get_status()["connections"]
        print(f"  # connections before {before}, after {now}; kinds {kinds}; {probes} probes", flush=True)
        expect(now["accepted"] == before["accepted"] + wanted,
               f"accepted {before['accepted']} -> {now['accepted']}, wanted +{wanted} (the 1000, {probes} probes "
               f"and this one)")
        expect(now["refused"] == before["refused"], f"refused {before['refused']} -> {now['refused']}")
        expect(now["open"] == 1, f"open {now['open']}: connections left open beyond this one")
        expect(status.get_status()["requests"]["inFlight"] == 0, "requests still in flight")


def check_other_uid(ctx: Context) -> None:
    if os.getuid() != 0:
        raise Skip("not running as root: cannot run a client as another uid")
    if shutil.which("setpriv") is None:
        raise Skip("setpriv is not installed")
    paths = [ctx.daemon.root, ctx.daemon.runtime, ctx.daemon.socket_dir, ctx.socket]
    modes = {path: os.stat(path).st_mode & 0o7777 for path in paths}
    with ctx.client() as status:
        before = status.get_status()["connections"]
    try:
        for path in paths[:-1]:
            os.chmod(path, 0o711)  # others may traverse
        os.chmod(ctx.socket, 0o666)  # others may connect: only the broker's peer-credential check stands
        # The probe needs only the standard library; the system interpreter, because a virtualenv's may live
        # under a home directory the other uid cannot enter.
        interpreter = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", interpreter,
                   str(HERE / "tokenbroker_client.py"), "--socket", str(ctx.socket), "--no-peer-check",
                   "probe", "--wait", "10"]
        run = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd="/")
    finally:
        for path, mode in modes.items():
            os.chmod(path, mode)
    expect(run.returncode == 0, f"the probe failed ({run.returncode}): {run.stderr.strip()[-500:]}")
    probe = json.loads(run.stdout)
    expect(probe["uid"] == 65534, f"the probe ran as uid {probe['uid']}")
    expect(len(probe["lines"]) == 1, f"the other uid got {len(probe['lines'])} lines: {short(probe['lines'])}")
    expect_error_message(probe["lines"][0], "permission_denied", request_id=None)
    expect(probe["closed"], "the connection of the other uid was not closed")
    with ctx.client() as status:
        after = status.get_status()["connections"]
    expect(after["refused"] == before["refused"] + 1, f"refused {before['refused']} -> {after['refused']}")
    expect(after["accepted"] >= before["accepted"] + 2, f"accepted {before['accepted']} -> {after['accepted']}")
    print(f"  # other uid probe: {short(probe)}", flush=True)


def check_every_method_called(ctx: Context) -> None:
    missing = [m for m in ALL_METHODS if m not in METHODS_CALLED]
    expect(not missing, f"methods never called: {missing}")
    if SCHEMAS.available:
        unchecked = [m for m in ALL_METHODS if SCHEMAS.validated.get(f"{m}.result.json", 0) == 0]
        expect(not unchecked, f"no result validated for {unchecked}")
        notifications = [n for n in NOTIFICATION_NAMES if SCHEMAS.validated.get(f"{n.replace('/', '.')}.params.json", 0) == 0]
        expect(not notifications, f"no notification received and validated for {notifications}")


def check_all_messages_valid(ctx: Context) -> None:
    if not SCHEMAS.available:
        raise Skip(SCHEMAS.note)
    count = notes = 0
    invalid: list[str] = []
    stray: list[str] = []
    for client in ALL_CLIENTS:
        # section 5.3 / 11: a notification is about an acquireTokenInteractively request of its own connection (its
        # params.correlationId) that has not been answered yet
        interactive = getattr(client, "interactive_requests", {})
        answered: set[str] = set()  # ids answered so far, in arrival order
        for message in client.received:
            count += 1
            try:
                SCHEMAS.validate("broker-message.json", message)
                if "id" not in message and isinstance(message.get("method"), str):
                    notes += 1
                    validate_notification(message)
            except CheckFailed as error:
                invalid.append(f"{shown(message, 160)} ({error})"[:400])
            if "id" in message:
                answered.add(json.dumps(message["id"]))
                continue
            correlation = (message.get("params") or {}).get("correlationId")
            if not any(c == correlation and key not in answered for key, c in interactive.items()):
                stray.append(f"{message.get('method')} for {correlation}")
        expect(client.protocol_failure is None, f"protocol failure: {client.protocol_failure}")
        expect(client.notifications == [] or INTERACTIVE_AVAILABLE, "a notification was sent by broker 0.1.0")
    print(f"  # {count} broker messages checked against broker-message.json, {notes} of them notifications "
          f"(params checked against their own schemas)", flush=True)
    expect(not invalid, f"{len(invalid)} invalid: " + " | ".join(invalid[:3]))
    expect(INTERACTIVE_AVAILABLE is False or notes > 0, "no notification was received at all")
    expect(not stray, f"{len(stray)} notifications about no unanswered interactive request of their connection: "
                      + "; ".join(stray[:5]))


def check_sigterm(ctx: Context) -> None:
    client = CheckedClient(str(ctx.socket))
    client.get_status()
    start = time.monotonic()
    code = ctx.daemon.stop()
    elapsed = time.monotonic() - start
    expect(code == 0, f"the daemon exited with {code} after SIGTERM:\n{ctx.daemon.log_tail(15)}")
    expect(client.wait_closed(5), "an open connection was not closed at shutdown")
    expect(elapsed < 12, f"shutdown took {elapsed:.1f} s")
    try:
        with BrokerClient(str(ctx.socket), connect_timeout=2):
            fail("the socket still accepts connections after shutdown")
    except OSError:
        pass


# ===============================================================================================================

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--daemon", required=True, help="path to the tokenbrokerd binary")
    parser.add_argument("--idp", help="path to tokenbroker-test-idp (default: beside the daemon)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (socket, state, log)")
    parser.add_argument("--idle-timeout", type=float, default=2.0, help="connection idle timeout, seconds")
    args = parser.parse_args()

    global SCHEMAS
    SCHEMAS = Schemas(PROTOCOL_DIR / "schemas")
    print(f"# {SCHEMAS.note}", flush=True)

    binary = os.path.abspath(args.daemon)
    if not os.access(binary, os.X_OK):
        print(f"FAIL - the daemon {binary} is not executable\n0 passed, 1 failed", flush=True)
        return 1
    provider = Provider(os.path.abspath(args.idp or os.path.join(os.path.dirname(binary), "tokenbroker-test-idp")))
    configure_provider(f"127.0.0.1:{provider.port}")
    root = Path(tempfile.mkdtemp(prefix="tokenbroker-wire-"))
    daemon = Daemon(binary, root, args.idle_timeout)
    ctx = Context(daemon)
    runner = Runner(ctx)
    try:
        print(f"# {' '.join(daemon.command())}", flush=True)
        daemon.start()

        def started(_: Context) -> None:
            daemon.wait_ready()
        if not runner.check("the daemon starts and answers getLinuxBrokerVersion", started):
            return finish(runner, daemon, args.keep)

        c = runner.check
        c("the client finds the socket by the rule of section 2.1; the peer is the daemon, same uid",
          check_socket_path_rule)
        c("the socket's directory is 0700 and the socket 0600", check_socket_modes)
        c("a CR before the LF and whitespace around the JSON text are tolerated", check_crlf)
        c("getLinuxBrokerVersion: 1.0, params omitted or null, string id, newer minor", check_version)
        c("getLinuxBrokerVersion: unsupported_protocol_version for 2.x and 0.x; malformed version", check_version_unsupported)
        c("importCache (msal) seeds the cache and reports skipped entries under their rebuilt keys", check_import_seed)
        c("getAccounts: every account, ordered, with id-token claims; clientId and authority filters",
          check_get_accounts)
        c("account.name comes from the id token (section 8.1)", check_account_name)
        c("getAccount: by identifier, by username, identifier-then-username, no_account, invalid_params",
          check_get_account)
        c("acquireTokenSilently: the imported token from the cache, correlation ids, ADAL style, errors",
          check_acquire_token_silently)
        c("exportCache: msal document holds the imported token, counts, per-client exports", check_export_cache)
        c("importCache/exportCache: invalid_cache refuses whole documents, nothing imported; adal lists", check_import_errors)
        c("interactive methods: listed, params checked, no flow to complete or cancel",
          expect_interactive_params_checked)
        c("removeAccount: one client id, then entirely, then no_account", check_remove_account)
        c("grants: createGrant serves over HTTP, listGrants hides the secret, revokeGrant stops it; errors",
          check_grants)
        c("exportCache over 1 MiB after an import in parts under the request limit", check_large_export)
        c("getStatus: schema, pid, socket, state directory, counters, recentErrors", check_status)
        c("cache key: a plain file without bus or TPM, as getStatus says; moveCacheKey params.to, params.passphrase, "
          "a store not here, file chosen; unlockCache on an open cache; no passphrase echoed", check_cache_key)

        c("sign-in, customBrowser: didStartLoad (authorization URL), didFinishLoad, didComplete, then the token; "
          "then silently from the cache", check_interactive_custom_browser)
        c("FOCI after the sign-in: the other family client gets a token through the family refresh token; a client "
          "outside the family gets interaction_required", check_interactive_family)
        c("sign-in naming a signed-in account: silent first, no notification, no browser",
          check_interactive_silent_first)
        c("sign-in, systemBrowser: environment BROWSER; the loopback listener refuses a wrong state; the token; "
          "xdg-open from environment PATH",
          check_interactive_system_browser)
        c("sign-in, default with a DISPLAY in environment: systemBrowser", check_interactive_default)
        c("sign-in, default without a DISPLAY in environment: deviceCode/prompt, approval at the provider, the token",
          check_interactive_default_device_code)
        c("the browser process: own process group, no signal blocked or ignored, /dev/null, variables from "
          "environment only", check_interactive_browser_process)
        c("sign-in, embedded: completeInteractiveFlow refuses tampered URLs, takes the real one once; didComplete; "
          "the token", check_interactive_embedded)
        c("sign-in, customBrowser with a loopback redirectUri: its host, path and port (ephemeral when none)",
          check_interactive_loopback_redirect_uri)
        c("authorization URL: prompt, login_hint, domain_hint, extra parameters; a reserved extra one -> "
          "invalid_params", check_interactive_url_parameters)
        c("cancelInteractiveFlow: in flight and not idled out; didFail user_canceled, the same error in the response; "
          "a second cancel is refused; a customBrowser cancel closes the loopback listener", check_interactive_cancel)
        c("without a correlationId the broker generates one (uppercase UUID), named by the first notification",
          check_interactive_generated_correlation)
        c("timeoutSeconds 1: didStartLoad, didFail, then timeout", check_interactive_timeout)
        c("a correlationId in use -> invalid_params params.correlationId, no notification; cancel from another "
          "connection", check_interactive_correlation_in_use)
        c("closing the connection cancels its flow: the correlation id is free again", check_interactive_connection_closed,
          destructive=True)
        c("no browser can start -> didStartLoad, didFail, invalid_params params.webviewType",
          check_interactive_no_browser)
        c("a denied sign-in -> didFail, user_canceled (loopback listener and completeInteractiveFlow)",
          check_interactive_denied)

        c("invalid JSON -> parse_error, id null; the connection stays usable", check_invalid_json, destructive=True)
        c("binary garbage then a newline -> parse_error, id null; still usable", check_binary_garbage,
          destructive=True)
        c("an empty or blank line -> parse_error, id null; still usable", check_empty_line, destructive=True)
        c("a batch -> invalid_request, id null; nothing executed; still usable", check_batch, destructive=True)
        c("a JSON value that is not an object -> invalid_request, id null", check_non_object, destructive=True)
        c("an id of a wrong type -> invalid_request, id null; extreme valid ids echoed", check_bad_id,
          destructive=True)
        c("an id of null -> invalid_request, id null (not executed)", check_null_id, destructive=True)
        c("wrong jsonrpc / method -> invalid_request with the id (or null without one)", check_bad_jsonrpc,
          destructive=True)
        c("an unknown method -> method_not_found with the id", check_unknown_method, destructive=True)
        c("params missing, null or not an object -> invalid_params, field params; unknown members ignored",
          check_missing_params, destructive=True)
        c("wrong types deep inside params -> invalid_params naming the path", check_wrong_types_deep,
          destructive=True)
        c("missing required fields -> invalid_params naming the field", check_missing_fields, destructive=True)
        c("duplicate keys -> parse_error, id null", check_duplicate_keys, destructive=True)
        c("invalid UTF-8 -> parse_error, id null", check_invalid_utf8, destructive=True)
        c("nesting: 128 levels accepted, 129 and far deeper -> parse_error", check_deep_nesting, destructive=True)
        c("a request of exactly 1,048,576 bytes is served", check_largest_request, destructive=True)
        c("a frame of 1,048,577 bytes -> frame_too_large, id null, closed", check_frame_one_over, destructive=True)
        c("a 2 MiB frame without newline -> frame_too_large, id null, closed; the request before it answered",
          check_frame_2mib, destructive=True)
        c("half a frame then silence -> timeout, id null, after the idle timeout, then closed",
          check_half_frame_stall, destructive=True)
        c("idle connections (silent, or after an answer) are closed without a message", check_idle_without_partial_frame)
        c("a connection with traffic is not closed for idleness", check_activity_keeps_open)
        c("client notifications (no id) are executed and never answered", check_client_notification,
          destructive=True)
        c("pipelined requests are answered by id", check_pipelined, destructive=True)
        c("64 pipelined may-wait requests: each answered once, result or broker_busy", check_in_flight_limit,
          destructive=True)
        c("shutdown(SHUT_WR) after sending: every request answered, then closed", check_half_close,
          destructive=True)
        c("256 connections served, the 257th gets broker_busy (id null) and is closed", check_connection_limit,
          destructive=True)
        c("1,000 connections opened and dropped (some mid-frame): counted, none left open", check_thousand_connections,
          destructive=True)
        c("another uid is refused with permission_denied, id null, closed", check_other_uid, destructive=True)
        c("every protocol method was called and its result checked against its schema", check_every_method_called)
        c("every message received is valid against broker-message.json", check_all_messages_valid)
        c("SIGTERM: open connections closed, the daemon exits 0", check_sigterm)
    finally:
        for client in ALL_CLIENTS:
            client.close()
        provider.stop()
    return finish(runner, daemon, args.keep)


def finish(runner: Runner, daemon: Daemon, keep: bool) -> int:
    code = daemon.stop()
    if daemon.process is not None and code != 0 and runner.failed == 0:
        runner.failed += 1
        print(f"FAIL - the daemon exited with {code}", flush=True)
    if keep:
        print(f"# kept {daemon.root} (daemon log: {daemon.log_path})", flush=True)
    else:
        shutil.rmtree(daemon.root, ignore_errors=True)
    skipped = f", {runner.skipped} skipped" if runner.skipped else ""
    print(f"{runner.passed} passed, {runner.failed} failed{skipped}", flush=True)
    return 0 if runner.failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
