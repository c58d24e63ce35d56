#!/usr/bin/env python3
"""Tokens where tools already look: the managed-identity endpoint for containers, git's credential helper and
kubectl's exec plugin, each proven with the real client.

Usage (through Tests/tools/run.sh, which gives it a network namespace of its own):

    python3 Tests/tools/tools_test.py --bin .build/debug [--keep]

What it starts, all for real: tokenbroker-test-idp with TLS on 127.0.0.1:443, tokenbrokerd, a second network
namespace standing in for a container (a veth pair: the host side 10.77.0.1, the container 10.77.0.2) where the
real azure-identity and msal ask the endpoint; a smart-HTTP git server (`git http-backend` behind a small HTTP
front that accepts only access tokens the provider signed) for the real git; an HTTPS "API server" for the real
Python kubernetes client. Nothing prints a token: checks compare hashes.

Each check prints `ok` or `FAIL` with the reason; the exit status is 1 when any failed.
"""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import jwt
import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "interop"))
from interop_test import (  # noqa: E402
    ADAL_APP, FAMILY_APP, GRACE, MSAL_APP, Checks, Daemon, Provider, expect, run_suite, wait_for)

VAULT = "https://vault.azure.net"
GRAPH = "https://graph.microsoft.com"
DEVOPS = "499b84ac-1321-427f-aa17-267ca6975798"  # Azure DevOps' resource: git's tokens are for it
KUBE = "6dae42f8-4368-4678-94ff-3960e28e3630"  # AKS's server application: kubectl's tokens are for it
HOST_SIDE = "10.77.0.1"
CONTAINER_SIDE = "10.77.0.2"


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class TokenChecker:
    """Verifies an access token the way a resource server would: RS256 with the provider's published key, its
    audience, its expiry; and refuses tokens the test revoked (by `jti`)."""

    def __init__(self, provider: Provider) -> None:
        keys = requests.get(f"{provider.authority}/discovery/v2.0/keys", verify=str(provider.certificate),
                            timeout=10).json()["keys"]
        self.keys = {key["kid"]: jwt.PyJWK(key) for key in keys}
        self.revoked: set[str] = set()
        self.seen: list[str] = []  # digests of the tokens accepted, in order

    def accepts(self, token: str, audience: str) -> bool:
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, self.keys[header["kid"]].key, algorithms=["RS256"], audience=audience)
        except Exception:  # noqa: BLE001 - any failure is a refusal
            return False
        if claims.get("jti") in self.revoked:
            return False
        self.seen.append(digest(token))
        return True

    def revoke(self, token: str) -> None:
        self.revoked.add(jwt.decode(token, options={"verify_signature": False})["jti"])


class GitServer:
    """Smart HTTP for the real git: `git http-backend` (CGI) behind a front that wants Basic auth whose password is
    an access token for Azure DevOps' resource, signed by the test provider."""

    def __init__(self, directory: Path, checker: TokenChecker) -> None:
        self.root = directory / "git-server"
        self.root.mkdir()
        subprocess.run(["git", "init", "--quiet", "--bare", "--initial-branch=main", str(self.root / "repo.git")],
                       check=True)
        subprocess.run(["git", "-C", str(self.root / "repo.git"), "config", "http.receivepack", "true"], check=True)
        self.passwords: list[str] = []  # digests of every password offered, accepted or not
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self.serve()

            def do_POST(self) -> None:
                self.serve()

            def serve(self) -> None:
                authorization = self.headers.get("Authorization", "")
                password = ""
                if authorization.startswith("Basic "):
                    password = base64.b64decode(authorization[6:]).decode().partition(":")[2]
                    server.passwords.append(digest(password))
                if not checker.accepts(password, DEVOPS):
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="git"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                path, _, query = self.path.partition("?")
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                environment = dict(os.environ, GIT_PROJECT_ROOT=str(server.root), GIT_HTTP_EXPORT_ALL="1",
                                   REQUEST_METHOD=self.command, PATH_INFO=path, QUERY_STRING=query,
                                   CONTENT_TYPE=self.headers.get("Content-Type", ""), CONTENT_LENGTH=str(len(body)),
                                   REMOTE_USER="tokenbroker-test", REMOTE_ADDR="127.0.0.1",
                                   GIT_HTTP_MAX_REQUEST_BUFFER="100M")
                result = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=environment)
                head, _, payload = result.stdout.partition(b"\r\n\r\n")
                status = 200
                headers = []
                for line in head.decode().split("\r\n"):
                    name, _, value = line.partition(": ")
                    if name.lower() == "status":
                        status = int(value.split()[0])
                    elif name:
                        headers.append((name, value))
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


