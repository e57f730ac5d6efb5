#!/usr/bin/env bash
# test_units.sh - issue 20 acceptance 3 (and issue 22's service setup): `meson install`
# (units generated from systemd/*.in for the build's prefix, sysusers.d and tmpfiles.d
# files applied by its install script), then `systemctl enable --now m40d.socket`, under a
# real systemd (PID 1 of a systemd-nspawn container):
#   - socket activation: m40d.socket listens, m40d.service starts on the first connection;
#   - a user in group m40 (and not in m40d) runs `m40ctl submit`, again after m40d started
#     (systemd must not lock /run/m40d to m40d:m40d 0750), a user outside m40 is refused;
#   - `systemctl restart m40d` and `systemctl stop m40d` keep the socket (same inode) and the
#     next client is served (systemd must not delete /run/m40d on stop);
#   - m40d's open files limit (LimitNOFILE=) holds 4 descriptors per client at max_clients 4096;
#   - SIGSTOP of m40d: the watchdog (WatchdogSec=) aborts it and systemd restarts it;
#   - `systemd-analyze security` rates the unit at most 1.0 in the running manager.
#
# How systemd runs: in a private mount namespace (unshare) the host's root directory is
# bind-mounted and booted by `systemd-nspawn --volatile=overlay` (host tree read-only with a
# tmpfs on top: nothing is written to the host) with systemd.unit=sysinit.target (no
# services of the host), a private network, and `--keep-unit --register=no` (no systemd on
# the host to ask for a scope or to register with). The container gets a cgroup of its own
# made here. Inside (nsenter), `meson install` of the build tree (visible there: the host's
# tree) installs onto the container's root as the README's service setup does, its
# install script creating the user, group and directories; the checks then run with
# systemctl, the settings written to the file the unit's ExecStart= names.
# Not `systemd --user`: a user manager ignores User=, SocketUser=/SocketGroup= and most of
# the sandboxing, and keeps RuntimeDirectory= in /run/user/UID, so it would not show what the
# system manager does with /run/m40d. Not a bare `unshare --pid` + systemd: it would need
# nspawn's /dev, /proc, /sys, cgroup and root-directory setup redone by hand.
# Exit 77 where this cannot work: not root, no systemd-nspawn (Debian: systemd-container),
# no writable cgroup hierarchy, no model.
#
# Usage: test_units.sh BUILD_DIR SOURCE_DIR [MODEL]   ($M40_UNITS_MODEL overrides MODEL)
#        test_units.sh --ns WORK ...   (internal: the part in the private mount namespace)
#        test_units.sh --inside        (internal: the checks, run in the container)
set -uo pipefail

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }

