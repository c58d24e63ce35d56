#!/usr/bin/env python3
"""A small tokenbroker wire-protocol client, written from Protocol/README.md alone.

Standard library only (Python 3.11). Protocol 1.3: newline-delimited JSON-RPC 2.0 over an AF_UNIX stream socket.

Library use:

    from tokenbroker_client import BrokerClient, BrokerError
    with BrokerClient() as broker:                     # finds the socket as Protocol/README.md section 2.1 says
        broker.negotiate()                             # getLinuxBrokerVersion {"protocolVersion": "1.3"}
        accounts = broker.get_accounts()["accounts"]
        try:
            token = broker.acquire_token_silently({...})["brokerTokenResponse"]
        except BrokerError as error:
            if error.error_code != "interaction_required":
                raise

The client keeps a reader thread per connection: responses are matched to requests by id (they may come in any
order), broker notifications are collected (and routed to callbacks by correlationId), error responses with
"id": null (connection errors) are recorded, and end-of-file fails whatever is still pending.

Command line (used by the battery for the other-uid check, handy by hand):

    python3 tokenbroker_client.py [--socket PATH] [--no-peer-check] call METHOD [PARAMS_JSON]
    python3 tokenbroker_client.py [--socket PATH] [--no-peer-check] probe [--wait SECONDS]

`call` prints the result (exit 0) or the error object (exit 1) as JSON. `probe` connects, sends nothing, and
prints one JSON object: {"lines": [every message received], "closed": bool, "how": "eof"|"reset"|"open"}.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import socket
import struct
import sys
import threading
import time
import uuid
from typing import Any, Callable, Iterable

PROTOCOL_VERSION = "1.3"
MAX_REQUEST_FRAME = 1 << 20  # 1,048,576 bytes, newline excluded (section 3)
MAX_RESPONSE_FRAME = 64 << 20  # 67,108,864 bytes, newline excluded (section 3)
MAX_IN_FLIGHT = 32  # per connection (section 13)

# data.errorCode -> error.code (section 12.2)
ERROR_CODES: dict[str, int] = {
    "parse_error": -32700,
    "invalid_request": -32600,
    "method_not_found": -32601,
    "invalid_params": -32602,
    "internal_error": -32603,
    "interaction_required": -32000,
    "no_account": -32001,
    "user_canceled": -32002,
    "server_error": -32003,
    "unauthorized_client": -32004,
    "broker_busy": -32005,
    "frame_too_large": -32006,
    "timeout": -32007,
    "permission_denied": -32008,
    "unsupported_protocol_version": -32009,
    "invalid_cache": -32010,
    "throttled": -32011,
    "broker_stopping": -32012,
    "cache_locked": -32013,
}
ERROR_NAMES: dict[int, str] = {code: name for name, code in ERROR_CODES.items()}

METHODS = (
    "getLinuxBrokerVersion",
    "getAccounts",
    "getAccount",
    "acquireTokenSilently",
    "acquireTokenInteractively",
    "completeInteractiveFlow",
    "cancelInteractiveFlow",
    "removeAccount",
    "importCache",
    "exportCache",
    "getStatus",
    "createGrant",
    "listGrants",
    "revokeGrant",
    "discardAccessToken",
    "getKeyStatus",
    "unlockCache",
    "moveCacheKey",
)
# Methods whose params may be omitted (section 5.1).
PARAMS_OPTIONAL = frozenset({"getLinuxBrokerVersion", "getAccounts", "exportCache", "getStatus", "listGrants",
                             "getKeyStatus", "unlockCache"})
NOTIFICATIONS = (
    "webAuth/didStartLoad",
    "webAuth/didFinishLoad",
    "webAuth/didFail",
    "webAuth/didComplete",
    "deviceCode/prompt",
)


class ProtocolFailure(ConnectionError):
    """The broker sent something this client cannot accept (a line over 64 MiB, not JSON, ...)."""


class ConnectionClosed(ConnectionError):
    """The connection ended. Requests still pending have an unknown outcome (section 2.3).

    connection_error is the last error response with "id": null received before the close, if any."""

    def __init__(self, message: str, connection_error: "BrokerError | None" = None) -> None:
        super().__init__(message)
        self.connection_error = connection_error


class BrokerError(Exception):
    """An error response. code is the JSON-RPC number, error_code the actionable data.errorCode
    (mapped back from code when data is missing; unknown codes mean internal_error, section 12.1)."""

    def __init__(self, error: dict[str, Any], request_id: Any = None, raw: dict[str, Any] | None = None) -> None:
        self.error = error if isinstance(error, dict) else {}
        code = self.error.get("code")
        self.code: int | None = code if isinstance(code, int) and not isinstance(code, bool) else None
        data = self.error.get("data")
        self.data: dict[str, Any] = data if isinstance(data, dict) else {}
        sent_code = self.data.get("errorCode")
        if isinstance(sent_code, str):
            self.raw_error_code = sent_code
            self.error_code = sent_code if sent_code in ERROR_CODES else "internal_error"
        else:
            self.raw_error_code = None
            self.error_code = ERROR_NAMES.get(self.code, "internal_error")  # type: ignore[arg-type]
        self.message: str = self.error.get("message", "") if isinstance(self.error.get("message"), str) else ""
        self.field: str | None = self.data.get("field")
        self.correlation_id: str | None = self.data.get("correlationId")
        self.id = request_id
        self.raw = raw
        super().__init__(f"{self.error_code} ({self.code}): {self.message}")


def private_directory_problem(path: str, uid: int | None = None) -> str | None:
    """Why `path` is not a directory of the user's own closed to others (section 2.1, rule 5), or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as error:
        return f"{path}: {error.strerror}"
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if info.st_uid != (os.getuid() if uid is None else uid):
        return f"{path} belongs to another user"
    if info.st_mode & 0o077:
        return f"{path} is open to other users"
    return None