class KubeServer:
    """An HTTPS stand-in for a Kubernetes API server: lists pods for a bearer token for AKS's resource."""

    def __init__(self, directory: Path, checker: TokenChecker) -> None:
        self.certificate = directory / "kube-ca.pem"
        key = directory / "kube-key.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out",
                        str(self.certificate)], check=True, capture_output=True)
        self.requests: list[str] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                authorization = self.headers.get("Authorization", "")
                token = authorization[7:] if authorization.startswith("Bearer ") else ""
                accepted = checker.accepts(token, KUBE)
                kube.requests.append(f"{self.path} {'accepted' if accepted else 'refused'}")
                if not accepted:
                    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                       "reason": "Unauthorized", "code": 401}).encode()
                    self.send_response(401)
                else:
                    body = json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                       "items": [{"metadata": {"name": "hello", "namespace": "default"}}]}).encode()
                    self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        kube = self
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.certificate, key)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()


class Container:
    """A network namespace standing in for a container on a bridge: a veth pair, the host side in the test's
    namespace, the other end inside. Processes run there through nsenter."""

    def __init__(self) -> None:
        own = os.readlink("/proc/self/ns/net")
        self.holder = subprocess.Popen(["unshare", "--net", "sleep", "infinity"])
        wait_for("the container's namespace", lambda: os.readlink(f"/proc/{self.holder.pid}/ns/net") != own)
        self.namespace = f"/proc/{self.holder.pid}/ns/net"
        for command in (["ip", "link", "add", "tbhost0", "type", "veth", "peer", "name", "tbcont0", "netns",
                         str(self.holder.pid)],
                        ["ip", "address", "add", f"{HOST_SIDE}/30", "dev", "tbhost0"],
                        ["ip", "link", "set", "tbhost0", "up"]):
            subprocess.run(command, check=True)
        for command in (["ip", "link", "set", "lo", "up"],
                        ["ip", "address", "add", f"{CONTAINER_SIDE}/30", "dev", "tbcont0"],
                        ["ip", "link", "set", "tbcont0", "up"]):
            subprocess.run(["nsenter", f"--net={self.namespace}", *command], check=True)

    def run(self, arguments: list[str], environment: dict[str, str], timeout: float = 120) \
            -> subprocess.CompletedProcess[str]:
        return subprocess.run(["nsenter", f"--net={self.namespace}", *arguments], capture_output=True, text=True,
                              env=environment, timeout=timeout)

    def stop(self) -> None:
        self.holder.kill()
        self.holder.wait(10)


