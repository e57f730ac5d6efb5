# itest.sh - sourced by the integration suite's shell tests after they set $m40d, $m40ctl
# and $model: skips (77) without the model, makes $dir (removed at exit with the m40d in
# $pid), sets bad=0, and defines start_m40d.

[ -r "$model" ] || exit 77
dir=$(mktemp -d /tmp/m40-itest.XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
bad=0

# start_m40d SOCKET INI_TEXT - writes $dir/m40d.ini (model path, socket, no group, then
# INI_TEXT), starts m40d in the background (log $dir/m40d.log) and waits until
# `m40ctl status` answers.
start_m40d() {
        printf '[model]\npath = %s\n[server]\nsocket = %s\ngroup =\n%b\n' "$model" "$1" "$2" \
                > "$dir/m40d.ini"
        "$m40d" -c "$dir/m40d.ini" 2> "$dir/m40d.log" &
        pid=$!
        for _ in $(seq 100); do
                "$m40ctl" status --socket "$1" >/dev/null 2>&1 && return 0
                sleep 0.1
        done
        echo "m40d did not come up:" >&2; cat "$dir/m40d.log" >&2
        return 1
}
