#!/usr/bin/env bash
# test_install.sh - issue 22 acceptance 5: `meson install --destdir` of the build tree, then
#   - every file of the install scope is there: m40d, m40ctl, m40-gen, libm40 (shared with
#     SONAME libm40.so.0 and its links, static), the headers, m40.pc, the units (naming this
#     prefix's m40d and m40d.ini), the sysusers.d and tmpfiles.d files, m40d.ini under
#     sysconfdir (the shipped one), the man pages m40d(8) m40ctl(1) m40d.ini(5) libm40(3)
#     (rendering with man), and m40ctl's bash completion; a second install keeps an edited
#     m40d.ini; and m40-gateway with its units
#     and m40-gateway(8) when the build has the gateway (M40_GATEWAY=yes; it says so);
#   - `--version` of every installed program prints "PROGRAM (m40-llm) VERSION";
#   - the installed m40ctl runs from the destdir tree, and again after the whole prefix is
#     moved elsewhere, without LD_LIBRARY_PATH, loading the installed libm40.so.0 (its
#     run-path is relative: $ORIGIN/..), for any prefix but /usr (no run-path there: the
#     test checks there is none);
#   - client/example.c builds with `pkg-config m40` from the installed m40.pc, dynamically
#     and statically (libm40.a), and both programs run;
#   - `systemd-analyze verify` passes, silently, on the installed units with the destdir
#     tree as root (their programs and man pages there).
# The layout comes from meson (environment below), the expected names from the scope.
#
# Usage: test_install.sh BUILD_DIR SOURCE_DIR
#   environment (tests/install/meson.build sets it): M40_VERSION PREFIX BINDIR SBINDIR
#   LIBDIR INCLUDEDIR MANDIR SYSCONFDIR UNITDIR SYSUSERSDIR TMPFILESDIR BASHCOMPDIR
#   (absolute) M40_GATEWAY=yes|no M40_MAN=yes|no
# Exit 0 pass, 1 fail, 77 skip (no meson, cc or pkg-config).
set -uo pipefail

build=$(realpath "$1") src=$(realpath "$2")
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
for t in meson cc pkg-config readelf; do
        command -v $t >/dev/null || { echo "SKIP: no $t"; exit 77; }
done

work=$(mktemp -d /tmp/m40-install.XXXXXX)
trap 'rm -rf "$work"' EXIT
dest=$work/dest
meson install -C "$build" --no-rebuild --destdir "$dest" >"$work/install.log" 2>&1 ||
        { cat "$work/install.log"; echo "FAIL: meson install --destdir"; exit 1; }
echo "installed into $dest (prefix $PREFIX)"
D() { printf '%s%s' "$dest" "$1"; }

# ---- the files -------------------------------------------------------------------------
need() {   # need PATH KIND: KIND f (file), x (executable), l (symlink)
        local p
        p=$(D "$1")
        case $2 in
        x) [ -f "$p" ] && [ -x "$p" ] ;;
        l) [ -L "$p" ] && [ -e "$p" ] ;;
        *) [ -f "$p" ] && [ -s "$p" ] ;;
        esac || { fail "missing $1"; return 1; }
}
need "$SBINDIR/m40d" x
need "$BINDIR/m40ctl" x
need "$BINDIR/m40-gen" x
need "$LIBDIR/libm40.so.0.1.0" f
need "$LIBDIR/libm40.so.0" l
need "$LIBDIR/libm40.so" l
need "$LIBDIR/libm40.a" f
need "$INCLUDEDIR/m40/m40.h" f
need "$INCLUDEDIR/m40/error.h" f
need "$LIBDIR/pkgconfig/m40.pc" f
need "$UNITDIR/m40d.service" f
need "$UNITDIR/m40d.socket" f
need "$SYSUSERSDIR/m40d.conf" f
need "$TMPFILESDIR/m40d.conf" f
need "$SYSCONFDIR/m40d/m40d.ini" f && { cmp -s "$(D "$SYSCONFDIR/m40d/m40d.ini")" "$src/m40d.ini" ||
        fail "$SYSCONFDIR/m40d/m40d.ini is not the shipped m40d.ini"; }
need "$BASHCOMPDIR/m40ctl" f
# a second install keeps the administrator's m40d.ini
printf '; edited\n' >>"$(D "$SYSCONFDIR/m40d/m40d.ini")"
meson install -C "$build" --no-rebuild --destdir "$dest" >"$work/install2.log" 2>&1 ||
        { cat "$work/install2.log"; fail "meson install --destdir, again"; }
tail -n 1 "$(D "$SYSCONFDIR/m40d/m40d.ini")" | grep -qx '; edited' ||
        fail "a second meson install replaced the edited $SYSCONFDIR/m40d/m40d.ini"
