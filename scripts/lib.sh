# Shared helpers for scripts/*.sh (sourced, not run).

# listening PATH: a connection to the Unix socket is taken (its file appears at bind(), a moment before listen()).
# The system Python: no virtualenv needed.
listening() { /usr/bin/python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$1" 2>/dev/null; }

# The release build of the binaries people run: the Swift runtime linked in, and every function compiled into a
# section of its own (Swift and C alike), so that the daemon's link can place the ones start-up and an answer run
# together (Package.swift, daemonReleaseLinkFlags); without it a module's code moves as one block, and an idle
# daemon maps about 2 MiB more of its executable. Every script that builds release uses these same flags, so that
# none rebuilds what another built. (SwiftPM does not recompile Swift code when only -Xswiftc flags change: a release
# tree built before them keeps its old objects until `rm -rf .build/*/release`.)
#
# Type metadata goes through accessor functions, not mangled names: the runtime demangles a mangled name the first
# time each place in the code asks for it, which in a process per use (`tokenbroker token`, the git and kube helpers)
# was 146,000 of the 357,000 instructions of a whole run (callgrind); an accessor asks the runtime's metadata cache
# directly. It is the compiler's mode from before mangled names (a frontend flag: the driver has none). Not in
# Package.swift: unsafe flags there would keep other packages from depending on the client library.
RELEASE_BUILD=(-c release --static-swift-stdlib -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections
  -Xswiftc -Xfrontend -Xswiftc -disable-concrete-type-metadata-mangled-name-accessors)

# The Swift toolchain, where a login shell would find it: its installers put usr/bin on PATH in /etc/profile.d or a
# shell profile, which a shell without a login session (`ssh host command`, cron, `env -i`) never reads. Stops with
# what to do when there is none.
need_swift() {
  command -v swift >/dev/null 2>&1 && return 0
  local bin
  for bin in /opt/swift/usr/bin /usr/share/swift/usr/bin /usr/local/swift/usr/bin "${HOME:-}/.local/share/swiftly/bin" \
             "${HOME:-}/.swiftly/bin"; do
    if [ -x "$bin/swift" ]; then
      echo "swift is not on PATH (this shell read no login profile); using $bin/swift" >&2
      export PATH="$PATH:$bin"
      return 0
    fi
  done
  echo "$0: no swift on PATH, nor in /opt/swift, /usr/share/swift, /usr/local/swift or swiftly's directory:" \
    "install Swift 6.3 (https://www.swift.org/install/linux/) and put its usr/bin on PATH" >&2
  exit 1
}

# Run as root or through sudo.
as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# Install the Debian packages named, when any is missing.
need_packages() {
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing ${missing[*]}"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# The first Python >= 3.12 on this machine (oidc-provider-mock 0.4 needs it), else python3.
pick_python() {
  local candidate
  for candidate in python3.13 python3.12 "$HOME"/.pyenv/versions/3.13*/bin/python3 \
                   "$HOME"/.pyenv/versions/3.12*/bin/python3 /root/.pyenv/versions/3.1[23]*/bin/python3; do
    if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' >/dev/null 2>&1; then
      echo "$candidate"; return
    fi
  done
  echo python3
}

# A virtualenv with the tests' Python packages, created once (in .venv-tests/, ignored by git).
test_venv() {
  local venv=".venv-tests" python
  if [ ! -x "$venv/bin/python" ] || ! cmp -s Tests/wire/requirements.txt "$venv/.requirements"; then
    python=$(pick_python)
    echo "creating $venv with $("$python" --version 2>&1)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r Tests/wire/requirements.txt
    cp Tests/wire/requirements.txt "$venv/.requirements"
  fi
  echo "$venv/bin/python"
}

# The local Entra-shaped test provider, for the scripts that sign in and refresh (bench.sh, order-file.sh): started in
# the background on a free port, its access tokens living 200 s, always inside the broker's 5-minute margin, so that
# every silent request refreshes. Sets IDP (its pid), IDP_PORT, AUTHORITY (its tenant) and CLIENT (an app it knows).
start_test_provider() { # directory of the release binaries, work directory
  "$1/tokenbroker-test-idp" --port 0 --token-lifetime 200 > "$2/idp.json" 2>"$2/idp.log" & IDP=$!
  for _ in $(seq 200); do [ -s "$2/idp.json" ] && break; sleep 0.02; done
  IDP_PORT=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$2/idp.json")
  AUTHORITY="http://127.0.0.1:$IDP_PORT/7d3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a"
  CLIENT=aaaaaaaa-0000-4000-8000-00000000000a
}

# Signs the test provider's CLIENT in through the broker at SOCKET, then writes to REQUEST a silent request for SCOPE.
# The browser is curl: it GETs the start page it is given (the sign-in URL is never on a command line), signs in as
# USERNAME where that leads and follows the redirect back to the broker's loopback listener. The login saves that
# browser as a profile the daemon then reads: both must have XDG_CONFIG_HOME set to a directory of the script's own,
# never the user's (the function refuses to run without it).
sign_in_test_user() { # directory of the release binaries, socket, username, scope, request file
  : "${XDG_CONFIG_HOME:?export XDG_CONFIG_HOME to a directory of this script before starting the daemon}"
  local browser
  browser="$(dirname "$5")/browser.sh"
  printf '#!/bin/sh\nauthorize=$(curl -s -o /dev/null -w %%{redirect_url} "$1")\nexec curl -s -o /dev/null -L --data-urlencode username=%s "$authorize"\n' \
    "$3" > "$browser"
  chmod +x "$browser"
  TOKENBROKER_SOCKET="$2" "$1/tokenbroker" login --client-id "$CLIENT" --authority "$AUTHORITY" --scope "$4" \
    --webview custom --browser-command "$browser" >&2 2>"$browser.log" || { cat "$browser.log" >&2; return 1; }
  printf '{"jsonrpc":"2.0","id":1,"method":"acquireTokenSilently","params":{"authParameters":{"clientId":"%s","authority":"%s","requestedScopes":["%s"]}}}\n' \
    "$CLIENT" "$AUTHORITY" "$4" > "$5"
}
