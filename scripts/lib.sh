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
RELEASE_BUILD=(-c release --static-swift-stdlib -Xswiftc -Xfrontend -Xswiftc -function-sections -Xcc -ffunction-sections)

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
