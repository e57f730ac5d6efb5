#!/usr/bin/env bash
# test_chat.sh - issue 20 item 11: `m40ctl run` with scripted stdin (no terminal) against
# m40d on stories260K with a 64-token context:
#   - the conversation outgrows the context: the oldest exchanges are dropped (the chat
#     says so) and every turn still gets a reply, none fails (--ignore-eos: each reply
#     ends at -n or the context, with its marker);
#   - a 20 KB line is one turn (one "does not fit" error, not three), the next line works;
#   - a reply cut by -n ends with a "[reply cut at max_tokens" marker;
#   - /reset says "[conversation reset]".
#
# Usage: test_chat.sh M40D M40CTL MODEL
set -euo pipefail
m40d=$1 m40ctl=$2 model=$3
. "$(dirname "$0")/itest.sh"
fail() { echo "FAIL: $*" >&2; sed 's/^/  stderr: /' "$dir/err" >&2; bad=1; }
sock=$dir/m40d.sock
start_m40d "$sock" '[engine]\nmax_context = 64'
chat() { timeout 60 "$m40ctl" run --socket "$sock" --temp 0 "$@" >"$dir/out" 2>"$dir/err"; }

# overflow: six turns of about 20 tokens each in a 64-token context
printf '%s\n' "Once upon a time" "The cat sat on the mat" "Lily went to the park" \
        "Tom had a big red ball" "The sun was shining" "A dog named Max" |
        chat -n 12 --ignore-eos ||
        fail "overflow: exit $?"
grep -q "dropped the oldest exchange" "$dir/err" || fail "overflow: nothing dropped"
if grep -q "m40ctl" "$dir/err"; then fail "overflow: a turn failed"; fi
# with --ignore-eos every reply ends at -n or the context, each with its marker
[ "$(grep -c '^\[reply cut' "$dir/err")" = 6 ] || fail "overflow: not 6 replies"

# a 20 KB line is one turn; the chat goes on
{ head -c 20000 /dev/zero | tr '\0' a; echo; echo "Mom said"; } | chat -n 8 --ignore-eos ||
        fail "long line: exit $?"
[ "$(grep -c "m40ctl" "$dir/err")" = 1 ] || fail "long line: not exactly one failed turn"
grep -q "does not fit" "$dir/err" || fail "long line: no 'does not fit'"
[ "$(grep -c '^\[reply cut' "$dir/err")" = 1 ] || fail "long line: the next line got no reply"

# a reply cut by -n is marked; /reset says so
printf '%s\n' "Once upon a time" /reset | chat -n 3 --ignore-eos || fail "marker: exit $?"
grep -q '^\[reply cut at max_tokens: 3 tokens' "$dir/err" || fail "no max_tokens marker"
grep -q '^\[conversation reset\]' "$dir/err" || fail "/reset printed nothing"

[ "$bad" = 0 ] && echo "chat: overflow dropped oldest turns, long line one turn, markers shown"
exit $bad