sed -i '$d' "$(D "$SYSCONFDIR/m40d/m40d.ini")"
pages=(man8/m40d.8 man1/m40ctl.1 man5/m40d.ini.5 man3/libm40.3)
progs=("$SBINDIR/m40d" "$BINDIR/m40ctl" "$BINDIR/m40-gen")
units=(m40d.socket m40d.service)
if [ "$M40_GATEWAY" = yes ]; then
        echo "the build has m40-gateway: checking its program, units and man page too"
        gw=$BINDIR/m40-gateway
        [ -e "$(D "$SBINDIR/m40-gateway")" ] && gw=$SBINDIR/m40-gateway
        need "$gw" x && progs+=("$gw")
        need "$UNITDIR/m40-gateway.service" f
        need "$UNITDIR/m40-gateway.socket" f
        need "$SYSUSERSDIR/m40-gateway.conf" f
        need "$SYSCONFDIR/m40d/m40-gateway.ini" f
        pages+=(man8/m40-gateway.8)
        units+=(m40-gateway.socket m40-gateway.service)
else
        echo "note: the build has no m40-gateway (client/gateway/): its files are not checked"
fi
if [ "$M40_MAN" = yes ]; then
        for p in "${pages[@]}"; do
                need "$MANDIR/$p" f || continue
                out=$(MANWIDTH=80 man -l "$(D "$MANDIR/$p")" 2>&1) || fail "man -l $p: $out"
                grep -q '^NAME' <<<"$out" || fail "$p renders without a NAME section"
        done
        ok "man pages ${pages[*]}"
else
        fail "the man pages were not built (configure found no scdoc; Debian: apt-get install scdoc)"
fi

# shared library: SONAME, links
soname=$(readelf -d "$(D "$LIBDIR/libm40.so.0.1.0")" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libm40.so.0 ] || fail "libm40's SONAME is '$soname', want libm40.so.0"
[ "$(readlink "$(D "$LIBDIR/libm40.so.0")")" = libm40.so.0.1.0 ] || fail "libm40.so.0 link"
ok "libm40.so.0.1.0 (SONAME $soname), libm40.so.0, libm40.so, libm40.a, headers, m40.pc"

# units: this prefix's paths
svc=$(D "$UNITDIR/m40d.service")
exec_start=$(sed -n 's/^ExecStart=//p' "$svc")
[ "$exec_start" = "$SBINDIR/m40d -c $SYSCONFDIR/m40d/m40d.ini" ] ||
        fail "m40d.service: ExecStart=$exec_start, want $SBINDIR/m40d -c $SYSCONFDIR/m40d/m40d.ini"
grep -q "^d $SYSCONFDIR/m40d " "$(D "$TMPFILESDIR/m40d.conf")" ||
        fail "m40d's tmpfiles.d file does not make $SYSCONFDIR/m40d"
if grep -n '@[A-Z_]*@' "$(D "$UNITDIR")"/m40*.service "$(D "$UNITDIR")"/m40*.socket \
        "$(D "$TMPFILESDIR/m40d.conf")"; then
        fail "unsubstituted @VARIABLES@ in the installed units"
fi
ok "m40d.service: ExecStart=$exec_start"

# ---- --version ---------------------------------------------------------------------------
# (prefix /usr: no run-path, so the destdir's libm40 through LD_LIBRARY_PATH)
runenv=(env -u LD_LIBRARY_PATH)
[ "$PREFIX" = /usr ] && runenv=(env LD_LIBRARY_PATH="$(D "$LIBDIR")")
for p in "${progs[@]}"; do
        [ -x "$(D "$p")" ] || continue
        want="$(basename "$p") (m40-llm) $M40_VERSION"
        got=$("${runenv[@]}" "$(D "$p")" --version 2>&1) ||
                fail "$p --version: exit $?: $got"
        [ "$got" = "$want" ] || fail "$p --version: '$got', want '$want'"
done
ok "--version of ${progs[*]##*/}: '<program> (m40-llm) $M40_VERSION'"