# ---- inside the container: the checks ------------------------------------------------
inside() {
        local sock=/run/m40d/m40d.sock prompt="Once upon a time" want got pid pid2 ino n
        diag() {
                echo "--- systemctl status" >&2
                systemctl --no-pager status m40d.socket m40d.service >&2 2>&1
                echo "--- journal" >&2
                journalctl --no-pager -o short-monotonic -u m40d.socket -u m40d.service \
                        | tail -n 40 >&2
        }
        ifail() { echo "FAIL: $*" >&2; diag; exit 1; }
        as() {   # as USER COMMAND...: with USER's groups, at most 60 s
                local u=$1
                shift
                timeout 60 setpriv --reuid="$u" --regid="$(id -g "$u")" --init-groups "$@"
        }
        active() { [ "$(systemctl show -P ActiveState "$1")" = "$2" ]; }

        # install: `meson install` of the build tree onto the container's root, as the
        # README says (its install script creates user m40d, group m40 and m40d's
        # directories and reloads systemd: checked here), then the model and settings.
        # Units outside systemd's search path (a prefix like /opt/m40) are linked in
        # (systemctl link), as their administrator would.
        local build f unit config
        build=$(cat /m40stage/build)
        meson install -C "$build" --no-rebuild >/m40install.log 2>&1 ||
                { cat /m40install.log >&2; ifail "meson install"; }
        ldconfig
        getent passwd m40d >/dev/null || ifail "meson install created no user m40d"
        getent group m40 >/dev/null || ifail "meson install created no group m40"
        [ "$(stat -c %U /var/lib/m40d/models 2>/dev/null)" = m40d ] ||
                ifail "meson install made no /var/lib/m40d/models of m40d"
        for f in m40d.service m40d.socket; do
                unit=$(meson introspect --installed "$build" | python3 -c '
import json, sys
print(next(v for v in json.load(sys.stdin).values() if v.endswith("/" + sys.argv[1])))' "$f") ||
                        ifail "meson install puts no $f"
                case ${unit%/*} in
                /etc/systemd/system | /usr/local/lib/systemd/system | /usr/lib/systemd/system | \
                        /lib/systemd/system) ;;
                *) systemctl link "$unit" || ifail "systemctl link $unit" ;;
                esac
        done
        config=$(systemctl cat m40d.service | sed -n 's/^ExecStart=.* -c \([^ ]*\).*/\1/p')
        [ -f "$config" ] || ifail "meson install put no $config (ExecStart's -c)"
        useradd -M -N -g nogroup -G m40 -s /usr/sbin/nologin m40-tester || ifail "useradd"
        useradd -M -N -g nogroup -s /usr/sbin/nologin m40-outsider || ifail "useradd"
        install -o m40d -g m40d -m 0640 /m40stage/model.gguf /var/lib/m40d/models/tiny.gguf
        printf '[model]\npath = %s\n[engine]\nbackend = cpu\nthreads = 1\n' \
                /var/lib/m40d/models/tiny.gguf >"$config"
        echo "installed: $(command -v m40d) $(command -v m40ctl) $config; $(id m40-tester)"
        systemctl daemon-reload
        systemctl enable --now m40d.socket 2>&1 || ifail "systemctl enable --now m40d.socket"
        active m40d.socket active || ifail "m40d.socket is not active"
        active m40d.service inactive || ifail "m40d.service runs before any client"
        echo "socket unit listening: $(stat -c '%U:%G %a' /run/m40d) /run/m40d," \
                "$(stat -c '%U:%G %a' $sock) $sock; m40d.service inactive"

        # socket activation by a group-m40 user
        want=$(as m40-tester m40ctl submit --temp 0 -n 16 "$prompt") ||
                ifail "first submit as m40-tester (socket activation): exit $?"
        [ -n "$want" ] || ifail "first submit printed nothing"
        active m40d.service active || ifail "m40d.service not active after the first client"
        pid=$(systemctl show -P MainPID m40d.service)
        echo "activated: m40d pid $pid; m40ctl submit as m40-tester: '$want'"
        echo "after start: $(stat -c '%U:%G %a' /run/m40d) /run/m40d," \
                "$(stat -c '%U:%G %a' $sock) $sock"
        # 4 descriptors per client (socket, memfd, 2 doorbells) at max_clients = 4096
        n=$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits")
        echo "m40d's open files limit: $n (soft)"
        [ "$n" -ge $((4 * 4096)) ] || ifail "open files limit $n < 4 x max_clients 4096"
        got=$(as m40-tester m40ctl submit --temp 0 -n 16 "$prompt") ||
                ifail "second submit as m40-tester (m40d running): exit $?"
        [ "$got" = "$want" ] || ifail "second submit: '$got', want '$want'"
        if as m40-outsider m40ctl submit -n 1 "$prompt" >/dev/null 2>&1; then
                ifail "a user outside group m40 was served"
        fi
        echo "m40d running: m40-tester served again, m40-outsider refused"

        # restart and stop of the service keep the socket
        ino=$(stat -c %i $sock)
        systemctl restart m40d.service || ifail "systemctl restart m40d"
        [ -S $sock ] || ifail "restart: $sock is gone"
        [ "$(stat -c %i $sock)" = "$ino" ] || ifail "restart: $sock is a new socket"
        got=$(as m40-tester m40ctl submit --temp 0 -n 16 "$prompt") ||
                ifail "submit after systemctl restart m40d: exit $?"
        [ "$got" = "$want" ] || ifail "after restart: '$got', want '$want'"
        [ "$(systemctl show -P MainPID m40d.service)" != "$pid" ] || ifail "restart: same pid"
        echo "systemctl restart m40d: socket kept (inode $ino), m40-tester served"
        systemctl stop m40d.service || ifail "systemctl stop m40d"
        active m40d.socket active || ifail "m40d.socket stopped with the service"
        [ "$(stat -c %i $sock 2>/dev/null)" = "$ino" ] || ifail "stop: $sock is gone or new"
        got=$(as m40-tester m40ctl submit --temp 0 -n 16 "$prompt") ||
                ifail "submit after systemctl stop m40d (activation again): exit $?"
        [ "$got" = "$want" ] || ifail "after stop: '$got', want '$want'"
        echo "systemctl stop m40d: socket kept, the next client activated m40d again"

        # watchdog: a stopped m40d stops pinging; systemd aborts and restarts it
        pid=$(systemctl show -P MainPID m40d.service)
        n=$(systemctl show -P NRestarts m40d.service)
        echo "SIGSTOP to m40d pid $pid (WatchdogSec=$(systemctl show -P WatchdogUSec m40d.service))"
        kill -STOP "$pid"
        for _ in $(seq 120); do
                pid2=$(systemctl show -P MainPID m40d.service)
                [ "$pid2" != 0 ] && [ "$pid2" != "$pid" ] && active m40d.service active && break
                sleep 1
        done
        { [ "$pid2" != 0 ] && [ "$pid2" != "$pid" ]; } || ifail "no restart within 120 s of SIGSTOP"
        [ "$(systemctl show -P NRestarts m40d.service)" -gt "$n" ] ||
                ifail "m40d was not restarted by Restart= (NRestarts $n)"
        # PID 1's messages reach journald asynchronously; grep reads all (-q would leave
        # journalctl to die of SIGPIPE, which pipefail counts as not found)
        for _ in $(seq 30); do
                journalctl --sync
                journalctl --no-pager -u m40d.service | grep "Watchdog timeout" >/dev/null && break
                sleep 1
        done
        journalctl --no-pager -u m40d.service | grep "Watchdog timeout" >/dev/null ||
                ifail "no 'Watchdog timeout' in m40d.service's journal"
        got=$(as m40-tester m40ctl submit --temp 0 -n 16 "$prompt") ||
                ifail "submit after the watchdog restart: exit $?"
        [ "$got" = "$want" ] || ifail "after the watchdog restart: '$got', want '$want'"
        journalctl --no-pager -o cat -u m40d.service | grep -i -E "watchdog|signal|restart" |
                sed 's/^/  journal: /'
        echo "watchdog: pid $pid stopped, new m40d pid $pid2, m40-tester served"

        # the exposure rating of the loaded unit
        n=$(systemd-analyze security m40d.service 2>&1 | tail -n 1)
        echo "systemd-analyze security (running manager): $n"
        systemd-analyze security --threshold=10 m40d.service >/dev/null 2>&1 ||
                ifail "exposure above 1.0"
        echo "PASS"
}

# ---- in a private mount namespace: boot the container, run the checks, halt it -------
in_ns() {
        local work=$1 build=$2 src=$3 model=$4 cg=m40-units-test.$$ nsp cpid rc d n state
        local cgdirs=()
        mount -t tmpfs -o mode=0755 tmpfs /run || fail "cannot mount a tmpfs on /run"
        mkdir -p "$work/root" "$work/stage"
        mount --bind / "$work/root" || fail "cannot bind-mount /"
        echo "$build" >"$work/stage/build"
        cp "$model" "$work/stage/model.gguf"
        cp "$0" "$work/stage/test_units.sh"

        # the container's own cgroup (a systemd PID 1 wants a subtree to manage)
        if [ -d /sys/fs/cgroup/systemd ]; then
                cgdirs=("/sys/fs/cgroup/systemd/$cg")
                [ -f /sys/fs/cgroup/unified/cgroup.procs ] && cgdirs+=("/sys/fs/cgroup/unified/$cg")
        else
                cgdirs=("/sys/fs/cgroup/$cg")
        fi
        mkdir "${cgdirs[@]}" 2>/dev/null || skip "cannot create a cgroup (${cgdirs[*]})"

        (
                for d in "${cgdirs[@]}"; do echo "$BASHPID" >"$d/cgroup.procs"; done
                exec systemd-nspawn --quiet --register=no --keep-unit --link-journal=no \
                        --machine="m40units$$" -D "$work/root" --volatile=overlay \
                        --private-network --bind-ro="$work/stage:/m40stage" --console=pipe \
                        -b -- systemd.unit=sysinit.target systemd.show_status=no
        ) </dev/null >"$work/console.log" 2>&1 &
        nsp=$!
        cpid=
        for _ in $(seq 200); do
                for d in $(pgrep -P "$nsp"); do
                        n=$(awk '/^NSpid:/ {print $NF}' "/proc/$d/status" 2>/dev/null)
                        [ "$n" = 1 ] && cpid=$d   # PID 1 in its namespace
                done
                [ -n "$cpid" ] && break
                kill -0 "$nsp" 2>/dev/null || break
                sleep 0.1
        done
        rc=1
        if [ -z "$cpid" ]; then
                echo "FAIL: systemd-nspawn did not start a container" >&2
                cat "$work/console.log" >&2
        else
                ns() { nsenter -t "$cpid" -m -u -i -n -p -- env -i \
                        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
                        LANG=C.UTF-8 SYSTEMD_PAGER= SYSTEMD_COLORS=0 "$@"; }
                for _ in $(seq 300); do   # until PID 1 answers on its private socket
                        state=$(timeout 60 nsenter -t "$cpid" -m -p -- \
                                systemctl is-system-running --wait 2>&1) && break
                        case $state in *bus*) sleep 0.2 ;; *) break ;; esac
                done
                echo "systemd $(ns systemctl --version | awk 'NR == 1 {print $2}') is PID 1 of" \
                        "container pid $cpid (host), boot: $state"
                ns bash /m40stage/test_units.sh --inside
                rc=$?
        fi
        kill -TERM "$nsp" 2>/dev/null
        for _ in $(seq 200); do kill -0 "$nsp" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$nsp" 2>/dev/null
        wait "$nsp" 2>/dev/null
        for d in "${cgdirs[@]}"; do
                find "$d" -depth -type d -exec rmdir {} + 2>/dev/null
        done
        exit $rc
}

