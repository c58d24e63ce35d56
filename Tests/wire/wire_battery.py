#!/usr/bin/env python3
"""Wire-protocol battery for tokenbrokerd, written from Protocol/README.md, Protocol/schemas/ and
Protocol/examples/ alone.

Usage: python3 Tests/wire/wire_battery.py --daemon /path/to/tokenbrokerd [--keep] [--idle-timeout 2]

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
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree

from tokenbroker_client import (  # noqa: E402
    ERROR_CODES,
    MAX_REQUEST_FRAME,
    BrokerClient,
    BrokerError,
    ConnectionClosed,
    NoBrokerSocket,
    encode_message,
    parse_line,
    socket_path,
)

PROTOCOL_DIR = HERE.parent.parent / "Protocol"
SCHEMA_BASE = "https://tokenbroker.invalid/protocol/1/"

ALL_METHODS = (
    "getLinuxBrokerVersion", "getAccounts", "getAccount", "acquireTokenSilently", "acquireTokenInteractively",
    "completeInteractiveFlow", "cancelInteractiveFlow", "removeAccount", "importCache", "exportCache", "getStatus",
)
INTERACTIVE_METHODS = ("acquireTokenInteractively", "completeInteractiveFlow", "cancelInteractiveFlow")
PARAMS_REQUIRED = ("getAccount", "acquireTokenSilently", "acquireTokenInteractively", "completeInteractiveFlow",
                   "cancelInteractiveFlow", "removeAccount", "importCache")
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
        super().__init__(*args, **kwargs)
        ALL_CLIENTS.append(self)

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
    expect(result.get("protocolVersion") == "1.0", f"unexpected version result {short(result)}")
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
    """tokenbroker-test-idp on an ephemeral port: client C in the FOCI family, client D outside it. It never
    issued the refresh tokens the battery imports, so it answers them invalid_grant."""

    def __init__(self, binary: str) -> None:
        self.process = subprocess.Popen(
            [binary, "--port", "0", "--tenant-id", TENANT, "--family-client", CLIENT_C, "--client", CLIENT_D],
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
        self.process: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        return [self.binary, "--socket", str(self.socket), "--state-directory", str(self.state),
                "--connection-idle-timeout", f"{self.idle_timeout:g}", "--entra-host", ENV]

    def start(self) -> None:
        self.runtime.mkdir(mode=0o700)
        self.home.mkdir(mode=0o700)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TOKENBROKER_", "XDG_"))}
        env.update({"HOME": str(self.home), "XDG_RUNTIME_DIR": str(self.runtime),
                    "XDG_STATE_HOME": str(self.home / ".local" / "state"),
                    "XDG_CONFIG_HOME": str(self.home / ".config"), "XDG_CACHE_HOME": str(self.home / ".cache")})
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
        expect(version["protocolVersion"] == "1.0", f"version: {short(version)}")
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
    for env, isdir, wanted in cases:
        got = socket_path(env, isdir=isdir)
        expect(got == wanted, f"socket_path({env}) = {got!r}, wanted {wanted!r}")
    try:
        got = socket_path({}, isdir=no)
    except NoBrokerSocket:
        pass
    else:
        fail(f"socket_path without any source gave {got!r} instead of reporting no broker")
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
        expect(result["protocolVersion"] == "1.0", f"protocolVersion {result['protocolVersion']} (spec is 1.0)")
        expect(isinstance(result["linuxBrokerVersion"], str) and result["linuxBrokerVersion"], "no version")
        expect_interactive_methods_listing(result["methods"])
        # params omitted, params null, a string id, a newer minor
        omitted = client.send("getLinuxBrokerVersion", request_id="version-2", omit_params=True).result(10)
        SCHEMAS.validate("getLinuxBrokerVersion.result.json", omitted)
        expect(omitted == result, f"params omitted gave {short(omitted)}")
        null = raw_request(client, '{"jsonrpc":"2.0","id":"n","method":"getLinuxBrokerVersion","params":null}',
                           "n")
        expect("result" in null and null["result"] == result, f"params null: {short(null)}")
        expect(client.get_linux_broker_version("1.9")["protocolVersion"] == "1.0", "minor 1.9 refused")


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
        expect_broker_error(lambda: client.import_cache("[]", "adal"), "invalid_cache")
        empty = client.import_cache("{}", None)
        expect(empty["format"] == "msal" and all(v == 0 for v in empty["imported"].values()),
               f"an empty document with format omitted: {short(empty)}")
        section_not_object = client.import_cache('{"IdToken":[]}', "msal")
        expect([s["entry"] for s in section_not_object["skipped"]] == ["IdToken"],
               f"a known section that is not an object: {short(section_not_object)}")
        expect(client.get_status()["cache"] == before, "a refused import changed the cache")
        expect_broker_error(lambda: client.export_cache("adal"), "invalid_params", field="params.format")


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
        expect(status["protocolVersion"] == "1.0", f"protocolVersion {status['protocolVersion']}")
        expect(status["pid"] == ctx.daemon.process.pid, f"pid {status['pid']} != {ctx.daemon.process.pid}")
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
            ("acquireTokenInteractively", {"authParameters": auth, "webviewType": "customBrowser"},
             "params.browserCommand"),
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
        expect(first["protocolVersion"] == "1.0", "")
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


def check_connection_limit(ctx: Context) -> None:
    """256 open connections (the default limit) are served; the 257th gets broker_busy with id null."""
    for client in ALL_CLIENTS:
        client.close()
    with ctx.client() as status:
        deadline = time.monotonic() + 10
        while status.get_status()["connections"]["open"] != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        before = status.get_status()["connections"]
        expect(before["open"] == 1, f"other connections still open: {before}")
        socks: list[socket.socket] = []
        try:
            for _ in range(255):
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.connect(str(ctx.socket))
                socks.append(sock)
            for i, sock in enumerate(socks):
                sock.sendall(encode_message({"jsonrpc": "2.0", "id": i, "method": "getLinuxBrokerVersion"}) + b"\n")
            for i, sock in enumerate(socks):
                line = read_line(sock, 10)
                message = json.loads(line)
                expect("result" in message and message["id"] == i,
                       f"connection {i + 2} of 256 was not served: {short(message)}")
            extra = CheckedClient(str(ctx.socket))
            error = extra.wait_connection_error(10)
            assert error.raw is not None
            expect_error_message(error.raw, "broker_busy", request_id=None)
            expect(extra.wait_closed(10), "the connection over the limit was not closed")
            expect(len(extra.received) == 1, f"more than one line: {short(extra.received)}")
        finally:
            for sock in socks:
                sock.close()
    with ctx.client() as status:
        deadline = time.monotonic() + 10
        after = status.get_status()["connections"]
        while after["open"] != 1 and time.monotonic() < deadline:
            time.sleep(0.1)
            after = status.get_status()["connections"]
        expect(after["refused"] == before["refused"] + 1, f"refused {before['refused']} -> {after['refused']}")
        expect(after["accepted"] == before["accepted"] + 257, f"accepted {before['accepted']} -> {after['accepted']}"
                                                              f", wanted +257 (255 served, 1 refused, this one)")
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
    for start in range(0, total, batch):
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
                    expect(b'"result"' in read_line(sock, 10), "a request on a short connection failed")
                elif kind == "mid-frame-shutwr":
                    sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"getAccounts","par')
                    sock.shutdown(socket.SHUT_WR)
                elif kind == "oversize-mid-frame":
                    sock.sendall(b'{"jsonrpc":"2.0","id":1,"method":"importCache","params":{"data":"' + b"z" * 65536)
            except OSError:
                pass
        for _, sock in socks:
            sock.close()
    with ctx.client() as status:
        deadline = time.monotonic() + 15
        now = status.get_status()["connections"]
        while (now["open"] != 1 or now["accepted"] < before["accepted"] + total + 1) and time.monotonic() < deadline:
            time.sleep(0.1)
            now = status.get_status()["connections"]
        print(f"  # connections before {before}, after {now}; kinds {kinds}", flush=True)
        expect(now["accepted"] == before["accepted"] + total + 1,
               f"accepted {before['accepted']} -> {now['accepted']}, wanted +{total + 1} (the 1000 and this one)")
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
        unchecked = [m for m in ALL_METHODS if m not in INTERACTIVE_METHODS
                     and SCHEMAS.validated.get(f"{m}.result.json", 0) == 0]
        expect(not unchecked, f"no result validated for {unchecked}")


def check_all_messages_valid(ctx: Context) -> None:
    if not SCHEMAS.available:
        raise Skip(SCHEMAS.note)
    count = 0
    invalid: list[str] = []
    for client in ALL_CLIENTS:
        for message in client.received:
            count += 1
            try:
                SCHEMAS.validate("broker-message.json", message)
            except CheckFailed as error:
                invalid.append(f"{short(message, 160)} ({error})"[:400])
        expect(client.protocol_failure is None, f"protocol failure: {client.protocol_failure}")
        expect(client.notifications == [] or INTERACTIVE_AVAILABLE, "a notification was sent by broker 0.1.0")
    print(f"  # {count} broker messages checked against broker-message.json", flush=True)
    expect(not invalid, f"{len(invalid)} invalid: " + " | ".join(invalid[:3]))


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
        c("importCache/exportCache: invalid_cache, adal refused, nothing imported", check_import_errors)
        c("interactive methods: listed, params checked, no flow to complete or cancel",
          expect_interactive_params_checked)
        c("removeAccount: one client id, then entirely, then no_account", check_remove_account)
        c("exportCache over 1 MiB after an import in parts under the request limit", check_large_export)
        c("getStatus: schema, pid, socket, state directory, counters, recentErrors", check_status)

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