# ---- run-path: m40ctl from the destdir tree, then moved --------------------------------
runs_alone() {   # runs_alone M40CTL LIBDIR: loads LIBDIR's libm40, talks (fails) to no m40d
        local lib out rc
        lib=$(env -u LD_LIBRARY_PATH ldd "$1" | awk '$1 == "libm40.so.0" {print $3}')
        [ -n "$lib" ] && lib=$(realpath "$lib")
        [ "$lib" = "$(realpath "$2/libm40.so.0")" ] || { fail "$1 loads libm40.so.0 from '$lib', want $2"; return; }
        out=$(env -u LD_LIBRARY_PATH M40_SOCKET="$work/none.sock" "$1" status --timeout 2 2>&1)
        rc=$?
        [ $rc = 3 ] && grep -q "cannot reach m40d" <<<"$out" ||
                fail "$1 status (no m40d): exit $rc, '$out'; want 3, cannot reach m40d"
}
m40ctl=$(D "$BINDIR/m40ctl")
runpath=$(readelf -d "$m40ctl" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
if [ "$PREFIX" = /usr ]; then
        [ -z "$runpath" ] || fail "prefix /usr: m40ctl has a run-path ($runpath), want none"
        echo "note: prefix /usr: libm40 is in the loader's path; no run-path to check"
else
        echo "m40ctl's run-path: $runpath"
        case $runpath in
        '$ORIGIN'*) ;;
        *) fail "m40ctl's run-path '$runpath' is not relative to \$ORIGIN" ;;
        esac
        runs_alone "$m40ctl" "$(D "$LIBDIR")"
        mkdir -p "$work/moved"
        mv "$dest$PREFIX" "$work/moved/tree"
        rel=${BINDIR#"$PREFIX"} rellib=${LIBDIR#"$PREFIX"}
        runs_alone "$work/moved/tree$rel/m40ctl" "$work/moved/tree$rellib"
        mv "$work/moved/tree" "$dest$PREFIX"
        ok "installed m40ctl runs without LD_LIBRARY_PATH from $dest$PREFIX and moved elsewhere"
fi

# ---- example.c with pkg-config m40 ----------------------------------------------------
pc() { PKG_CONFIG_PATH=$(D "$LIBDIR/pkgconfig") PKG_CONFIG_LIBDIR= \
        pkg-config --define-variable=prefix="$dest$PREFIX" "$@" m40; }
[ "$(pc --modversion)" = "$M40_VERSION" ] || fail "pkg-config m40 --modversion: $(pc --modversion)"
# shellcheck disable=SC2046
if cc -o "$work/ex" "$src/client/example.c" $(pc --cflags --libs) 2>"$work/cc.log"; then
        out=$(LD_LIBRARY_PATH=$(D "$LIBDIR") M40_SOCKET="$work/none.sock" "$work/ex" hi 2>&1)
        rc=$?
        [ $rc = 1 ] && grep -q "^connect:" <<<"$out" || fail "example (shared): exit $rc, '$out'"
        env LD_LIBRARY_PATH=$(D "$LIBDIR") ldd "$work/ex" | grep "$(D "$LIBDIR")/libm40.so.0" >/dev/null ||
                fail "example does not load the installed libm40.so.0"
else
        cat "$work/cc.log"
        fail "cc example.c \$(pkg-config --cflags --libs m40)"
fi
# shellcheck disable=SC2046
if cc -static -o "$work/ex-static" "$src/client/example.c" $(pc --static --cflags --libs) \
        2>"$work/cc.log"; then
        out=$(M40_SOCKET="$work/none.sock" "$work/ex-static" hi 2>&1)
        rc=$?
        [ $rc = 1 ] && grep -q "^connect:" <<<"$out" || fail "example (static): exit $rc, '$out'"
        readelf -d "$work/ex-static" 2>/dev/null | grep NEEDED >/dev/null &&
                fail "the static example needs shared libraries"
else
        cat "$work/cc.log"
        fail "cc -static example.c \$(pkg-config --static --cflags --libs m40)"
fi
ok "example.c built with pkg-config m40: $(pc --cflags --libs | tr -s ' ')"

# ---- systemd-analyze verify ------------------------------------------------------------
# With the destdir tree as root: ExecStart= must name an executable in it, and the units'
# Documentation= pages must be found by man in the installed man directory. The host's
# units (sysinit.target, sockets.target, ... that m40d's units depend on) are copied into
# the tree first. Any message (systemd-analyze passes with warnings) fails the check.
if command -v systemd-analyze >/dev/null && [ -d /lib/systemd/system ]; then
        mkdir -p "$dest/lib/systemd/system"
        cp -a /lib/systemd/system/. "$dest/lib/systemd/system/"
        paths=()
        for u in "${units[@]}"; do paths+=("$(D "$UNITDIR/$u")"); done
        # SYSTEMD_UNIT_PATH (under the root; the trailing ':' keeps the default path): the
        # unit directory of a prefix outside systemd's search path, like /opt/m40
        out=$(SYSTEMD_UNIT_PATH="$UNITDIR:" MANPATH=$(D "$MANDIR") \
                systemd-analyze verify --root="$dest" "${paths[@]}" 2>&1)
        rc=$?
        if [ $rc = 0 ] && [ -z "$out" ]; then
                ok "systemd-analyze verify --root=DESTDIR ${units[*]}"
        else
                fail "systemd-analyze verify (exit $rc): $out"
        fi
else
        fail "no systemd-analyze or /lib/systemd/system (Debian: systemd)"
fi

[ $fails = 0 ] && { echo PASS; exit 0; }
echo "$fails check(s) failed"
exit 1