case "${1:-}" in
--inside) inside; exit ;;
--ns) shift; in_ns "$@" ;;
esac

[ $# -ge 2 ] || { echo "usage: $0 BUILD_DIR SOURCE_DIR [MODEL]" >&2; exit 2; }
build=$(realpath "$1") src=$(realpath "$2") model=${M40_UNITS_MODEL:-${3:-}}
{ [ -n "$model" ] && [ -f "$model" ]; } || skip "no model '$model' (set M40_UNITS_MODEL)"
[ "$(id -u)" = 0 ] || skip "needs root (systemd-nspawn)"
for t in systemd-nspawn unshare nsenter setpriv meson; do
        command -v $t >/dev/null || skip "no $t (Debian: systemd-container, util-linux, meson)"
done
[ -x /lib/systemd/systemd ] || skip "no /lib/systemd/systemd"
[ -d /sys/fs/cgroup/systemd ] || [ -f /sys/fs/cgroup/cgroup.procs ] || skip "no cgroup hierarchy"
work=$(mktemp -d /tmp/m40-units.XXXXXX)
# $work/root is a bind mount of / only inside the namespace; never delete through a mount
trap '{ [ ! -e "$work/root" ] || rmdir "$work/root"; } && rm -rf "$work"' EXIT
unshare --mount --propagation private bash "$(realpath "$0")" --ns "$work" "$build" "$src" \
        "$(realpath "$model")"
