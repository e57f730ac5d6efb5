#!/usr/bin/env bash
# test_config.sh - m40-gateway's settings without a daemon: the shipped m40-gateway.ini
# passes --check-config; bad files, values, token files and options are refused with a
# message naming what is wrong and the documented exit status (1 for settings, 2 for the
# command line); --help and --version answer.
#
# Usage: test_config.sh M40_GATEWAY SHIPPED_INI
set -uo pipefail
gw=$1 ini=$2
dir=$(mktemp -d /tmp/m40-gwcfg.XXXXXX)
trap 'rm -rf "$dir"' EXIT
bad=0
# run WANT_STATUS WANT_TEXT ARGS... - m40-gateway's status and its output must match
run() {
        local want=$1 text=$2 got
        shift 2
        "$gw" "$@" > "$dir/out" 2>&1
        got=$?
        if [ "$got" != "$want" ] || ! grep -q -- "$text" "$dir/out"; then
                echo "FAIL: m40-gateway $*: exit $got (want $want), output: $(head -c 300 "$dir/out")"
                bad=1
        else
                echo "ok   m40-gateway $* -> $got: $(head -n 1 "$dir/out")"
        fi
}
run 0 "settings are valid" --config "$ini" --check-config
run 0 "Usage: m40-gateway" --help
run 0 "m40-gateway (m40-llm) [0-9]" --version
run 2 "unrecognized option" --bogus
run 2 "unexpected argument" extra
run 2 "take 1..4096" --max-requests 0 --check-config
run 1 "No such file" --config "$dir/none.ini" --check-config
printf '[gateway]\nmax_requests = 5000\n' > "$dir/a.ini"
run 1 "'max_requests' out of range.*line 2" --config "$dir/a.ini" --check-config
printf '[gateway]\nlisten_on = x\n' > "$dir/b.ini"
run 1 "unknown key 'listen_on'" --config "$dir/b.ini" --check-config
printf '[server]\nlisten = x\n' > "$dir/c.ini"
run 1 "unknown section \[server\]" --config "$dir/c.ini" --check-config
printf '[gateway]\nidle_timeout = -1\n' > "$dir/d.ini"
run 1 "'idle_timeout' out of range" --config "$dir/d.ini" --check-config
printf 'short\n' > "$dir/short.token"
run 1 "16 to 255 printable" --token-file "$dir/short.token" --check-config
printf 'has a space in it, long enough\n' > "$dir/space.token"
run 1 "16 to 255 printable" --token-file "$dir/space.token" --check-config
printf '0123456789abcdef\n' > "$dir/ok.token"
printf '[gateway]\ntoken_file = %s\nmax_body_bytes = 4096\n' "$dir/ok.token" > "$dir/e.ini"
run 0 "settings are valid" --config "$dir/e.ini" --check-config
run 1 "HOST:PORT" --listen 8040 --check-config
run 1 "port in 0..65535" --listen 127.0.0.1:99999 --check-config
run 0 "settings are valid" --listen '[::1]:8040' --check-config
run 1 "cannot listen on" --listen nosuchhost.invalid:8040
[ "$bad" = 0 ] && echo "all passed"
exit $bad
