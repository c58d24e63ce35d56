#!/usr/bin/env python3
"""One MSAL Python app with the broker turned on, as an app would be: a process of its own.

    msal_app.py CLIENT_ID AUTHORITY CA_FILE SCOPE ACTION [ACTION...]

ACTION is `interactive` (acquire_token_interactive, which asks the broker silently first), `silent`
(acquire_token_silent with the first account), or `claims` (acquire_token_silent with a claims challenge).
Prints one JSON line per action: what MSAL returned, with the access token only as a SHA-256 digest.
"""

from __future__ import annotations

import hashlib
import json
import sys

import msal
import requests


def summary(result: dict | None) -> dict:
    if result is None:
        return {"result": None}
    token = result.get("access_token")
    claims = result.get("id_token_claims") or {}
    return {
        "token_sha256": hashlib.sha256(token.encode()).hexdigest() if token else None,
        "token_source": result.get("token_source"),
        "error": result.get("error"),
        "error_description": result.get("error_description"),
        "broker_status": result.get("_broker_status"),
        "username": claims.get("preferred_username"),
        "has_refresh_token": "refresh_token" in result,
    }


def main() -> int:
    client_id, authority, ca_file, scope, *actions = sys.argv[1:]
    session = requests.Session()
    session.verify = ca_file
    app = msal.PublicClientApplication(client_id, authority=authority, http_client=session,
                                       instance_discovery=False, enable_broker_on_linux=True)
    print(json.dumps({"broker_enabled": bool(app._enable_broker)}), flush=True)
    for action in actions:
        if action == "interactive":
            result = app.acquire_token_interactive(
                [scope], parent_window_handle=app.CONSOLE_WINDOW_HANDLE, timeout=60)
        else:
            accounts = app.get_accounts()
            if not accounts:
                print(json.dumps({"action": action, "result": None, "accounts": 0}), flush=True)
                continue
            claims = '{"access_token":{"acrs":{"essential":true,"value":"c1"}}}' if action == "claims" else None
            result = app.acquire_token_silent([scope], account=accounts[0], claims_challenge=claims)
        print(json.dumps({"action": action, **summary(result)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
