"""Runs oidc-provider-mock (PyPI, pinned in Tests/wire/requirements.txt) on 127.0.0.1 with an ephemeral port.

Prints one JSON line, {"port": N, "issuer": "http://127.0.0.1:N"}, then serves until SIGTERM or SIGINT.
Options: --token-max-age SECONDS (access and id token lifetime), --no-refresh-token, --require-nonce.
The issuer is built from the Host header, so clients must use 127.0.0.1, never localhost.
"""

import argparse
import json
import os
import signal
import sys
from datetime import timedelta

os.environ["AUTHLIB_INSECURE_TRANSPORT"] = "1"  # plain http on loopback, as the mock's own CLI sets it

import oidc_provider_mock  # noqa: E402
import werkzeug.serving  # noqa: E402


def main() -> int:
    # A parent may start us with signals blocked (Foundation's Process does): unblock them, or SIGTERM never comes.
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--token-max-age", type=int, default=3600)
    parser.add_argument("--no-refresh-token", action="store_true")
    parser.add_argument("--require-nonce", action="store_true")
    args = parser.parse_args()
    app = oidc_provider_mock.app(
        require_nonce=args.require_nonce,
        issue_refresh_token=not args.no_refresh_token,
        access_token_max_age=timedelta(seconds=args.token_max_age),
    )
    server = werkzeug.serving.make_server("127.0.0.1", 0, app, threaded=True)
    port = server.server_port
    # Exit at once: threads serving kept-alive connections would otherwise hold the interpreter open.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print(json.dumps({"port": port, "issuer": f"http://127.0.0.1:{port}"}), flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