def socket_path(environ: dict[str, str] | None = None, uid: int | None = None,
                is_private: Callable[[str], bool] | None = None) -> str:
    """The broker socket path, by the rule of section 2.1."""
    env = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    is_private = is_private or (lambda path: private_directory_problem(path, uid) is None)
    explicit = env.get("TOKENBROKER_SOCKET", "")
    if explicit:
        return explicit
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "tokenbroker", "broker.sock")
    run_user = f"/run/user/{uid}"
    if is_private(run_user):
        return os.path.join(run_user, "tokenbroker", "broker.sock")
    return f"/tmp/tokenbroker-{uid}/broker.sock"


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """(pid, uid, gid) of the peer, from SO_PEERCRED."""
    raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("iII"))
    return struct.unpack("iII", raw)


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate member {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_line(line: bytes) -> Any:
    """Parses one line from the broker strictly (the broker never writes duplicates or NaN)."""
    return json.loads(line.decode("utf-8"), object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant)


def encode_message(message: dict[str, Any]) -> bytes:
    """One compact JSON line (without the newline)."""
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _id_key(value: Any) -> tuple[str, Any]:
    # 1 and "1" are different ids; True is not an id.
    if isinstance(value, bool) or value is None:
        return ("other", repr(value))
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, str):
        return ("str", value)
    return ("other", repr(value))


