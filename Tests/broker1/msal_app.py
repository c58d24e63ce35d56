#!/usr/bin/env python3
"""One MSAL Python app with the broker turned on, as an app would be: a process of its own.

    msal_app.py CLIENT_ID AUTHORITY CA_FILE SCOPE [--cache FILE] ACTION [ACTION...]

ACTION is `interactive` (acquire_token_interactive, which asks the broker silently first), `silent`
(acquire_token_silent with the first account), `refresh` (the same with force_refresh=True, which skips MSAL
Python's own access token cache), or `claims` (acquire_token_silent with a claims challenge, which skips it too).
`--cache FILE` keeps MSAL Python's token cache in FILE across processes, as apps that persist it do (the Azure
CLI, azure-identity's TokenCachePersistenceOptions); without it the cache lives only as long as the process.

Prints a first line with this process's pid and executable (what the broker's audit line names), then one JSON
line per action: what MSAL returned, with the access token only as a SHA-256 digest, and `broker_calls`: each call
MSAL Python made into pymsalruntime (msal.broker) during the action, with what it returned before MSAL Python
cleaned it up (`acquire_token_silent` turns any error into None and drops `_broker_status`; this is where the
broker's status is still visible). No token is printed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import msal
import msal.broker
import requests

CLAIMS = {
    # A claims challenge as a resource sends it (Conditional Access asking for an authentication context).
    "claims": '{"access_token":{"acrs":{"essential":true,"value":"c1"}}}',
}


def digest(token: str | None) -> str | None:
    return hashlib.sha256(token.encode()).hexdigest() if token else None


def summary(result: dict | None) -> dict:
    if result is None:
        return {"result": None}
    claims = result.get("id_token_claims") or {}
    return {
        "token_sha256": digest(result.get("access_token")),
        "token_source": result.get("token_source"),
        "error": result.get("error"),
        "error_description": result.get("error_description"),
        "username": claims.get("preferred_username"),
        "has_refresh_token": "refresh_token" in result,
    }


broker_calls: list[dict[str, Any]] = []


def observed(name: str) -> None:
    """Wraps msal.broker.NAME (MSAL Python imports it from the module at each call) to record what it returned."""
    original = getattr(msal.broker, name)

    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        record: dict[str, Any] = {"call": name}
        if result is None:
            record["result"] = None  # MSALRuntime knew no account of that id: nothing was asked
        else:
            status = result.get("_broker_status")
            record.update({
                "token_sha256": digest(result.get("access_token")),
                "error": result.get("error"),
                "broker_status": getattr(status, "name", None if status is None else str(status)),
                "error_description": result.get("error_description"),
            })
        broker_calls.append(record)
        return result

    setattr(msal.broker, name, call)


def main() -> int:
    client_id, authority, ca_file, scope, *actions = sys.argv[1:]
    cache_file = None
    if actions[:1] == ["--cache"]:
        cache_file, actions = Path(actions[1]), actions[2:]
    cache = msal.SerializableTokenCache()
    if cache_file and cache_file.exists():
        cache.deserialize(cache_file.read_text())
    for name in ("_signin_silently", "_signin_interactively", "_acquire_token_silently"):
        observed(name)
    session = requests.Session()
    session.verify = ca_file
    app = msal.PublicClientApplication(client_id, authority=authority, http_client=session, token_cache=cache,
                                       instance_discovery=False, enable_broker_on_linux=True)
    # MSALRuntime is a library in this process: the broker sees this pid and executable calling.
    print(json.dumps({"broker_enabled": bool(app._enable_broker), "pid": os.getpid(),
                      "exe": os.readlink("/proc/self/exe")}), flush=True)
    for action in actions:
        broker_calls.clear()
        if action == "interactive":
            result = app.acquire_token_interactive(
                [scope], parent_window_handle=app.CONSOLE_WINDOW_HANDLE, timeout=60)
        else:
            accounts = app.get_accounts()
            if not accounts:
                print(json.dumps({"action": action, "result": None, "accounts": 0}), flush=True)
                continue
            result = app.acquire_token_silent([scope], account=accounts[0], force_refresh=action == "refresh",
                                              claims_challenge=CLAIMS["claims"] if action == "claims" else None)
        print(json.dumps({"action": action, **summary(result), "broker_calls": broker_calls}), flush=True)
    if cache_file and cache.has_state_changed:
        cache_file.write_text(cache.serialize())
        cache_file.chmod(0o600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
