#!/usr/bin/env python3
"""A container's app asking the managed-identity endpoint through a real SDK, as one process.

    mi_app.py azure-identity|default|msal RESOURCE_OR_SCOPE [CLIENT_ID]

IDENTITY_ENDPOINT and IDENTITY_HEADER come from the environment (the grant's env file). Prints one JSON line:
{"ok": true, "digest": <sha-256 prefix of the token>, "expires_on": <epoch s>} or {"ok": false, "error": <type>,
"message": <the SDK's message>}. Never the token.
"""

import hashlib
import json
import sys


def main() -> None:
    sdk, resource = sys.argv[1], sys.argv[2]
    client_id = sys.argv[3] if len(sys.argv) > 3 else None
    try:
        if sdk in ("azure-identity", "default"):
            from azure.identity import DefaultAzureCredential, ManagedIdentityCredential
            credential = (ManagedIdentityCredential(client_id=client_id) if sdk == "azure-identity"
                          else DefaultAzureCredential(exclude_interactive_browser_credential=True))
            token = credential.get_token(resource)
            answer = {"ok": True, "digest": hashlib.sha256(token.token.encode()).hexdigest()[:16],
                      "expires_on": token.expires_on}
        else:
            import msal
            import requests
            identity = (msal.UserAssignedManagedIdentity(client_id=client_id) if client_id
                        else msal.SystemAssignedManagedIdentity())
            result = msal.ManagedIdentityClient(identity, http_client=requests.Session()).acquire_token_for_client(
                resource=resource)
            if "access_token" in result:
                answer = {"ok": True, "digest": hashlib.sha256(result["access_token"].encode()).hexdigest()[:16],
                          "expires_on": result.get("expires_in", 0)}
            else:
                answer = {"ok": False, "error": result.get("error"), "message": result.get("error_description", "")}
    except Exception as error:  # noqa: BLE001 - the SDK's error is the answer
        answer = {"ok": False, "error": type(error).__name__, "message": str(error)}
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
