#!/usr/bin/python3
"""Drives gnome-keyring-daemon on a bus for the key tests, as a user at a desktop would (Debian's python3-dbus).

    keyring_control.py BUS_ADDRESS lock              # locks the default collection
    keyring_control.py BUS_ADDRESS unlock PASSWORD   # unlocks it headless (gnome-keyring's own interface)
    keyring_control.py BUS_ADDRESS read CACHE_ID     # prints tokenbroker's key for CACHE_ID, base64
    keyring_control.py BUS_ADDRESS count             # prints how many items of tokenbroker's schema there are
"""

import base64
import sys

import dbus

SERVICE = "org.freedesktop.secrets"


def main() -> int:
    address, command, *arguments = sys.argv[1:]
    bus = dbus.bus.BusConnection(address)
    secrets = bus.get_object(SERVICE, "/org/freedesktop/secrets")
    service = dbus.Interface(secrets, "org.freedesktop.Secret.Service")
    collection = service.ReadAlias("default")
    if command == "lock":
        service.Lock([collection])
    elif command == "unlock":
        _, session = service.OpenSession("plain", dbus.String("", variant_level=1))
        internal = dbus.Interface(secrets, "org.gnome.keyring.InternalUnsupportedGuiltRiddenInterface")
        secret = dbus.Struct((session, dbus.ByteArray(b""), dbus.ByteArray(arguments[0].encode()), "text/plain"))
        internal.UnlockWithMasterPassword(collection, secret)
    elif command == "read":
        unlocked, _ = service.SearchItems({"cache": arguments[0]})
        if len(unlocked) != 1:
            print(f"{len(unlocked)} unlocked items for the cache", file=sys.stderr)
            return 1
        _, session = service.OpenSession("plain", dbus.String("", variant_level=1))
        found = service.GetSecrets(unlocked, session)
        print(base64.b64encode(bytes(found[unlocked[0]][2])).decode())
    elif command == "count":
        unlocked, locked = service.SearchItems({"xdg:schema": "org.tokenbroker.CacheKey"})
        print(len(unlocked) + len(locked))
    else:
        print(f"unknown command {command}", file=sys.stderr)
        return 64
    return 0


if __name__ == "__main__":
    sys.exit(main())