class PendingRequest:
    """One request waiting for its response."""

    def __init__(self, request_id: Any, method: str, correlation_id: str | None) -> None:
        self.id = request_id
        self.method = method
        self.correlation_id = correlation_id
        self.message: dict[str, Any] | None = None  # the response, once here
        self.failure: BaseException | None = None
        self._done = threading.Event()

    def _complete(self, message: dict[str, Any]) -> None:
        self.message = message
        self._done.set()

    def _fail(self, failure: BaseException) -> None:
        if not self._done.is_set():
            self.failure = failure
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait_message(self, timeout: float | None = 30.0) -> dict[str, Any]:
        """The raw response message (result or error)."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"no answer to {self.method} (id {self.id!r}) within {timeout} s")
        if self.failure is not None:
            raise self.failure
        assert self.message is not None
        return self.message

    def result(self, timeout: float | None = 30.0) -> dict[str, Any]:
        """The result, or raises BrokerError / ConnectionClosed / TimeoutError."""
        message = self.wait_message(timeout)
        if "error" in message:
            raise BrokerError(message["error"], message.get("id"), message)
        return message["result"]


class BrokerClient:
    """One connection to the broker."""

    def __init__(self, path: str | None = None, *, check_peer: bool = True, connect_timeout: float = 10.0,
                 call_timeout: float = 60.0, reconnect: bool = False) -> None:
        self.path = path or socket_path()
        self.check_peer = check_peer
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.reconnect = reconnect
        self.notifications: list[dict[str, Any]] = []  # every broker notification, in arrival order
        self.connection_errors: list[BrokerError] = []  # error responses with "id": null, in arrival order
        self.received: list[dict[str, Any]] = []  # every message received, in arrival order
        self.unmatched: list[dict[str, Any]] = []  # responses whose id matched no pending request
        self._notification_handlers: dict[str, Callable[[dict[str, Any]], None]] = {}
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._pending: dict[tuple[str, Any], PendingRequest] = {}
        self._next_id = 1
        self._send_lock = threading.Lock()
        self.sock: socket.socket | None = None
        self.closed = True
        self.close_reason: str | None = None  # "eof", "reset", "protocol", "local"
        self.peer: tuple[int, int, int] | None = None
        self.protocol_failure: BaseException | None = None
        self._reader: threading.Thread | None = None
        self.connect()

    # -- connection ---------------------------------------------------------------------------------------------

    def connect(self) -> None:
        if self.check_peer:
            problem = private_directory_problem(os.path.dirname(self.path) or ".")
            if problem is not None:
                raise PermissionError(f"refusing the socket {self.path}: {problem} (section 2.1, rule 5)")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.connect_timeout)
        try:
            sock.connect(self.path)
        except BaseException:
            sock.close()
            raise
        sock.settimeout(None)
        self.peer = peer_credentials(sock)
        if self.check_peer and self.peer[1] != os.getuid():
            sock.close()
            raise PermissionError(f"the socket {self.path} is served by uid {self.peer[1]}, not {os.getuid()}")
        with self._lock:
            self.sock = sock
            self.closed = False
            self.close_reason = None
        self._reader = threading.Thread(target=self._read_loop, args=(sock,), daemon=True,
                                        name=f"tokenbroker-reader-{self.path}")
        self._reader.start()

    def _ensure_connected(self) -> None:
        with self._lock:
            if not self.closed:
                return
            if not self.reconnect or self._pending:
                raise ConnectionClosed(f"the connection is closed ({self.close_reason})", self._last_connection_error())
        self.connect()

    def _last_connection_error(self) -> BrokerError | None:
        return self.connection_errors[-1] if self.connection_errors else None

    def close(self) -> None:
        with self._lock:
            sock = self.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(5)
        with self._lock:
            if not self.closed:
                self._mark_closed("local")

    def __enter__(self) -> "BrokerClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def shutdown_write(self) -> None:
        """shutdown(SHUT_WR), as socat and nc -N do after their last request (section 2.3)."""
        assert self.sock is not None
        self.sock.shutdown(socket.SHUT_WR)

    def wait_closed(self, timeout: float) -> bool:
        """Waits until the broker closes the connection; True when it did within timeout."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not self.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    def wait_connection_error(self, timeout: float, count: int = 1) -> BrokerError:
        """Waits for the count-th error response with "id": null on this connection."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.connection_errors) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.closed and len(self.connection_errors) < count):
                    raise TimeoutError(f"no error response with id null (wanted {count}, got "
                                       f"{len(self.connection_errors)}; closed={self.closed})")
                self._changed.wait(remaining)
            return self.connection_errors[count - 1]

    def wait_message(self, predicate: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
        """Waits for the first received message (in arrival order) that satisfies predicate."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for message in self.received:
                    if predicate(message):
                        return message
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.closed:
                    raise TimeoutError(f"no such message within {timeout} s (closed={self.closed}, "
                                       f"received {len(self.received)})")
                self._changed.wait(remaining)

    def wait_received(self, count: int, timeout: float) -> list[dict[str, Any]]:
        """Waits until at least count messages have been received; returns them all."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while len(self.received) < count:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.closed:
                    break
                self._changed.wait(remaining)
            return list(self.received)

    # -- reading ------------------------------------------------------------------------------------------------

    def _read_loop(self, sock: socket.socket) -> None:
        buffer = bytearray()
        reason = "eof"
        try:
            while True:
                try:
                    chunk = sock.recv(1 << 20)
                except ConnectionResetError:
                    reason = "reset"
                    break
                except OSError as error:
                    reason = "reset" if error.errno in (errno.ECONNRESET, errno.EPIPE) else "local"
                    break
                if not chunk:
                    break
                start = len(buffer)
                buffer += chunk
                while True:
                    newline = buffer.find(b"\n", start)
                    if newline < 0:
                        if len(buffer) > MAX_RESPONSE_FRAME:
                            raise ProtocolFailure("a line from the broker is over 64 MiB")
                        break
                    line = bytes(buffer[:newline])
                    del buffer[: newline + 1]
                    start = 0
                    if len(line) > MAX_RESPONSE_FRAME:
                        raise ProtocolFailure("a line from the broker is over 64 MiB")
                    self._dispatch(parse_line(line))
        except (ProtocolFailure, ValueError) as failure:
            reason = "protocol"
            with self._lock:
                self.protocol_failure = failure
            try:
                sock.close()
            except OSError:
                pass
        with self._lock:
            if self.sock is sock:
                self._mark_closed(reason)

    def _mark_closed(self, reason: str) -> None:  # with self._lock held
        self.closed = True
        self.close_reason = reason
        failure = ConnectionClosed(f"the broker closed the connection ({reason}) before answering",
                                   self._last_connection_error())
        for pending in self._pending.values():
            pending._fail(failure)
        self._pending.clear()
        self._changed.notify_all()

    def _dispatch(self, message: Any) -> None:
        if not isinstance(message, dict):
            raise ProtocolFailure("the broker sent a JSON value that is not an object")
        handler = None
        with self._lock:
            self.received.append(message)
            if "id" in message and ("result" in message or "error" in message):
                request_id = message["id"]
                if request_id is None:
                    self.connection_errors.append(BrokerError(message.get("error", {}), None, message))
                else:
                    pending = self._pending.pop(_id_key(request_id), None)
                    if pending is None:
                        self.unmatched.append(message)
                    else:
                        pending._complete(message)
            elif "method" in message and "id" not in message:
                self.notifications.append(message)
                params = message.get("params")
                if isinstance(params, dict):
                    handler = self._notification_handlers.get(params.get("correlationId"))
            else:
                self.unmatched.append(message)
            self._changed.notify_all()
        if handler is not None:
            handler(message)

    def notifications_for(self, correlation_id: str, method: str | None = None) -> list[dict[str, Any]]:
        """The notifications received so far about one interactive request (by params.correlationId), in arrival
        order; only those named method when it is given."""
        with self._lock:
            return [n for n in self.notifications
                    if isinstance(n.get("params"), dict) and n["params"].get("correlationId") == correlation_id
                    and (method is None or n.get("method") == method)]

    def wait_notification(self, correlation_id: str, method: str | None = None, timeout: float = 30.0,
                          count: int = 1) -> dict[str, Any]:
        """Waits, while requests stay pending, until the count-th notification about correlation_id (named method,
        when given) has arrived, and returns it. Raises TimeoutError when it does not come within timeout or the
        connection closes first."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                matching = [n for n in self.notifications
                            if isinstance(n.get("params"), dict) and n["params"].get("correlationId") == correlation_id
                            and (method is None or n.get("method") == method)]
                if len(matching) >= count:
                    return matching[count - 1]
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self.closed:
                    got = [n.get("method") for n in self.notifications
                           if isinstance(n.get("params"), dict) and n["params"].get("correlationId") == correlation_id]
                    raise TimeoutError(f"no {method or 'notification'} #{count} for {correlation_id} within "
                                       f"{timeout} s (closed={self.closed}; got {got})")
                self._changed.wait(remaining)

    def position(self, message: dict[str, Any]) -> int:
        """The index of this very message (by identity) in received, the arrival order."""
        with self._lock:
            for index, candidate in enumerate(self.received):
                if candidate is message:
                    return index
        raise ValueError("the message was not received on this connection")

    def on_notification(self, correlation_id: str, handler: Callable[[dict[str, Any]], None]) -> None:
        """Routes the notifications of one interactive request (by correlationId) to handler."""
        with self._lock:
            self._notification_handlers[correlation_id] = handler

    # -- writing ------------------------------------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        """Writes bytes as they are (for tests of malformed input)."""
        assert self.sock is not None
        with self._send_lock:
            self.sock.sendall(data)

    def new_id(self) -> int:
        with self._lock:
            request_id = self._next_id
            self._next_id += 1
            return request_id

    def send(self, method: str, params: dict[str, Any] | None = None, *, request_id: Any = None,
             correlation_id: str | bool = True, omit_params: bool = False) -> PendingRequest:
        """Sends one request without waiting. correlation_id: True generates one, False sends none, a string is
        used as is. omit_params sends no params member at all (allowed for PARAMS_OPTIONAL methods)."""
        self._ensure_connected()
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.new_id() if request_id is None else request_id,
                                   "method": method}
        corr: str | None = None
        if not omit_params:
            params = dict(params or {})
            if correlation_id is True:
                params.setdefault("correlationId", str(uuid.uuid4()))
            elif isinstance(correlation_id, str):
                params["correlationId"] = correlation_id
            corr = params.get("correlationId") if isinstance(params.get("correlationId"), str) else None
            message["params"] = params
        line = encode_message(message)
        if len(line) > MAX_REQUEST_FRAME:
            raise ValueError(f"a request is limited to {MAX_REQUEST_FRAME} bytes; this one has {len(line)}")
        pending = PendingRequest(message["id"], method, corr)
        key = _id_key(message["id"])
        with self._lock:
            if key in self._pending:
                raise ValueError(f"id {message['id']!r} is still pending on this connection")
            if self.closed:
                raise ConnectionClosed(f"the connection is closed ({self.close_reason})", self._last_connection_error())
            self._pending[key] = pending
        try:
            self.send_raw(line + b"\n")
        except OSError as error:
            with self._lock:
                self._pending.pop(key, None)
            raise ConnectionClosed(f"could not send: {error}", self._last_connection_error()) from error
        return pending

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        """Sends a JSON-RPC notification (no id): executed by the broker, never answered."""
        self._ensure_connected()
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send_raw(encode_message(message) + b"\n")

    def call(self, method: str, params: dict[str, Any] | None = None, *, timeout: float | None = None,
             **options: Any) -> dict[str, Any]:
        """Sends one request and waits for its result (raises BrokerError on an error response)."""
        return self.send(method, params, **options).result(self.call_timeout if timeout is None else timeout)

    # -- one method per protocol method (section 9) --------------------------------------------------------------

    def get_linux_broker_version(self, protocol_version: str | None = PROTOCOL_VERSION,
                                 msal_cpp_version: str | None = None, **options: Any) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if protocol_version is not None:
            params["protocolVersion"] = protocol_version
        if msal_cpp_version is not None:
            params["msalCppVersion"] = msal_cpp_version
        return self.call("getLinuxBrokerVersion", params, **options)

    def negotiate(self) -> dict[str, Any]:
        """getLinuxBrokerVersion with our version; refuses a broker of another major (section 7)."""
        result = self.get_linux_broker_version(PROTOCOL_VERSION)
        if str(result.get("protocolVersion", "")).split(".")[0] != PROTOCOL_VERSION.split(".")[0]:
            raise BrokerError({"code": ERROR_CODES["unsupported_protocol_version"],
                               "message": f"the broker speaks {result.get('protocolVersion')}",
                               "data": {"errorCode": "unsupported_protocol_version"}})
        return result

    def get_accounts(self, client_id: str | None = None, authority: str | None = None,
                     **options: Any) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if client_id is not None:
            params["clientId"] = client_id
        if authority is not None:
            params["authority"] = authority
        return self.call("getAccounts", params, **options)

    def get_account(self, identifier: str | None = None, username: str | None = None,
                    **options: Any) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if identifier is not None:
            params["identifier"] = identifier
        if username is not None:
            params["username"] = username
        return self.call("getAccount", params, **options)

    def acquire_token_silently(self, auth_parameters: dict[str, Any], **options: Any) -> dict[str, Any]:
        return self.call("acquireTokenSilently", {"authParameters": auth_parameters}, **options)

    def acquire_token_interactively(self, auth_parameters: dict[str, Any], webview_type: str | None = None,
                                    browser_profile: str | None = None,
                                    environment: dict[str, str] | None = None, timeout_seconds: int | None = None,
                                    on_notification: Callable[[dict[str, Any]], None] | None = None,
                                    correlation_id: str | None = None, **options: Any) -> dict[str, Any]:
        params = _interactive_params(auth_parameters, webview_type, browser_profile, environment, timeout_seconds,
                                     correlation_id)
        if on_notification is not None:
            self.on_notification(params["correlationId"], on_notification)
        options.setdefault("timeout", (timeout_seconds or 300) + 30)
        return self.call("acquireTokenInteractively", params, **options)

    def start_interactive(self, auth_parameters: dict[str, Any], webview_type: str | None = None,
                          browser_profile: str | None = None, environment: dict[str, str] | None = None,
                          timeout_seconds: int | None = None, correlation_id: str | None = None,
                          **options: Any) -> PendingRequest:
        """Sends acquireTokenInteractively without waiting: the caller reads the notifications (wait_notification,
        notifications_for) while the request is pending, then waits for the PendingRequest."""
        params = _interactive_params(auth_parameters, webview_type, browser_profile, environment, timeout_seconds,
                                     correlation_id)
        return self.send("acquireTokenInteractively", params, **options)

    def complete_interactive_flow(self, correlation_id: str, response_url: str, **options: Any) -> dict[str, Any]:
        return self.call("completeInteractiveFlow", {"correlationId": correlation_id, "responseUrl": response_url},
                         correlation_id=False, **options)

    def cancel_interactive_flow(self, correlation_id: str, **options: Any) -> dict[str, Any]:
        return self.call("cancelInteractiveFlow", {"correlationId": correlation_id}, correlation_id=False, **options)

    def remove_account(self, identifier: str | None = None, username: str | None = None,
                       client_id: str | None = None, **options: Any) -> dict[str, Any]:
        selector: dict[str, Any] = {}
        if identifier is not None:
            selector["identifier"] = identifier
        if username is not None:
            selector["username"] = username
        params: dict[str, Any] = {"account": selector}
        if client_id is not None:
            params["clientId"] = client_id
        return self.call("removeAccount", params, **options)

    def import_cache(self, data: str, format: str | None = "msal", **options: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"data": data}
        if format is not None:
            params["format"] = format
        return self.call("importCache", params, **options)

    def export_cache(self, format: str | None = "msal", client_id: str | None = None,
                     **options: Any) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if format is not None:
            params["format"] = format
        if client_id is not None:
            params["clientId"] = client_id
        return self.call("exportCache", params, **options)

    def get_status(self, **options: Any) -> dict[str, Any]:
        return self.call("getStatus", {}, **options)

    def get_key_status(self, **options: Any) -> dict[str, Any]:
        return self.call("getKeyStatus", {}, **options)

    def unlock_cache(self, passphrase: str | None = None, **options: Any) -> dict[str, Any]:
        """The passphrase is a secret (section 14): never log it, nor the request that carries it."""
        return self.call("unlockCache", {} if passphrase is None else {"passphrase": passphrase}, **options)

    def move_cache_key(self, to: str, passphrase: str | None = None, **options: Any) -> dict[str, Any]:
        params: dict[str, Any] = {"to": to}
        if passphrase is not None:
            params["passphrase"] = passphrase
        return self.call("moveCacheKey", params, **options)


