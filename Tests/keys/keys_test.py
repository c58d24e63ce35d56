#!/usr/bin/env python3
"""The cache key where Linux keeps secrets: the keyring, the TPM, a passphrase; moves without loss.

Usage (through Tests/keys/run.sh, which gives it a network namespace of its own):

    python3 Tests/keys/keys_test.py --bin .build/debug [--keep]

What it starts, all for real: tokenbroker-test-idp with TLS on 127.0.0.1:443 and a real sign-in through it; a
private dbus-daemon with gnome-keyring-daemon (unlocked with its password on stdin); two software TPMs (swtpm,
reached through tpm2-tss's swtpm TCTI); tokenbrokerd, started, stopped, killed and started again on copies of one
state directory. The test reads the key and the tokens only to look for their bytes in the state directory; it
never prints them.

Each check prints `ok` or `FAIL` with the reason; the exit status is 1 when any failed.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "interop"))
sys.path.insert(0, str(HERE.parent / "broker1"))
from broker1_test import SYSTEM_PYTHON, Bus, Keyring  # noqa: E402
from interop_test import MSAL_APP, GRACE, Checks, Daemon, Provider, expect, run_suite, wait_for  # noqa: E402
from tokenbroker_client import BrokerError  # noqa: E402

PASSPHRASE = "correct horse battery staple"
KEYRING_PASSWORD = "keyring-password"  # what broker1_test's Keyring unlocks the login collection with
# What the key stores load on first use (Sources/CKeyStores/Library.h), never before.
STORE_LIBRARIES = ["libsecret-1.so", "libglib-2.0.so", "libgio-2.0.so", "libgobject-2.0.so", "libtss2-esys.so",
                   "libtss2-mu.so", "libtss2-tctildr.so"]


class SoftwareTPM:
    """swtpm with a TPM 2.0 of its own, on a loopback port; `tcti` is the tpm2-tss configuration to reach it."""

    def __init__(self, directory: Path) -> None:
        self.state = directory
        self.state.mkdir()
        # tpm2-tss's swtpm TCTI sends commands to `port` and control messages to the port after it.
        self.port = free_port_pair()
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def tcti(self) -> str:
        return f"swtpm:host=127.0.0.1,port={self.port}"

    def start(self) -> None:
        control = self.port + 1
        self.process = subprocess.Popen(
            ["swtpm", "socket", "--tpm2", "--tpmstate", f"dir={self.state}",
             "--server", f"type=tcp,port={self.port},bindaddr=127.0.0.1",
             "--ctrl", f"type=tcp,port={control},bindaddr=127.0.0.1", "--flags", "not-need-init,startup-clear"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for("swtpm listening", lambda: connectable(self.port) or self.process.poll() is not None, 60)
        expect(self.process.poll() is None, "swtpm exited")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


def free_port_pair() -> int:
    """A free port whose successor is free too."""
    for _ in range(100):
        with socket.socket() as first, socket.socket() as second:
            first.bind(("127.0.0.1", 0))
            port = int(first.getsockname()[1])
            try:
                second.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError("no two free ports in a row")


def connectable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class KeysTest(Checks):
    def __init__(self, binaries: Path, directory: Path) -> None:
        super().__init__()
        self.binaries = binaries
        self.directory = directory
        self.provider = Provider(binaries / "tokenbroker-test-idp", directory)
        self.browser = self.provider.browser_script(directory / "browser.sh", GRACE)
        self.bus = Bus(directory)
        self.keyring = Keyring(directory, self.bus)
        self.tpm = SoftwareTPM(directory / "tpm-a")
        self.other_tpm = SoftwareTPM(directory / "tpm-b")
        self.daemons: list[Daemon] = []
        self.runs = 0
        self.tokens: list[str] = []  # the secrets of the signed-in cache, to look for on disk and to find again
        self.pristine = directory / "pristine"  # a state directory from before key stores: a plain key file

    # -- helpers ---------------------------------------------------------------------------------------------------

    def place(self, name: str, state: Path | None = None) -> Path:
        """A new directory for one daemon's run; its state a copy of `state`, if given."""
        self.runs += 1
        place = self.directory / f"run-{self.runs:02d}-{name}"
        place.mkdir(mode=0o700)
        if state is not None:
            shutil.copytree(state, place / "state", symlinks=True)
        return place

    def start(self, place: Path, *, tpm: SoftwareTPM | None = None, keyring: bool = False,
              stores: str | None = None, extra: dict[str, str] | None = None, wait: bool = True) -> Daemon:
        for earlier in self.daemons:  # one left running by a failed check must not hold this state directory
            if earlier.socket.parent.parent.parent == place and earlier.process.poll() is None:
                earlier.process.kill()
                earlier.process.wait(10)
        environment = {"TOKENBROKER_TPM_TCTI": tpm.tcti if tpm else "device:/nonexistent"}
        if keyring:
            environment["DBUS_SESSION_BUS_ADDRESS"] = self.bus.address
        if stores:
            config = place / ".config" / "tokenbroker"
            config.mkdir(parents=True, exist_ok=True)
            (config / "tokenbrokerd.conf").write_text(f"key-stores = {stores}\n")
        daemon = Daemon(self.binaries, place, self.provider.certificate, extra={**environment, **(extra or {})},
                        wait=wait)
        self.daemons.append(daemon)
        return daemon

    @staticmethod
    def key_status(daemon: Daemon) -> dict[str, Any]:
        result = daemon.cli("key", "status", "--json")
        expect(result.returncode == 0, f"key status failed ({result.returncode}): {result.stderr.strip()[-300:]}")
        return dict(json.loads(result.stdout))

    def token(self, daemon: Daemon) -> subprocess.CompletedProcess[str]:
        return daemon.cli("token", "--client-id", MSAL_APP, "--authority", self.provider.authority,
                          "--scope", "https://graph.microsoft.com/User.Read")

    def exported_secrets(self, daemon: Daemon) -> list[str]:
        """Every secret of the cache, through `tokenbroker export` (never printed)."""
        out = daemon.socket.parent.parent / "export.json"
        out.unlink(missing_ok=True)
        result = daemon.cli("export", "--output", str(out))
        expect(result.returncode == 0, f"export failed ({result.returncode}): {result.stderr.strip()[-300:]}")
        document = json.loads(out.read_text())
        out.unlink()
        return sorted(entry["secret"] for section in ("AccessToken", "RefreshToken", "IdToken")
                      for entry in document.get(section, {}).values())

    def expect_all_tokens(self, daemon: Daemon, where: str) -> None:
        found = self.exported_secrets(daemon)
        expect(found == self.tokens, f"{where}: {len(found)} secrets, expected the {len(self.tokens)} signed in")

    def expect_nothing_in_clear(self, state: Path, key: bytes | None, extra: list[bytes] | None = None) -> None:
        """No file the broker wrote holds the key (raw, base64 or hex) or a token's bytes."""
        needles: list[tuple[str, bytes]] = [("a token", token.encode()) for token in self.tokens]
        if key is not None:
            needles += [("the key", key), ("the key", base64.b64encode(key)), ("the key", key.hex().encode())]
        needles += [("a secret", value) for value in extra or []]
        files = [path for path in state.rglob("*") if path.is_file()]
        expect(files, "the state directory is empty")
        for path in files:
            data = path.read_bytes()
            for what, needle in needles:
                expect(needle not in data, f"{path.relative_to(state)} holds {what}")

    def expect_nothing_in_clear_while_running(self, daemon: Daemon, state: Path, key: bytes | None) -> None:
        """The same scan while the daemon runs, right after an import wrote a token of its own: the write-ahead log
        holds the last commits (a scan after a clean stop would find it checkpointed away), and neither it nor any
        other file holds the key, a token's bytes, or the token just written."""
        needle = "scan-" + base64.b32encode(os.urandom(20)).decode()
        home, env, client, realm = "scan.tenant", "login.microsoftonline.com", "scan-client", "tenant"
        far = str(int(time.time()) + 86400)
        document = {
            "Account": {f"{home}-{env}-{realm}": {"home_account_id": home, "environment": env, "realm": realm,
                                                 "local_account_id": "scan", "username": "scan@example.com",
                                                 "authority_type": "MSSTS"}},
            "AccessToken": {f"{home}-{env}-accesstoken-{client}-{realm}-scan.read": {
                "credential_type": "AccessToken", "secret": needle, "home_account_id": home, "environment": env,
                "client_id": client, "realm": realm, "target": "Scan.Read", "cached_at": far, "expires_on": far}},
        }
        path = daemon.socket.parent.parent / "scan.json"
        path.write_text(json.dumps(document))
        path.chmod(0o600)
        imported = daemon.cli("import", str(path))
        path.unlink()
        expect(imported.returncode == 0, f"the import failed: {imported.stderr.strip()[-300:]}")
        wal = state / "db" / "cache.sqlite3-wal"
        expect(wal.exists() and wal.stat().st_size > 0, "no write-ahead log to scan while the daemon runs")
        self.expect_nothing_in_clear(state, key, [needle.encode()])

    def scan_a_running_copy(self, key: bytes | None, **options: Any) -> None:
        """A copy of the pristine cache (moved to the store `options` offer), scanned while it runs: the cache the
        other checks use keeps exactly the tokens they expect."""
        place = self.place("scan", self.pristine)
        daemon = self.start(place, **options)
        expect(not self.key_status(daemon)["locked"], "the copy did not open")
        self.expect_nothing_in_clear_while_running(daemon, place / "state", key)
        expect(daemon.stop() == 0, "the daemon did not exit 0")

    @staticmethod
    def record(state: Path) -> dict[str, Any] | None:
        path = state / "key.json"
        return dict(json.loads(path.read_text())) if path.exists() else None

    @staticmethod
    def mapped(daemon: Daemon, library: str) -> bool:
        """Whether the running daemon has a file whose name starts with `library` mapped (/proc/PID/maps)."""
        maps = Path(f"/proc/{daemon.process.pid}/maps").read_text()
        return any(Path(line.split()[-1]).name.startswith(library) for line in maps.splitlines()
                   if len(line.split()) >= 6)

    def keyring_control(self, *arguments: str) -> str:
        result = subprocess.run([SYSTEM_PYTHON, str(HERE / "keyring_control.py"), self.bus.address, *arguments],
                                capture_output=True, text=True, timeout=60)
        expect(result.returncode == 0, f"keyring_control {arguments[0]} failed: {result.stderr.strip()[-300:]}")
        return result.stdout.strip()

    # -- the checks ------------------------------------------------------------------------------------------------

    def a_plain_key_file_cache_is_signed_in(self) -> None:
        """The starting point: a cache as 0.4 left it (a plain key file, no record), with real tokens in it."""
        place = self.place("legacy")
        daemon = self.start(place, stores="file")
        result = daemon.cli("login", "--client-id", MSAL_APP, "--authority", self.provider.authority, "--scope",
                            "https://graph.microsoft.com/User.Read", "--webview", "custom", "--browser-command",
                            str(self.browser))
        expect(result.returncode == 0, f"login failed ({result.returncode}): {result.stderr.strip()[-300:]}")
        self.tokens = self.exported_secrets(daemon)
        expect(len(self.tokens) >= 3, f"only {len(self.tokens)} secrets after sign-in")
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        state = place / "state"
        (state / "key.json").unlink()  # as 0.4 left it: no record
        expect((state / "cache.key").stat().st_size == 32, "no 32-byte key file")
        shutil.copytree(state, self.pristine, symlinks=True)
        (self.pristine / "lock").unlink(missing_ok=True)

    def the_plain_key_file_is_said_as_a_warning(self) -> None:
        daemon = self.start(self.place("warned", self.pristine), stores="file")
        status = self.key_status(daemon)
        expect(status["store"] == "file" and status.get("warning") and not status["locked"], f"status {status}")
        shown = daemon.cli("status")
        expect("WARNING" in shown.stdout, f"tokenbroker status does not warn: {shown.stdout[-400:]}")
        # The key stores' libraries are opened on first use: a daemon on a plain key file never maps them.
        for library in STORE_LIBRARIES:
            expect(not self.mapped(daemon, library), f"{library} is mapped by a daemon that never used it")
        # The plain file holds the key by design; the database and its log hold no token in clear even so.
        self.expect_nothing_in_clear_while_running(daemon, daemon.socket.parent.parent.parent / "state", None)
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        log = (daemon.socket.parent.parent.parent / "daemon.log").read_text()
        expect("warning" in log and "plain file in the state directory" in log, "the journal does not warn")

    def moves_to_the_keyring_and_serves(self) -> None:
        key = (self.pristine / "cache.key").read_bytes()
        place = self.place("keyring", self.pristine)
        daemon = self.start(place, keyring=True)
        status = self.key_status(daemon)
        expect(status["store"] == "secret-service" and not status["locked"] and not status.get("warning"),
               f"status {status}")
        expect(not (place / "state" / "cache.key").exists(), "the key file is still there")
        record = self.record(place / "state")
        expect(record is not None and record["store"] == "secret-service", f"record {record}")
        stored = base64.b64decode(self.keyring_control("read", record["cacheID"]))
        expect(stored == key, "the keyring holds another key than the file held")
        expect(self.token(daemon).returncode == 0, "no token served from the keyring's key")
        self.expect_all_tokens(daemon, "after the move")
        expect(self.mapped(daemon, "libsecret-1.so") and not self.mapped(daemon, "libtss2-esys.so"),
               "the keyring's move did not open libsecret (or opened tpm2-tss)")
        self.scan_a_running_copy(key, keyring=True)
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        self.expect_nothing_in_clear(place / "state", key)
        self.keyring_place = place

    def a_locked_keyring_locks_the_cache_until_unlocked(self) -> None:
        place = self.keyring_place
        self.keyring_control("lock")
        try:
            daemon = self.start(place, keyring=True)
            status = self.key_status(daemon)
            expect(status["locked"] and status["store"] == "secret-service" and "locked" in status["problem"],
                   f"status {status}")
            refused = self.token(daemon)
            expect(refused.returncode == 76 and "locked" in refused.stderr,
                   f"token answered {refused.returncode}: {refused.stderr.strip()[-300:]}")
            expect(self.record(place / "state")["store"] == "secret-service", "the record changed while locked")
            expect(not (place / "state" / "cache.key").exists(), "a key file was made while locked")
        finally:
            self.keyring_control("unlock", KEYRING_PASSWORD)
        # Unlocked at the keyring itself (the user at their desktop): the broker sees it when next asked, with no
        # `tokenbroker unlock`; even `key status` asks the keyring again (at most once a second).
        wait_for("key status to see the keyring unlocked", lambda: not self.key_status(daemon)["locked"], 60)
        served = self.token(daemon)
        expect(served.returncode == 0, f"token after unlocking: {served.returncode}: {served.stderr.strip()[-300:]}")
        self.expect_all_tokens(daemon, "after unlocking")
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        # `tokenbroker unlock` has the broker try the keyring again at once.
        self.keyring_control("lock")
        try:
            daemon = self.start(place, keyring=True)
            expect(self.key_status(daemon)["locked"], "the cache opened on a locked keyring")
        finally:
            self.keyring_control("unlock", KEYRING_PASSWORD)
        unlocked = daemon.cli("unlock")
        expect(unlocked.returncode == 0, f"unlock: {unlocked.returncode}: {unlocked.stderr.strip()[-300:]}")
        expect(not self.key_status(daemon)["locked"], "still locked after tokenbroker unlock")
        expect(daemon.stop() == 0, "the daemon did not exit 0")

    def the_users_order_decides_and_a_new_cache_waits_for_a_locked_keyring(self) -> None:
        """key-stores in tokenbrokerd.conf decides where a new cache's key goes, between two stores both there; a new
        cache whose first store is a locked keyring waits for it (locked, no key anywhere), and keeps its key there
        once the keyring is unlocked."""
        for order, expected in (("tpm secret-service file", "tpm"), ("secret-service tpm file", "secret-service")):
            place = self.place("order-" + expected)
            daemon = self.start(place, keyring=True, tpm=self.tpm, stores=order)
            status = self.key_status(daemon)
            expect(status["store"] == expected and not status["locked"], f"{order}: the key went to {status}")
            expect(daemon.stop() == 0, "the daemon did not exit 0")
        place = self.place("new-on-locked")
        self.keyring_control("lock")
        try:
            daemon = self.start(place, keyring=True, stores="secret-service file")
            status = self.key_status(daemon)
            expect(status["locked"] and status["store"] == "secret-service", f"a new cache on a locked keyring: {status}")
            state = place / "state"
            expect(not (state / "cache.key").exists() and self.record(state) is None,
                   "a key was made elsewhere while the keyring was locked")
        finally:
            self.keyring_control("unlock", KEYRING_PASSWORD)
        wait_for("the new cache's key in the unlocked keyring", lambda: not self.key_status(daemon)["locked"], 60)
        record = self.record(place / "state")
        expect(record is not None and record["store"] == "secret-service", f"the new key went to {record}")
        self.keyring_control("read", record["cacheID"])
        expect(daemon.stop() == 0, "the daemon did not exit 0")

    def without_the_keyring_the_cache_stays_locked_and_whole(self) -> None:
        place = self.keyring_place
        daemon = self.start(place)  # no session bus at all
        status = self.key_status(daemon)
        expect(status["locked"] and status["store"] == "secret-service", f"status {status}")
        expect(self.token(daemon).returncode == 76, "a token was answered without the key")
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        expect(not (place / "state" / "cache.key").exists(), "a key file was made without the keyring")
        again = self.start(place, keyring=True)
        self.expect_all_tokens(again, "back with the keyring")
        expect(again.stop() == 0, "the daemon did not exit 0")

    def moves_to_the_tpm_and_only_that_tpm_opens_it(self) -> None:
        key = (self.pristine / "cache.key").read_bytes()
        place = self.place("tpm", self.pristine)
        daemon = self.start(place, tpm=self.tpm)
        status = self.key_status(daemon)
        expect(status["store"] == "tpm" and not status["locked"], f"status {status}")
        expect(not (place / "state" / "cache.key").exists(), "the key file is still there")
        expect(self.token(daemon).returncode == 0, "no token served with the TPM's key")
        expect(self.mapped(daemon, "libtss2-esys.so") and not self.mapped(daemon, "libsecret-1.so"),
               "the TPM's move did not open tpm2-tss (or opened libsecret)")
        self.scan_a_running_copy(key, tpm=self.tpm)
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        self.expect_nothing_in_clear(place / "state", key)
        # The state directory copied to a machine with another TPM opens nothing, and changes nothing.
        copy = self.place("other-tpm", place / "state")
        before = {path.name: path.read_bytes() for path in (copy / "state").iterdir() if path.is_file()}
        stranger = self.start(copy, tpm=self.other_tpm)
        status = self.key_status(stranger)
        expect(status["locked"] and "another machine" in status["problem"], f"status {status}")
        expect(self.token(stranger).returncode == 76, "the other TPM's broker answered a token")
        expect(stranger.stop() == 0, "the daemon did not exit 0")
        after = {path.name: path.read_bytes() for path in (copy / "state").iterdir() if path.is_file()}
        expect(before["key.json"] == after["key.json"] and "cache.key" not in after,
               "the other TPM's broker changed the key record or made a key")
        # The original still opens, with every token.
        original = self.start(place, tpm=self.tpm)
        self.expect_all_tokens(original, "on the original TPM")
        expect(original.stop() == 0, "the daemon did not exit 0")
        # The TPM gone at start (its simulator stopped): locked and whole, nothing made anew; back, the broker finds
        # it at the next request, with no restart.
        self.tpm.stop()
        try:
            before = (place / "state" / "key.json").read_bytes()
            daemon = self.start(place, tpm=self.tpm)
            status = self.key_status(daemon)
            expect(status["locked"] and status["store"] == "tpm", f"without its TPM: {status}")
            expect(self.token(daemon).returncode == 76, "a token was answered without the TPM")
        finally:
            self.tpm.start()
        wait_for("the broker to find its TPM again", lambda: not self.key_status(daemon)["locked"], 60)
        self.expect_all_tokens(daemon, "with the TPM back")
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        expect((place / "state" / "key.json").read_bytes() == before and not (place / "state" / "cache.key").exists(),
               "the key record changed or a key file was made while the TPM was gone")
        self.tpm_place = place

    def without_the_stores_libraries_the_cache_stays_locked_and_whole(self) -> None:
        """libsecret and tpm2-tss not loadable (a file that is no library found first on LD_LIBRARY_PATH, as a broken
        install would leave): the daemon runs, says which library, answers no token and changes nothing."""
        broken = self.directory / "broken-libraries"
        broken.mkdir(exist_ok=True)
        for name in ("libsecret-1.so.0", "libtss2-esys.so.0"):
            (broken / name).write_text("not a library\n")
        for place, options, library in ((self.keyring_place, {"keyring": True}, "libsecret-1.so.0"),
                                        (self.tpm_place, {"tpm": self.tpm}, "libtss2-esys.so.0")):
            before = (place / "state" / "key.json").read_bytes()
            daemon = self.start(place, extra={"LD_LIBRARY_PATH": str(broken)}, **options)
            status = self.key_status(daemon)
            expect(status["locked"] and library in status["problem"], f"status {status}")
            refused = self.token(daemon)
            expect(refused.returncode == 76, f"a token was answered without {library}: {refused.returncode}")
            expect(daemon.stop() == 0, "the daemon did not exit 0")
            expect((place / "state" / "key.json").read_bytes() == before, f"the key record changed without {library}")
            expect(not (place / "state" / "cache.key").exists(), f"a key file was made without {library}")
            again = self.start(place, **options)
            self.expect_all_tokens(again, f"back with {library}")
            expect(again.stop() == 0, "the daemon did not exit 0")

    def a_tpm_library_of_another_version_leaves_none_open(self) -> None:
        """The third of tpm2-tss's libraries loads but lacks a function (a library of another version, here one
        built without any): the store is unavailable, says which function, and the two opened before are closed
        again, so the daemon maps none of them."""
        stub = self.directory / "other-version-libraries"
        stub.mkdir(exist_ok=True)
        (stub / "stub.c").write_text("int tokenbroker_test_stub(void) { return 0; }\n")
        compiler = shutil.which("cc") or shutil.which("clang") or "cc"
        subprocess.run([compiler, "-shared", "-fPIC", "-o", str(stub / "libtss2-tctildr.so.0"), str(stub / "stub.c")],
                       check=True, capture_output=True, timeout=60)
        place = self.tpm_place
        before = (place / "state" / "key.json").read_bytes()
        daemon = self.start(place, extra={"LD_LIBRARY_PATH": str(stub)}, tpm=self.tpm)
        status = self.key_status(daemon)
        expect(status["locked"] and "libtss2-tctildr.so.0 has no Tss2_TctiLdr_" in status["problem"],
               f"status {status}")
        expect(not self.mapped(daemon, "libtss2"), "a tpm2-tss library stays mapped after the store failed to load")
        expect(self.token(daemon).returncode == 76, "a token was answered without tpm2-tss")
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        expect((place / "state" / "key.json").read_bytes() == before, "the key record changed")
        again = self.start(place, tpm=self.tpm)
        self.expect_all_tokens(again, "back with tpm2-tss")
        expect(again.stop() == 0, "the daemon did not exit 0")

    def purging_deletes_the_key_from_the_keyring(self) -> None:
        """`scripts/install.sh --uninstall --purge` on a cache whose key is in the keyring deletes the state directory
        and the keyring's item for that cache, and no other (another cache's key stays)."""
        place = self.place("purge")
        daemon = self.start(place, keyring=True)
        record = self.record(place / "state")
        expect(record is not None and record["store"] == "secret-service", f"a new cache's key went to {record}")
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        # Another cache with its key in the same keyring, made here (copies of one cache share its key and item).
        other_place = self.place("purge-other")
        other_daemon = self.start(other_place, keyring=True)
        expect(other_daemon.stop() == 0, "the other daemon did not exit 0")
        other = self.record(other_place / "state")
        expect(other is not None and other["cacheID"] != record["cacheID"], "the two caches share a key")
        self.keyring_control("read", record["cacheID"])
        # install.sh's layout for the state: $XDG_STATE_HOME/tokenbroker. Its own HOME, and a systemctl that answers
        # no user manager, so that no unit of this machine's user is touched.
        state_home = place / "xdg-state"
        state_home.mkdir()
        (place / "state").rename(state_home / "tokenbroker")
        fake = place / "no-user-manager"
        fake.mkdir()
        (fake / "systemctl").write_text("#!/bin/sh\nexit 1\n")
        (fake / "systemctl").chmod(0o755)
        environment = {k: v for k, v in os.environ.items() if not k.startswith("XDG_")}
        environment.update(HOME=str(place), XDG_STATE_HOME=str(state_home), PATH=f"{fake}:{os.environ['PATH']}",
                           DBUS_SESSION_BUS_ADDRESS=self.bus.address)
        purged = subprocess.run([str(HERE.parent.parent / "scripts" / "install.sh"), "--uninstall", "--purge"],
                                capture_output=True, text=True, timeout=60, env=environment)
        expect(purged.returncode == 0 and "deleted from your keyring" in purged.stdout,
               f"install.sh --purge ({purged.returncode}): {purged.stdout[-300:]!r} {purged.stderr[-300:]!r}")
        expect(not (state_home / "tokenbroker").exists(), "the state directory is still there")
        gone = subprocess.run([SYSTEM_PYTHON, str(HERE / "keyring_control.py"), self.bus.address, "read",
                               record["cacheID"]], capture_output=True, text=True, timeout=60)
        expect(gone.returncode != 0, "the keyring still holds the purged cache's key")
        self.keyring_control("read", other["cacheID"])

    def a_passphrase_unlocks_with_back_off_for_wrong_ones(self) -> None:
        key = (self.pristine / "cache.key").read_bytes()
        place = self.place("passphrase", self.pristine)
        daemon = self.start(place, stores="file")
        moved = daemon.cli("key", "move", "--to", "passphrase", "--json", input=(PASSPHRASE + "\n").encode())
        expect(moved.returncode == 0, f"key move failed ({moved.returncode}): {moved.stderr[-300:]!r}")
        expect(not (place / "state" / "cache.key").exists(), "the key file is still there")
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        self.expect_nothing_in_clear(place / "state", key, [PASSPHRASE.encode()])
        daemon = self.start(place, stores="file")
        status = self.key_status(daemon)
        expect(status["locked"] and status["store"] == "passphrase", f"status {status}")
        expect(self.token(daemon).returncode == 76, "a token was answered before the passphrase")
        # Four wrong ones, each tried once the wait of the one before is over: the waits grow 1, 2, 4, 8 s.
        def unlock(passphrase: bytes) -> subprocess.CompletedProcess[str]:
            return daemon.cli("unlock", input=passphrase + b"\n")

        for attempt in range(4):
            wait_for(f"the back-off before wrong passphrase {attempt + 1}",
                     lambda: (result := unlock(b"not the passphrase")).returncode != 75 and result.returncode == 77,
                     60)
        # Right after the fourth, inside its 8-second wait (a margin no busy machine needs to be quick for), even the
        # right one is not tried.
        at_once = unlock(PASSPHRASE.encode())
        expect(at_once.returncode == 75 and b"try again in" in at_once.stderr,
               f"no back-off: {at_once.returncode} {at_once.stderr[-200:]!r}")
        still = self.token(daemon)
        expect(still.returncode == 76, f"after a wrong passphrase a token request answered {still.returncode}")
        # The back-off ends; the right passphrase opens the cache.
        wait_for("the back-off to end", lambda: unlock(PASSPHRASE.encode()).returncode == 0, 60)
        self.expect_all_tokens(daemon, "after unlocking")
        expect(daemon.stop() == 0, "the daemon did not exit 0")
        self.expect_nothing_in_clear(place / "state", key, [PASSPHRASE.encode()])

    def killer(self) -> Path:
        """The preloaded library that SIGKILLs the daemon before its Nth file operation on the key (kill_at_step.c),
        built once."""
        library = self.directory / "kill_at_step.so"
        if not library.exists():
            subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(HERE / "kill_at_step.c"), "-ldl",
                            "-lpthread"], check=True)
        return library

    def kill_9_at_every_step_of_every_move_loses_nothing(self) -> None:
        """Every move, cut by SIGKILL before each of its file operations on the key in turn (the record's temporary
        file, its sync, the rename, the directory's sync, the key file's removal …, listed by a first run that
        only counts them), and once after the last: the cache opens afterwards with every token, and the key file
        is gone only once the record names a new store."""
        def copy(source: Path) -> Callable[[str], Path]:
            return lambda name: self.place(name, source)

        def in_keyring(name: str) -> Path:
            # A cache of its own in the keyring (its own item): a move away removes that item.
            place = self.place(name, self.pristine)
            daemon = self.start(place, keyring=True)
            expect(self.key_status(daemon)["store"] == "secret-service", "the key did not move to the keyring")
            expect(daemon.stop() == 0, "the daemon did not exit 0")
            return place

        # (what, how to get the state, the daemon's stores, the store moved to: None for the move at start)
        series: list[tuple[str, Callable[[str], Path], dict[str, Any], str | None]] = [
            ("file -> tpm at start", copy(self.pristine), {"tpm": self.tpm}, None),
            ("file -> secret-service at start", copy(self.pristine), {"keyring": True}, None),
            ("file -> passphrase", copy(self.pristine), {"stores": "file"}, "passphrase"),
            ("secret-service -> file", in_keyring, {"keyring": True}, "file"),
            ("secret-service -> tpm", in_keyring, {"keyring": True, "tpm": self.tpm}, "tpm"),
            ("tpm -> passphrase", copy(self.tpm_place / "state"), {"tpm": self.tpm}, "passphrase"),
        ]
        killer = self.killer()
        runs = 0

        def run(what: str, number: int, place: Path, target: str | None,
                options: dict[str, Any]) -> tuple[Daemon, Path]:
            log = place / f"steps-{number}.log"
            environment = {"LD_PRELOAD": str(killer), "TB_KILL_ROOT": str(place / "state"),
                           "TB_KILL_AT": str(number), "TB_KILL_LOG": str(log)}
            daemon = self.start(place, extra=environment, wait=False, **options)
            wait_for(f"{what}: the daemon answers or dies",
                     lambda: daemon.process.poll() is not None or self.answers(daemon), 60)
            if target is not None and daemon.process.poll() is None:
                daemon.cli("key", "move", "--to", target, input=(PASSPHRASE + "\n").encode())
            return daemon, log

        for what, prepare, options, target in series:
            items_before = int(self.keyring_control("count"))
            # The first run only counts the steps: the move done whole, the daemon stopped cleanly.
            place = prepare("kill-count")
            daemon, log = run(what, 0, place, target, options)
            expect(daemon.stop() == 0, f"{what}: the counting run did not exit 0")
            steps = log.read_text().splitlines()
            counted_state = str(place / "state") + "/"
            expect(any(" rename " in line and line.endswith("key.json") for line in steps),
                   f"{what}: the counting run saw no new key record: {steps}")
            if "-> secret-service" in what:
                # The keyring's files reach the disk before the key file goes: a power cut between the two cannot
                # leave the key in neither.
                order = [line.split(" ", 1)[1] for line in steps]
                flushed = next((i for i, step in enumerate(order) if step.startswith("syncfs ")), None)
                removed = next((i for i, step in enumerate(order) if step.endswith("/cache.key") and
                                step.startswith("unlink ")), None)
                expect(flushed is not None and removed is not None and flushed < removed,
                       f"{what}: the keyring's file system was not written out before the key file went: {order}")
            for number in range(1, len(steps) + 1):
                place = prepare(f"kill-{number}")
                state = place / "state"
                daemon, _ = run(what, number, place, target, options)
                status = daemon.process.wait(60)
                daemon.log.close()
                expect(status == -signal.SIGKILL,
                       f"{what}: not killed before step {number} ({steps[number - 1]}): exit {status}")
                runs += 1
                record = self.record(state)
                if not (state / "cache.key").exists():
                    expect(record is not None and record["store"] != "file",
                           f"{what}, killed before {steps[number - 1]}: the key file is gone, the record names "
                           f"{record and record['store']}")
                again = self.start(place, **options)
                if self.key_status(again)["locked"]:
                    unlocked = again.cli("unlock", input=(PASSPHRASE + "\n").encode())
                    expect(unlocked.returncode == 0, f"{what}, {number}: unlock: {unlocked.stderr[-300:]!r}")
                self.expect_all_tokens(again, f"{what}: after SIGKILL before {steps[number - 1]}")
                expect(again.stop() == 0, "the daemon did not exit 0")
            if what == "file -> secret-service at start":
                # Every cut try of that move named the same item (the cache id comes from the key): one item, not
                # one per try.
                cache_id = str((self.record(place / "state") or {}).get("cacheID"))
                self.keyring_control("read", cache_id)
                added = int(self.keyring_control("count")) - items_before
                expect(added <= 1, f"{what}: {added} keyring items were left for one cache")
            named = [line.split(" ", 1)[1].replace(counted_state, "").replace(counted_state[:-1], "the directory")
                     for line in steps]
            print(f"  # {what}: {len(steps)} steps, each cut: {', '.join(named)}", flush=True)
        expect(runs >= 20, f"only {runs} runs were cut")

    @staticmethod
    def answers(daemon: Daemon) -> bool:
        try:
            with daemon.client() as client:
                client.negotiate()
                return True
        except (OSError, ConnectionError, BrokerError):
            return False

    def run(self) -> int:
        self.check("a cache with a plain key file is signed in for real", self.a_plain_key_file_cache_is_signed_in)
        self.check("a plain key file is said as a warning in status, getStatus and the journal",
                   self.the_plain_key_file_is_said_as_a_warning)
        self.check("the key moves to the keyring: no key file left, tokens served, nothing in clear on disk",
                   self.moves_to_the_keyring_and_serves)
        self.check("a locked keyring: cache_locked, nothing made anew; unlocked: served, nothing lost",
                   self.a_locked_keyring_locks_the_cache_until_unlocked)
        self.check("no keyring at all: locked and whole; back with it: every token",
                   self.without_the_keyring_the_cache_stays_locked_and_whole)
        self.check("the user's key-stores order decides; a new cache waits for a locked keyring",
                   self.the_users_order_decides_and_a_new_cache_waits_for_a_locked_keyring)
        self.check("the key moves to the TPM; a copy on another TPM opens nothing; the original does; its TPM gone at "
                   "start, locked and whole until it is back",
                   self.moves_to_the_tpm_and_only_that_tpm_opens_it)
        self.check("libsecret and tpm2-tss broken: the daemon runs, says which, locked and whole; mended: every "
                   "token", self.without_the_stores_libraries_the_cache_stays_locked_and_whole)
        self.check("a tpm2-tss library of another version: unavailable, says which function, none left mapped",
                   self.a_tpm_library_of_another_version_leaves_none_open)
        self.check("a passphrase: wrong ones refused with back-off, the right one unlocks, nothing in clear",
                   self.a_passphrase_unlocks_with_back_off_for_wrong_ones)
        self.check("kill -9 before every file operation of 6 moves: every token there, the key file gone only after "
                   "the new wrap is durable", self.kill_9_at_every_step_of_every_move_loses_nothing)
        self.check("install.sh --uninstall --purge deletes the cache's key from the keyring, and only it",
                   self.purging_deletes_the_key_from_the_keyring)
        return self.summary()

    def stop(self) -> None:
        for daemon in self.daemons:
            if daemon.process.poll() is None:
                daemon.process.kill()
        for tpm in (self.tpm, self.other_tpm):
            tpm.stop()
        self.keyring.stop()
        self.bus.stop()
        self.provider.stop()


def main() -> int:
    return run_suite(__doc__ or "", "tokenbroker-keys-", ("DBUS_SESSION_BUS_ADDRESS",), KeysTest)


if __name__ == "__main__":
    sys.exit(main())
