#!/bin/bash
# Runs a command as an unprivileged user under a real `systemd --user`, with a private journald, on a machine
# whose PID 1 is not systemd (a container, CI). As root, in a private mount namespace:
#
#   setsid unshare -m --propagation private Tests/systemd/with-user-manager.sh COMMAND...
#
# systemd --user only refuses because /run/systemd/system is missing; a tmpfs over /run/systemd in this
# namespace provides it without touching the host. The project directory is bind-mounted at /srv, HOME is a
# tmpfs, a cgroup is delegated to the user as user@.service would. After the command, the journal entries of
# tokenbrokerd are written as JSON to $JOURNAL_OUT (when set), and `$CHECK_AS_ROOT` (when set) runs as root
# in the same namespace (it may read the user's HOME). Exit status: the command's, or the check's if it failed.
set -u
AS_USER=${AS_USER:-nobody}
SRC=${PROJECT_DIR:-$PWD}

mount -t tmpfs tmpfs /run/systemd
mkdir -p /run/systemd/system /run/systemd/journal
mkdir -p /run/log/journal && mount -t tmpfs tmpfs /run/log/journal
/lib/systemd/systemd-journald >/dev/null 2>&1 & JPID=$!
for _ in $(seq 50); do [ -S /run/systemd/journal/socket ] && break; sleep 0.1; done
mount --bind "$SRC" /srv
mount -t tmpfs tmpfs /home
USER_ID=$(id -u "$AS_USER")
export HOME=/home/$AS_USER-test XDG_RUNTIME_DIR=/run/user/$USER_ID
mkdir -p /run/user && mount -t tmpfs tmpfs /run/user
mkdir -m 700 -p "$HOME" "$XDG_RUNTIME_DIR"
chown "$AS_USER": "$HOME" "$XDG_RUNTIME_DIR"
CG=tokenbroker-test-$AS_USER-$$
for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
  [ -e "$h/cgroup.procs" ] && mkdir -p "$h/$CG" && chown -R "$AS_USER" "$h/$CG"
done
AS=(setpriv --reuid="$AS_USER" --regid="$(id -g "$AS_USER")" --clear-groups --inh-caps=-all)
( for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
    [ -d "$h/$CG" ] && echo $BASHPID > "$h/$CG/cgroup.procs"; done
  exec "${AS[@]}" /lib/systemd/systemd --user >/dev/null 2>&1 ) & MPID=$!
for _ in $(seq 100); do [ -S "$XDG_RUNTIME_DIR/systemd/private" ] && break; sleep 0.1; done

"${AS[@]}" env PATH=/usr/local/bin:/usr/bin:/bin HOME="$HOME" XDG_RUNTIME_DIR="$XDG_RUNTIME_DIR" "$@"; RC=$?

sleep 0.5
if [ -n "${JOURNAL_OUT:-}" ]; then journalctl --no-pager -o json SYSLOG_IDENTIFIER=tokenbrokerd > "$JOURNAL_OUT"; fi
if [ -n "${CHECK_AS_ROOT:-}" ]; then
  bash -c "$CHECK_AS_ROOT"; CHECK=$?
  [ "$RC" = 0 ] && RC=$CHECK
fi
kill "$MPID"; wait "$MPID" 2>/dev/null; kill "$JPID"; wait "$JPID" 2>/dev/null; sleep 0.3
for h in /sys/fs/cgroup/systemd /sys/fs/cgroup/unified /sys/fs/cgroup; do
  [ -d "$h/$CG" ] && find "$h/$CG" -depth -type d -exec rmdir {} \; 2>/dev/null
done
exit $RC