def _interactive_params(auth_parameters: dict[str, Any], webview_type: str | None,
                        browser_profile: str | None, environment: dict[str, str] | None,
                        timeout_seconds: int | None, correlation_id: str | None) -> dict[str, Any]:
    """The params of acquireTokenInteractively (section 10.1), with a fresh correlationId unless one is given."""
    params: dict[str, Any] = {"authParameters": auth_parameters, "correlationId": correlation_id or str(uuid.uuid4())}
    optional = {"webviewType": webview_type, "browserProfile": browser_profile, "environment": environment,
                "timeoutSeconds": timeout_seconds}
    params.update({name: value for name, value in optional.items() if value is not None})
    return params


def _probe(path: str, check_peer: bool, wait: float) -> dict[str, Any]:
    client = BrokerClient(path, check_peer=check_peer)
    closed = client.wait_closed(wait)
    how = client.close_reason if closed else "open"
    lines = list(client.received)
    client.close()
    return {"lines": lines, "closed": closed, "how": how, "uid": os.getuid()}


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="tokenbroker wire-protocol client")
    parser.add_argument("--socket", help="socket path (default: the rule of Protocol/README.md section 2.1)")
    parser.add_argument("--no-peer-check", action="store_true", help="do not refuse a socket served by another uid")
    sub = parser.add_subparsers(dest="command", required=True)
    call = sub.add_parser("call", help="call one method and print its result")
    call.add_argument("method")
    call.add_argument("params", nargs="?", help="params as a JSON object")
    probe = sub.add_parser("probe", help="connect, send nothing, print what the broker sends")
    probe.add_argument("--wait", type=float, default=5.0)
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        path = args.socket or socket_path()
        if args.command == "probe":
            print(json.dumps(_probe(path, not args.no_peer_check, args.wait)))
            return 0
        params = json.loads(args.params) if args.params else None
        with BrokerClient(path, check_peer=not args.no_peer_check) as client:
            try:
                if params is None and args.method in PARAMS_OPTIONAL:
                    result = client.call(args.method, omit_params=True)
                else:
                    result = client.call(args.method, params)
            except BrokerError as error:
                print(json.dumps(error.error), file=sys.stdout)
                return 1
    except (OSError, TimeoutError, ValueError) as error:
        print(f"tokenbroker_client: {error}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
