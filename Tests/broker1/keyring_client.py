#!/usr/bin/python3
"""The Secret Service items of one schema on a session bus, with libsecret (Debian's python3-gi, gir1.2-secret-1),
for the Broker1 test: how many MSALRuntime keeps, and removing them as a user would in a keyring manager.

    keyring_client.py ADDRESS count SCHEMA     # prints the number of items whose xdg:schema is SCHEMA
    keyring_client.py ADDRESS clear SCHEMA     # deletes them; prints how many it deleted

Only attributes are read, never a secret.
"""

import os
import sys

import gi

gi.require_version("Secret", "1")
from gi.repository import Secret  # noqa: E402


def items(schema: str) -> list:
    service = Secret.Service.get_sync(Secret.ServiceFlags.OPEN_SESSION, None)
    return service.search_sync(None, {"xdg:schema": schema}, Secret.SearchFlags.ALL, None)


def main() -> int:
    address, mode, schema = sys.argv[1:]
    os.environ["DBUS_SESSION_BUS_ADDRESS"] = address
    found = items(schema)
    if mode == "clear":
        for item in found:
            item.delete_sync(None)
    elif mode != "count":
        raise SystemExit(f"unknown mode {mode}")
    print(len(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
