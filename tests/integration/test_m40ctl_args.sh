#!/usr/bin/env bash
# test_m40ctl_args.sh - issue 20 item 10 (client side): every numeric option of m40ctl
# rejects a bad value (not a number, out of range, NaN, a fraction where an integer is
# wanted, a negative seed) with exit 2 and a message that names the option and its range;
# good values are accepted; a prompt over m40d's request size is refused with a message
# that names the limit (not "Argument list too long").
#
# Usage: test_m40ctl_args.sh M40D M40CTL MODEL
set -euo pipefail
m40d=$1 m40ctl=$2 model=$3
. "$(dirname "$0")/itest.sh"
fail() { echo "FAIL: $*" >&2; bad=1; }

# rejected CMD OPTION VALUE RANGE: exit 2 and "OPTION wants ... from RANGE, not 'VALUE'"
rejected() {
        local cmd=$1 opt=$2 val=$3 range=$4 rc=0
        "$m40ctl" "$cmd" "$opt" "$val" --socket "$dir/none" x >/dev/null 2>"$dir/err" || rc=$?
        [ "$cmd" = status ] && { rc=0; "$m40ctl" status "$opt" "$val" --socket "$dir/none" \
                >/dev/null 2>"$dir/err" || rc=$?; }
        local name=$opt
        [ "$opt" = -n ] && name=--max-tokens
        if [ "$rc" != 2 ] || ! grep -q -- "$name wants .* from $range, not '$val'" "$dir/err"; then
                fail "m40ctl $cmd $opt '$val': exit $rc, stderr: $(cat "$dir/err")"
        fi
}
for cmd in submit run; do
        for v in abc 0 1.5 1e9 -3 ''; do rejected $cmd --max-tokens "$v" "1 to 1048576"; done
        rejected $cmd -n x "1 to 1048576"
        for v in hot -1 nan inf 101 1e; do rejected $cmd --temp "$v" "0 to 100"; done
        for v in x -1 2.5 2000000; do rejected $cmd --top-k "$v" "0 to 1048576"; done
        for v in x 1.5 -0.1 nan; do rejected $cmd --top-p "$v" "0 to 1"; done
        for v in x 2 -1; do rejected $cmd --min-p "$v" "0 to 1"; done
        for v in x 0 1000; do rejected $cmd --repeat-penalty "$v" "0.01 to 100"; done
        for v in abc -1 1x 18446744073709551616 ''; do
                rejected $cmd --seed "$v" "0 to 18446744073709551615"
        done
        for v in x -1 1e9; do rejected $cmd --timeout "$v" "0 to 86400"; done
done
for v in x -1 nan; do rejected status --timeout "$v" "0 to 86400"; done

# good values pass the parser (the missing daemon is what fails: exit 3)
rc=0; "$m40ctl" submit --socket "$dir/none" -n 8 --temp 0.7 --top-k 0 --top-p 1 --min-p 0 \
        --repeat-penalty 1.1 --seed 0xffffffffffffffff --timeout 0.5 x >/dev/null 2>&1 || rc=$?
[ "$rc" = 3 ] || fail "good values: exit $rc, want 3"

# a prompt over the daemon's request size (max_prompt_bytes = 1024)
start_m40d "$dir/m40d.sock" 'max_prompt_bytes = 1024'
long=$(head -c 9000 /dev/zero | tr '\0' a)
rc=0; "$m40ctl" submit --socket "$dir/m40d.sock" "$long" >/dev/null 2>"$dir/err" || rc=$?
if [ "$rc" != 4 ] || grep -q "Argument list too long" "$dir/err" ||
   ! grep -q "the prompt is too long: 9000 bytes, and m40d takes at most [0-9]* bytes" "$dir/err"; then
        fail "long prompt: exit $rc, stderr: $(cat "$dir/err")"
fi
rc=0; printf '%s\n' "$long" | "$m40ctl" run --socket "$dir/m40d.sock" >/dev/null 2>"$dir/err" || rc=$?
if grep -q "Argument list too long" "$dir/err" ||
   ! grep -q "the message is too long: 9000 bytes, and m40d takes at most [0-9]* bytes" "$dir/err"; then
        fail "long chat line: exit $rc, stderr: $(cat "$dir/err")"
fi
[ "$bad" = 0 ] && echo "all bad values rejected with the option and its range"
exit $bad