class Tools(Checks):
    def __init__(self, binaries: Path, directory: Path) -> None:
        super().__init__()
        self.binaries = binaries
        self.directory = directory
        self.provider = Provider(binaries / "tokenbroker-test-idp", directory)
        self.browser = self.provider.browser_script(directory / "browser.sh", GRACE)
        self.daemon = Daemon(binaries, directory, self.provider.certificate)
        self.checker = TokenChecker(self.provider)
        self.container = Container()
        self.git_server = GitServer(directory, self.checker)
        self.kube = KubeServer(directory, self.checker)

    # -- helpers ---------------------------------------------------------------------------------------------------

    def cli(self, *arguments: str, input: str | None = None, environment: dict[str, str] | None = None) \
            -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.daemon.cli_binary), *arguments], input=input, capture_output=True,
                              text=True, env=environment or self.daemon.environment, timeout=120)

    def sign_in(self, *scope: str) -> None:
        result = self.cli("login", "--client-id", MSAL_APP, "--authority", self.provider.authority, *scope,
                          "--webview", "custom", "--browser-command", str(self.browser))
        expect(result.returncode == 0, f"login failed ({result.returncode}): {result.stderr.strip()[-300:]}")

    def broker_token(self, client_id: str, resource: str) -> str:
        result = self.cli("token", "--client-id", client_id, "--authority", self.provider.authority, "--resource",
                          resource)
        expect(result.returncode == 0, f"token failed: {result.stderr.strip()[-300:]}")
        return result.stdout.strip()

    def grant(self, *arguments: str, client_id: str = MSAL_APP) -> dict[str, str]:
        """`tokenbroker grant create`: its stdout must be exactly the two env-file lines."""
        result = self.cli("grant", "create", "--client-id", client_id, "--authority", self.provider.authority,
                          *arguments)
        expect(result.returncode == 0, f"grant create failed ({result.returncode}): {result.stderr.strip()[-300:]}")
        lines = result.stdout.splitlines()
        expect(len(lines) == 2 and lines[0].startswith("IDENTITY_ENDPOINT=") and
               lines[1].startswith("IDENTITY_HEADER="), f"grant create printed {len(lines)} lines on stdout")
        return dict(line.split("=", 1) for line in lines)

    def in_container(self, grant: dict[str, str], sdk: str, resource: str, client_id: str | None = None) \
            -> dict[str, Any]:
        """Runs mi_app.py (the real SDK) in the container's namespace with the grant's environment."""
        environment = {"PATH": os.environ["PATH"], "HOME": str(self.directory), **grant}
        arguments = [sys.executable, str(HERE / "mi_app.py"), sdk, resource]
        if client_id:
            arguments.append(client_id)
        result = self.container.run(arguments, environment)
        expect(result.returncode == 0, f"mi_app.py {sdk} crashed: {result.stderr.strip()[-400:]}")
        return json.loads(result.stdout)

    # -- the managed-identity endpoint -----------------------------------------------------------------------------

    def setup(self) -> None:
        self.sign_in("--resource", VAULT)
        self.bridge = self.grant("--resource", VAULT, "--resource", GRAPH, "--label", "devcontainer",
                                 "--listen", f"{HOST_SIDE}:0")
        expect(self.bridge["IDENTITY_ENDPOINT"].startswith(f"http://{HOST_SIDE}:"),
               f"endpoint {self.bridge['IDENTITY_ENDPOINT']}")

    def azure_identity_gets_the_users_token(self) -> None:
        answer = self.in_container(self.bridge, "azure-identity", VAULT + "/.default")
        expect(answer.get("ok") is True, f"azure-identity: {answer}")
        expect(answer["digest"] == digest(self.broker_token(MSAL_APP, VAULT)),
               "the container's token is not the broker's cached token")
        expect(answer["expires_on"] > time.time() + 600, f"expires_on {answer['expires_on']}")

    def default_azure_credential_finds_it(self) -> None:
        answer = self.in_container(self.bridge, "default", VAULT + "/.default")
        expect(answer.get("ok") is True, f"DefaultAzureCredential: {answer}")

    def msal_managed_identity_client_gets_it(self) -> None:
        answer = self.in_container(self.bridge, "msal", VAULT)
        expect(answer.get("ok") is True, f"msal ManagedIdentityClient: {answer}")
        expect(answer["digest"] == digest(self.broker_token(MSAL_APP, VAULT)), "not the broker's cached token")

    def a_second_resource_comes_from_the_refresh_token(self) -> None:
        before = self.provider.token_requests()
        answer = self.in_container(self.bridge, "azure-identity", GRAPH + "/.default")
        expect(answer.get("ok") is True, f"azure-identity for Graph: {answer}")
        expect(self.provider.token_requests() == before + 1, "the broker did not refresh once")

    def a_family_app_is_served_by_the_family_refresh_token(self) -> None:
        family = self.grant("--resource", VAULT, "--label", "family", "--listen", f"{HOST_SIDE}:0",
                            client_id=FAMILY_APP)
        answer = self.in_container(family, "msal", VAULT)
        expect(answer.get("ok") is True, f"the family app's grant: {answer}")
        claims = jwt.decode(self.broker_token(FAMILY_APP, VAULT), options={"verify_signature": False})
        expect(claims.get("aud") == VAULT, f"aud {claims.get('aud')}")

    def a_resource_outside_the_grant_gets_the_sdks_error(self) -> None:
        for sdk in ("azure-identity", "msal"):
            answer = self.in_container(self.bridge, sdk, "https://storage.azure.com" + ("/.default" if sdk != "msal"
                                                                                          else ""))
            expect(answer.get("ok") is False and "does not cover" in answer.get("message", ""),
                   f"{sdk}: {answer}")

    def a_wrong_secret_gets_the_sdks_error(self) -> None:
        wrong = dict(self.bridge, IDENTITY_HEADER=base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="))
        for sdk in ("azure-identity", "msal"):
            answer = self.in_container(wrong, sdk, VAULT + ("/.default" if sdk != "msal" else ""))
            expect(answer.get("ok") is False and "names no grant" in answer.get("message", ""), f"{sdk}: {answer}")

    def a_client_id_of_another_app_is_refused(self) -> None:
        answer = self.in_container(self.bridge, "azure-identity", VAULT + "/.default", client_id=FAMILY_APP)
        expect(answer.get("ok") is False and "not this grant's identity" in answer.get("message", ""), f"{answer}")
        answer = self.in_container(self.bridge, "azure-identity", VAULT + "/.default", client_id=MSAL_APP)
        expect(answer.get("ok") is True, f"the grant's own client id: {answer}")

    def a_revoked_grant_gets_the_sdks_error(self) -> None:
        grant = self.grant("--resource", VAULT, "--label", "short-lived", "--listen", f"{HOST_SIDE}:0")
        expect(self.in_container(grant, "msal", VAULT).get("ok") is True, "the new grant did not serve")
        result = self.cli("grant", "revoke", "short-lived")
        expect(result.returncode == 0, f"revoke: {result.stderr.strip()}")
        answer = self.in_container(grant, "msal", VAULT)
        expect(answer.get("ok") is False and "names no grant" in answer.get("message", ""), f"{answer}")

    def an_expired_grant_gets_the_sdks_error(self) -> None:
        grant = self.grant("--resource", VAULT, "--label", "two-seconds", "--ttl", "2s", "--listen",
                           f"{HOST_SIDE}:0")
        wait_for("the grant's expiry", lambda: "two-seconds" not in self.cli("grant", "list").stdout, 10)
        answer = self.in_container(grant, "azure-identity", VAULT + "/.default")
        expect(answer.get("ok") is False and "expired" in answer.get("message", ""), f"{answer}")

    def nothing_is_served_without_the_secret(self) -> None:
        endpoint = self.bridge["IDENTITY_ENDPOINT"]
        query = {"api-version": "2019-08-01", "resource": VAULT}
        for headers in ({}, {"X-IDENTITY-HEADER": ""}, {"X-IDENTITY-HEADER": "x" * 43}):
            answer = requests.get(endpoint, params=query, headers=headers, timeout=10)
            expect(answer.status_code == 401 and "access_token" not in answer.text,
                   f"{headers and 'a wrong secret' or 'no secret'}: {answer.status_code}")
        # The bridge grant's secret is not served on the loopback endpoint of another grant.
        loopback = self.grant("--resource", VAULT, "--label", "loopback")
        answer = requests.get(loopback["IDENTITY_ENDPOINT"], params=query,
                              headers={"X-IDENTITY-HEADER": self.bridge["IDENTITY_HEADER"]}, timeout=10)
        expect(answer.status_code == 401, f"the bridge grant's secret on loopback: {answer.status_code}")
        answer = requests.get(loopback["IDENTITY_ENDPOINT"], params=query,
                              headers={"X-IDENTITY-HEADER": loopback["IDENTITY_HEADER"]}, timeout=10)
        expect(answer.status_code == 200 and answer.json()["token_type"] == "Bearer", f"{answer.status_code}")
        expect(answer.headers.get("Cache-Control") == "no-store", "a token answer must not be cached")

    def the_audit_names_the_grant_and_no_secret_leaks(self) -> None:
        log = (self.directory / "daemon.log").read_text()
        expect("caller_grant=devcontainer" in log, "no audit line names the grant's label")
        expect("caller_via=endpoint" in log, "no audit line says the endpoint")
        # The container's address without the port: each connection takes a new one, and the SDKs' repeated asks of
        # one container are one caller, counted as repeats.
        expect(f"caller_address={CONTAINER_SIDE} " in log, "no audit line names the container's address")
        expect(f"caller_address={CONTAINER_SIDE}:" not in log, "an audit line names a connection's port")
        for name, value in self.bridge.items():
            if name == "IDENTITY_HEADER":
                expect(value not in log, "the grant's secret is in the daemon's log")
        listing = self.cli("grant", "list", "--json")
        expect(self.bridge["IDENTITY_HEADER"] not in listing.stdout, "grant list shows the secret")

    def bad_http_gets_clear_errors_and_the_endpoint_keeps_serving(self) -> None:
        host, port = self.bridge["IDENTITY_ENDPOINT"].split("/")[2].split(":")

        def exchange(data: bytes, read_timeout: float = 15) -> bytes:
            with socket.create_connection((host, int(port)), timeout=5) as connection:
                connection.settimeout(read_timeout)
                try:
                    connection.sendall(data)
                except OSError:
                    pass
                chunks = []
                try:
                    while chunk := connection.recv(65536):
                        chunks.append(chunk)
                except ConnectionResetError:
                    pass
                return b"".join(chunks)

        expect(exchange(b"\x16\x03\x01garbage\r\n\r\n").startswith(b"HTTP/1.1 400"), "garbage: no 400")
        huge = b"GET /msi/token HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
        answer = exchange(huge)
        expect(answer.startswith(b"HTTP/1.1 431") and b'"statusCode":431' in answer, f"huge header: {answer[:60]!r}")
        expect(exchange(b"POST /msi/token?api-version=2019-08-01&resource=x HTTP/1.1\r\nHost: x\r\n"
                        b"Content-Length: 3\r\n\r\nabc").startswith(b"HTTP/1.1 405"), "POST: no 405")
        expect(exchange(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 404"), "no 404")
        answer = exchange(b"GET /msi/token?api-version=2019-08-01&resource=a&resource=b HTTP/1.1\r\nHost: x\r\n"
                          b"X-IDENTITY-HEADER: " + self.bridge["IDENTITY_HEADER"].encode() + b"\r\n\r\n")
        expect(answer.startswith(b"HTTP/1.1 400") and b"twice" in answer, "a repeated parameter: no 400")
        # A slow client that never finishes its request is closed by the endpoint (it waits for the close).
        started = time.monotonic()
        with socket.create_connection((host, int(port)), timeout=5) as slow:
            slow.sendall(b"GET /msi/token?api-version=2019-08-01 HTTP/1.1\r\nHost: x\r\n")
            slow.settimeout(60)
            expect(slow.recv(100) == b"", "the slow client got an answer instead of a close")
        expect(time.monotonic() - started < 60, "the slow client was not closed")
        # A flood from the host side: hundreds of connections held open. Past its share (64 per peer address) they are
        # closed at once, and the container, another peer, is served meanwhile.
        flood = []
        for _ in range(300):
            try:
                flood.append(socket.create_connection((host, int(port)), timeout=5))
            except OSError:
                break
        try:
            during = self.in_container(self.bridge, "msal", VAULT)
        finally:
            for connection in flood:
                connection.close()
        expect(len(flood) >= 100, f"only {len(flood)} flood connections opened")
        expect(during.get("ok") is True, f"during the flood: {during}")
        answer = self.in_container(self.bridge, "msal", VAULT)
        expect(answer.get("ok") is True, f"after the flood: {answer}")

    def grants_survive_a_restart(self) -> None:
        expect(self.daemon.stop() == 0, "the daemon did not stop cleanly")
        self.daemon = Daemon(self.binaries, self.directory, self.provider.certificate)
        listing = json.loads(self.cli("grant", "list", "--json").stdout)
        labels = {grant["label"]: grant for grant in listing}
        expect("devcontainer" in labels and labels["devcontainer"]["listening"] is True, f"after restart: {labels}")
        answer = self.in_container(self.bridge, "azure-identity", VAULT + "/.default")
        expect(answer.get("ok") is True, f"after restart: {answer}")
        status = self.cli("status").stdout
        expect(any(line.startswith("grants:") and self.bridge["IDENTITY_ENDPOINT"] in line
                   for line in status.splitlines()), f"tokenbroker status: {status[-300:]}")

    # -- git -------------------------------------------------------------------------------------------------------

    def git_environment(self) -> dict[str, str]:
        home = self.directory / "git-home"
        home.mkdir(exist_ok=True)
        return dict(self.daemon.environment, HOME=str(home), GIT_TERMINAL_PROMPT="0", GIT_CONFIG_NOSYSTEM="1",
                    GIT_AUTHOR_NAME="Grace", GIT_AUTHOR_EMAIL=GRACE, GIT_COMMITTER_NAME="Grace",
                    GIT_COMMITTER_EMAIL=GRACE)

    def git(self, *arguments: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["git", *arguments], capture_output=True, text=True, env=self.git_environment(),
                              cwd=cwd, timeout=120)

    def git_clones_and_pushes_with_the_brokers_token(self) -> None:
        self.sign_in("--resource", DEVOPS)
        configure = self.cli("git-credential", "--configure", self.git_server.url, "--client-id", MSAL_APP, "--authority",
                             self.provider.authority, "--resource", DEVOPS, environment=self.git_environment())
        expect(configure.returncode == 0, f"--configure: {configure.stderr.strip()}")
        again = self.cli("git-credential", "--configure", self.git_server.url, "--client-id", MSAL_APP, "--authority",
                         self.provider.authority, "--resource", DEVOPS, environment=self.git_environment())
        helpers = self.git("config", "--global", "--get-all", f"credential.{self.git_server.url}.helper").stdout
        expect(again.returncode == 0 and len(helpers.splitlines()) == 1, f"configured twice: {helpers!r}")
        work = self.directory / "work"
        clone = self.git("clone", f"{self.git_server.url}/repo.git", str(work))
        expect(clone.returncode == 0, f"clone: {clone.stderr.strip()[-300:]}")
        (work / "hello.txt").write_text("hello\n")
        self.git("add", "hello.txt", cwd=work)
        self.git("commit", "--quiet", "-m", "hello", cwd=work)
        push = self.git("push", "origin", "HEAD:main", cwd=work)
        expect(push.returncode == 0, f"push: {push.stderr.strip()[-300:]}")
        expect(self.checker.seen and self.checker.seen[-1] == digest(self.broker_token(MSAL_APP, DEVOPS)),
               "the server did not see the broker's token")

    def a_refused_token_is_erased_and_the_next_push_gets_a_fresh_one(self) -> None:
        work = self.directory / "work"
        first = self.broker_token(MSAL_APP, DEVOPS)
        self.checker.revoke(first)
        (work / "hello.txt").write_text("hello again\n")
        self.git("commit", "--quiet", "-am", "again", cwd=work)
        refused = self.git("push", "origin", "HEAD:main", cwd=work)
        expect(refused.returncode != 0, "the push with a revoked token succeeded")
        second = self.broker_token(MSAL_APP, DEVOPS)
        expect(digest(second) != digest(first), "erase did not drop the refused token from the broker's cache")
        push = self.git("push", "origin", "HEAD:main", cwd=work)
        expect(push.returncode == 0, f"the push after erase: {push.stderr.strip()[-300:]}")
        expect(self.checker.seen[-1] == digest(second), "the server did not get the fresh token")

    def the_helper_falls_through_when_a_sign_in_is_needed(self) -> None:
        environment = self.git_environment()
        url = "http://127.0.0.2:9/repo.git"
        helper = (f"{self.daemon.cli_binary} git-credential --client-id {ADAL_APP} --authority "
                  f"{self.provider.authority} --resource {DEVOPS}")
        fill = subprocess.run(["git", "-c", f"credential.helper={helper}", "-c",
                               "credential.helper=!f() { echo username=other; echo password=fallback; }; f",
                               "credential", "fill"], input=f"url={url}\n\n", capture_output=True, text=True,
                              env=environment, timeout=60)
        # Only the attribute names go into a failure message: a password there would be a token.
        names = [line.split("=", 1)[0] for line in fill.stdout.splitlines()]
        expect(fill.returncode == 0 and "password=fallback" in fill.stdout, f"fill answered {names}")
        expect("tokenbroker login" in fill.stderr, f"no sign-in hint on stderr: {fill.stderr.strip()[-300:]}")

    def the_helper_refuses_garbage_and_plain_http_elsewhere(self) -> None:
        base = ["git-credential", "--client-id", MSAL_APP, "--authority", self.provider.authority, "--resource",
                DEVOPS, "get"]
        for garbage in ("\x00\x01\x02binary", "no equals sign\n", "=value\n", "x" * 70_000):
            result = self.cli(*base, input=garbage)
            expect(result.returncode == 64 and result.stdout == "" and "git-credential:" in result.stderr,
                   f"garbage {garbage[:10]!r}: {result.returncode} {result.stderr.strip()[:200]}")
        result = self.cli(*base, input="protocol=http\nhost=example.com\n\n")
        expect(result.returncode != 0 and result.stdout == "", "a token offered over plain http to another host")
        result = self.cli(*base, input="protocol=https\nhost=example.com\n\n")
        expect(result.returncode == 0 and "password=" in result.stdout, "https: no token")
        # Lines ended by CRLF are read as git's LF lines ("\r\n" is one Character to Swift's String).
        result = self.cli(*base, input="protocol=https\r\nhost=example.com\r\n\r\n")
        expect(result.returncode == 0 and "password=" in result.stdout, f"CRLF lines: {result.returncode}")
        expect(self.cli("status").returncode == 0, "the daemon stopped serving")

    # -- kubectl ---------------------------------------------------------------------------------------------------

    def the_kubernetes_client_calls_the_api_with_the_plugins_token(self) -> None:
        self.sign_in("--resource", KUBE)
        kubeconfig = self.directory / "kubeconfig"
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.kube.url,
                                                      "certificate-authority": str(self.kube.certificate)}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "grace"}}],
            "users": [{"name": "grace", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1", "command": str(self.daemon.cli_binary),
                "args": ["kube-credential", "--client-id", MSAL_APP, "--authority", self.provider.authority,
                         "--resource", KUBE],
                "env": [{"name": "TOKENBROKER_SOCKET", "value": str(self.daemon.socket)}],
                "interactiveMode": "Never"}}}],
        }))
        result = subprocess.run([sys.executable, str(HERE / "kube_app.py"), str(kubeconfig)], capture_output=True,
                                text=True, timeout=120, env={"PATH": os.environ["PATH"], "HOME": str(self.directory)})
        expect(result.returncode == 0 and result.stdout.strip() == "hello",
               f"kube_app.py: {result.stdout.strip()} {result.stderr.strip()[-400:]}")
        expect(self.kube.requests and self.kube.requests[-1].endswith("accepted"), f"{self.kube.requests}")
        expect(self.checker.seen[-1] == digest(self.broker_token(MSAL_APP, KUBE)), "not the broker's token")

    def the_plugin_answers_in_the_api_version_asked_and_refuses_bad_input(self) -> None:
        arguments = ["kube-credential", "--client-id", MSAL_APP, "--authority", self.provider.authority,
                     "--resource", KUBE]
        info = json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential",
                           "spec": {"interactive": False}})
        result = self.cli(*arguments, environment=dict(self.daemon.environment, KUBERNETES_EXEC_INFO=info))
        credential = json.loads(result.stdout)
        expect(credential["apiVersion"] == "client.authentication.k8s.io/v1beta1" and
               credential["kind"] == "ExecCredential", f"{credential.get('apiVersion')}")
        stamp = credential["status"]["expirationTimestamp"]
        expect(stamp.endswith("Z") and len(stamp) == 20, f"expirationTimestamp {stamp}")
        result = self.cli(*arguments, "--token-type", "id")
        claims = jwt.decode(json.loads(result.stdout)["status"]["token"], options={"verify_signature": False})
        expect(claims.get("aud") == MSAL_APP and claims.get("preferred_username") == GRACE, "not the id token")
        for bad in ("{not json", json.dumps({"apiVersion": "client.authentication.k8s.io/v2"})):
            result = self.cli(*arguments, environment=dict(self.daemon.environment, KUBERNETES_EXEC_INFO=bad))
            expect(result.returncode == 64 and result.stdout == "", f"bad exec info: {result.returncode}")
        result = self.cli("kube-credential", "--client-id", ADAL_APP, "--authority", self.provider.authority,
                          "--resource", KUBE)
        expect(result.returncode != 0 and "tokenbroker login" in result.stderr and result.stdout == "",
               "no sign-in hint")

    def the_cli_start_up_path_answers_as_the_full_cli(self) -> None:
        """`tokenbroker token`, `kube-credential` and `git-credential get` are answered before the command tree when
        they can be: without starting a thread (seen
        by strace), and byte for byte as the full CLI (TOKENBROKER_CLI_FAST_PATH=0) answers, whatever the arguments;
        everything it does not take goes to the full CLI."""
        app = ["--client-id", MSAL_APP, "--authority", self.provider.authority]
        cases = [
            ["token", *app, "--resource", VAULT],
            ["token", *app, "--scope", f"{VAULT}/.default", "--account", "grace@contoso.example", "--min-validity",
             "60"],
            ["token", *app, "--resource", VAULT, "--json"],
            ["token", *app, "--resource=" + VAULT],
            ["token", *app, "--resource", VAULT, "--account", "nobody@contoso.example"],
            ["token", *app, "--scope", "api://unknown/Read"],
            ["token", *app, "--scope", f"  {VAULT}/.default   openid ", "--scope", "profile"],
            ["token", *app, "--scope", f"{VAULT}/.default \u00e9"],
            ["token", "--authority", self.provider.authority, "--resource", VAULT],
            ["token", *app, "--resource", VAULT, "--min-validity", "-1"],
            ["token", *app, "--resource", VAULT, "--client-id", "twice"],
            ["token", *app],
            ["token", "--help"],
            ["kube-credential", *app, "--resource", VAULT],
            ["kube-credential", *app, "--resource", VAULT, "--token-type", "access"],
            ["kube-credential", *app, "--resource", VAULT, "--token-type", "id"],
            ["kube-credential", *app, "--resource", VAULT, "--min-validity", "60"],
        ]
        helper = ["git-credential", *app, "--resource", VAULT]
        git_inputs = [
            "protocol=https\nhost=git.example.com\n\n",
            "protocol=https\nhost=git.example.com\nusername=ada\n\n",
            "protocol=http\nhost=git.example.com\n\n",
            "protocol=http\nhost=127.0.0.1:8080\npath=repo.git\n\n",
            "host=git.example.com\n\n",
            "no equals sign\n",
        ]
        git_cases = [[*helper, "get"], ["git-credential", "--client-id", MSAL_APP, "get"],
                     ["git-credential", "get", "--authority", self.provider.authority, "--client-id", MSAL_APP,
                      "--scope", f"{VAULT}/.default"], [*helper, "store"], [*helper, "get", "--json"]]
        exec_infos = [None, '{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1",'
                      '"spec":{"interactive":false}}', '{"apiVersion":"v9"}', "not json", '{"apiVersion":7}']
        full = dict(self.daemon.environment, TOKENBROKER_CLI_FAST_PATH="0")

        def without_ids(output: str) -> str:  # each request (and the provider's error) has ids of its own
            return "".join(line for line in output.splitlines(keepends=True)
                           if not any(mark in line for mark in ('"correlationId"', "Trace ID:", "Correlation ID:",
                                                                "Timestamp:")))

        runs = [(arguments, {}) for arguments in cases if arguments[0] == "token"]
        runs += [(arguments, {} if info is None else {"KUBERNETES_EXEC_INFO": info})
                 for arguments in cases if arguments[0] == "kube-credential" for info in exec_infos]
        runs += [(arguments, {"input": text}) for arguments in git_cases for text in git_inputs]
        for arguments, extra in runs:
            text = extra.get("input")
            variables = {name: value for name, value in extra.items() if name != "input"}
            fast = self.cli(*arguments, input=text, environment=dict(self.daemon.environment, **variables))
            slow = self.cli(*arguments, input=text, environment=dict(full, **variables))
            expect((fast.returncode, without_ids(fast.stdout), without_ids(fast.stderr)) ==
                   (slow.returncode, without_ids(slow.stdout), without_ids(slow.stderr)),
                   f"{arguments} {extra}: {fast.returncode} vs {slow.returncode}, stderr {fast.stderr[-200:]!r} vs "
                   f"{slow.stderr[-200:]!r}, same stdout: {fast.stdout == slow.stdout}")
        # The broker's error is reported from its one answer: the start-up path does not hand the request to the full
        # CLI to ask again (which would meet the broker's memory of a failed refresh, and say so).
        def failed_requests() -> int:
            return json.loads(self.cli("status", "--json").stdout)["requests"]["failed"]

        for arguments in (["token", *app, "--resource", VAULT, "--account", "nobody@contoso.example"],
                          ["kube-credential", *app, "--resource", VAULT, "--account", "nobody@contoso.example"]):
            before = failed_requests()
            result = self.cli(*arguments)
            after = failed_requests()
            expect(result.returncode != 0 and result.stderr.startswith("tokenbroker: "),
                   f"{arguments[0]}: {result.returncode} {result.stderr[-200:]!r}")
            expect(after == before + 1, f"{arguments[0]}: the broker was asked {after - before} times for one error")
        # The plain form took the start-up path (no thread started); the full CLI starts its threads.
        for arguments in (cases[0], ["kube-credential", *app, "--resource", VAULT], [*helper, "get"]):
            threads = []
            for environment in (self.daemon.environment, full):
                trace = self.directory / "cli.strace"
                result = subprocess.run(["strace", "-f", "-qq", "-e", "trace=clone,clone3", "-o", str(trace),
                                         str(self.daemon.cli_binary), *arguments], capture_output=True, text=True,
                                        input=git_inputs[0], env=environment, timeout=60)
                expect(result.returncode == 0, f"{arguments[0]} under strace: {result.returncode} {result.stderr[-200:]}")
                threads.append(len([line for line in trace.read_text().splitlines() if "clone" in line]))
            expect(threads[0] == 0 and threads[1] > 0,
                   f"{arguments[0]}: threads started: start-up path {threads[0]}, full {threads[1]}")

    def run(self) -> int:
        self.check("sign in, and a grant for the container's bridge prints only the two env lines", self.setup)
        if self.failed:
            return 1
        self.check("azure-identity's ManagedIdentityCredential in the container gets the user's cached token",
                   self.azure_identity_gets_the_users_token)
        self.check("azure-identity's DefaultAzureCredential finds the endpoint", self.default_azure_credential_finds_it)
        self.check("msal's ManagedIdentityClient gets it too", self.msal_managed_identity_client_gets_it)
        self.check("a second resource of the grant comes from the refresh token (one provider call)",
                   self.a_second_resource_comes_from_the_refresh_token)
        self.check("a grant for another app of the family is served by the family refresh token",
                   self.a_family_app_is_served_by_the_family_refresh_token)
        self.check("a resource outside the grant gets the SDK's error and no token",
                   self.a_resource_outside_the_grant_gets_the_sdks_error)
        self.check("a wrong secret gets the SDK's error", self.a_wrong_secret_gets_the_sdks_error)
        self.check("a client id other than the grant's is refused", self.a_client_id_of_another_app_is_refused)
        self.check("a revoked grant gets the SDK's error", self.a_revoked_grant_gets_the_sdks_error)
        self.check("an expired grant gets the SDK's error", self.an_expired_grant_gets_the_sdks_error)
        self.check("nothing is served without the grant's secret, nor on another grant's address",
                   self.nothing_is_served_without_the_secret)
        self.check("malformed HTTP, huge headers, a slow client and a flood get clear answers; serving goes on",
                   self.bad_http_gets_clear_errors_and_the_endpoint_keeps_serving)
        self.check("grants survive a restart of the daemon", self.grants_survive_a_restart)
        self.check("the audit names the grant's label, and its secret is nowhere",
                   self.the_audit_names_the_grant_and_no_secret_leaks)
        self.check("git clones and pushes with the broker's token (git http-backend checks it)",
                   self.git_clones_and_pushes_with_the_brokers_token)
        self.check("a token the server refused is erased; the next push gets a fresh one",
                   self.a_refused_token_is_erased_and_the_next_push_gets_a_fresh_one)
        self.check("when a sign-in is needed the helper says so on stderr and git falls through",
                   self.the_helper_falls_through_when_a_sign_in_is_needed)
        self.check("the helper refuses garbage and plain http to other hosts; the daemon keeps serving",
                   self.the_helper_refuses_garbage_and_plain_http_elsewhere)
        self.check("token, kube-credential and git-credential get answer on their start-up path as the full CLI does",
                   self.the_cli_start_up_path_answers_as_the_full_cli)
        self.check("the Python kubernetes client calls the API server with the plugin's token",
                   self.the_kubernetes_client_calls_the_api_with_the_plugins_token)
        self.check("the plugin answers in the apiVersion asked, gives id tokens, refuses bad input",
                   self.the_plugin_answers_in_the_api_version_asked_and_refuses_bad_input)
        status = self.daemon.stop()
        self.check("the daemon exits 0 on SIGTERM", lambda: expect(status == 0, f"exit status {status}"))
        return self.summary()

    def stop(self) -> None:
        if self.daemon.process.poll() is None:
            self.daemon.process.kill()
        self.git_server.stop()
        self.kube.stop()
        self.container.stop()
        self.provider.stop()


def main() -> int:
    return run_suite(__doc__ or "", "tokenbroker-tools-", ("IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT"),
                     Tools)


if __name__ == "__main__":
    sys.exit(main())
