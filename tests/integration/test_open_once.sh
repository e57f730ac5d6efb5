#!/bin/sh
# test_open_once.sh M40D M40CTL M40_GEN MODEL - issue 21: m40d and m40-gen open the model
# file once (one open(2) of its path under strace: the tokenizer, the chat template and
# the engine share one parse, and the engine maps the descriptor the parse kept open).
# Skips (77) without the model or without a working strace (ptrace refused).
m40d=$1 m40ctl=$2 m40gen=$3 model=$4
. "$(dirname "$0")/itest.sh"
command -v strace >/dev/null 2>&1 && strace -f -o /dev/null true 2>/dev/null || exit 77

# once WHO TRACE - checks that the strace log TRACE has exactly one open/openat/openat2
# of the model
once() {
        n=$(grep -E 'open(at2?)?\(' "$2" | grep -cF "\"$model\"")
        echo "$1 opened $model $n time(s)"
        [ "$n" = 1 ] && return 0
        echo "FAIL: $1 opened the model $n times, want 1:"
        grep -F "$model" "$2"
        bad=1
}

printf '[model]\npath = %s\n[server]\nsocket = %s\ngroup =\n' "$model" "$dir/s" > "$dir/m40d.ini"
strace -f -qq -e trace=open,openat,openat2 -o "$dir/m40d.trace" \
        "$m40d" -c "$dir/m40d.ini" 2> "$dir/m40d.log" &
spid=$!
up=0
for _ in $(seq 100); do
        "$m40ctl" status --socket "$dir/s" >/dev/null 2>&1 && up=1 && break
        sleep 0.1
done
dpid=$(pgrep -P "$spid" | head -1)
if [ "$up" = 1 ] && [ -n "$dpid" ]; then
        out=$("$m40ctl" submit --socket "$dir/s" -n 4 "Once upon a time" 2>&1) ||
                { echo "FAIL: a request to m40d under strace: $out"; bad=1; }
        kill -TERM "$dpid"
else
        echo "FAIL: m40d did not come up under strace:"; cat "$dir/m40d.log"; bad=1
        kill "$spid" 2>/dev/null
fi
wait "$spid"
once m40d "$dir/m40d.trace"

strace -f -qq -e trace=open,openat,openat2 -o "$dir/gen.trace" \
        "$m40gen" -m "$model" -p "Once upon a time" -n 4 > "$dir/gen.out" 2>&1 ||
        { echo "FAIL: m40-gen:"; cat "$dir/gen.out"; bad=1; }
once m40-gen "$dir/gen.trace"
exit $bad
