#!/bin/sh
# test_zeroconf.sh M40D M40CTL MODEL SHIPPED_INI - issue 22 scope 3, zero-config start:
#   1. m40d --help documents -m, the model store and the user socket;
#   2. the shipped m40d.ini passes --check-config where its group does not exist;
#   3. -m NAME resolves through the model store ($M40_MODELS), an unknown NAME fails;
#      m40d -m NAME and m40ctl pull --name NAME refuse the same invalid names (m40/paths.h)
#      and accept the same valid one;
#   4. as a user other than root (setpriv to nobody when run by root): m40d -m MODEL with
#      no ini listens on $XDG_RUNTIME_DIR/m40d/m40d.sock (directory 0700), m40ctl finds it
#      without --socket, a second m40d refuses ("already running (pid N)"), no progress
#      line when stderr is not a terminal;
#   5. on a terminal (script(1)), the load progress line "loading NAME: ... (100%)".
m40d=$1 m40ctl=$2 model=$3 ini=$4
. "$(dirname "$0")/itest.sh"
chmod 755 "$dir"

# 1
help=$("$m40d" --help) || { echo "FAIL: m40d --help exits non-zero"; bad=1; }
for w in "--model MODEL" M40_MODELS XDG_RUNTIME_DIR/m40d/m40d.sock "already running" \
        "loading MODEL" "--check-config"; do
        case $help in *"$w"*) ;; *) echo "FAIL: m40d --help does not mention $w"; bad=1 ;; esac
done
"$m40d" -m 2>/dev/null; [ $? = 2 ] || { echo "FAIL: m40d -m without MODEL: not exit 2"; bad=1; }

# 2: the shipped file, with the test model and a group that does not exist here
sed -e "s|^path = .*|path = $model|" -e 's|^group = .*|group = m40-no-such-group|' \
        "$ini" > "$dir/shipped.ini"
grep -q '^group = m40-no-such-group' "$dir/shipped.ini" || { echo "FAIL: no group in $ini"; bad=1; }
if "$m40d" -c "$dir/shipped.ini" --check-config 2> "$dir/check.log"; then
        grep -q "no group named 'm40-no-such-group'" "$dir/check.log" ||
                { echo "FAIL: --check-config did not say the group is missing"; bad=1; }
else
        echo "FAIL: the shipped m40d.ini fails --check-config without its group:"
        cat "$dir/check.log"; bad=1
fi

# 3: the model store
mkdir -p "$dir/store" && cp "$model" "$dir/store/tiny.gguf" && chmod -R a+rX "$dir/store"
M40_MODELS=$dir/store "$m40d" -m tiny --check-config 2> "$dir/store.log" &&
        grep -q "model $dir/store/tiny.gguf" "$dir/store.log" ||
        { echo "FAIL: -m tiny did not resolve to $dir/store/tiny.gguf:"; cat "$dir/store.log"; bad=1; }
M40_MODELS=$dir/store "$m40d" -m nosuch --check-config 2> "$dir/nosuch.log"
[ $? = 1 ] && grep -q "not in the model store" "$dir/nosuch.log" ||
        { echo "FAIL: -m nosuch:"; cat "$dir/nosuch.log"; bad=1; }

long=$(printf '%0201d' 0)
for name in .hidden .. "$(printf 'a\001b')" "$long"; do
        M40_MODELS=$dir/store "$m40d" -m "$name" --check-config 2> "$dir/name.log"
        rc=$?
        [ $rc = 1 ] && grep -q "not a path .* and a model name" "$dir/name.log" ||
                { echo "FAIL: m40d -m '$name': exit $rc:"; cat "$dir/name.log"; bad=1; }
        M40_MODELS=$dir/store "$m40ctl" pull -q --retries 0 --name "$name" \
                http://127.0.0.1:1/x.gguf 2> "$dir/name.log"
        rc=$?
        [ $rc = 2 ] && grep -q "bad --name" "$dir/name.log" ||
                { echo "FAIL: m40ctl pull --name '$name': exit $rc:"; cat "$dir/name.log"; bad=1; }
done
ok=$(printf 'ok %0195d' 0) # 200 bytes, with a space: a valid name for both
M40_MODELS=$dir/store "$m40d" -m "$ok" --check-config 2> "$dir/name.log"
[ $? = 1 ] && grep -q "is not in the model store" "$dir/name.log" ||
        { echo "FAIL: m40d -m '$ok':"; cat "$dir/name.log"; bad=1; }
M40_MODELS=$dir/store "$m40ctl" pull -q --retries 0 --name "$ok" http://127.0.0.1:1/x.gguf \
        2> "$dir/name.log"
[ $? = 1 ] && ! grep -q "bad --name" "$dir/name.log" ||
        { echo "FAIL: m40ctl pull --name '$ok':"; cat "$dir/name.log"; bad=1; }

# 4: a user's m40d
as=
if [ "$(id -u)" = 0 ]; then
        if command -v setpriv >/dev/null 2>&1; then
                as="setpriv --reuid=65534 --regid=65534 --clear-groups"
        else
                echo "SKIP part 4: root without setpriv"
        fi
fi
if [ "$(id -u)" != 0 ] || [ -n "$as" ]; then
        rt=$dir/rt
        mkdir "$rt" && [ -z "$as" ] || chown 65534:65534 "$rt"
        XDG_RUNTIME_DIR=$rt M40_SOCKET= $as "$m40d" -m "$dir/store/tiny.gguf" \
                2> "$dir/user.log" &
        pid=$!
        up=0
        for _ in $(seq 100); do
                XDG_RUNTIME_DIR=$rt M40_SOCKET= $as "$m40ctl" status >/dev/null 2>&1 &&
                        up=1 && break
                sleep 0.1
        done
        if [ $up = 1 ]; then
                [ -S "$rt/m40d/m40d.sock" ] || { echo "FAIL: no $rt/m40d/m40d.sock"; bad=1; }
                mode=$(stat -c %a "$rt/m40d")
                [ "$mode" = 700 ] || { echo "FAIL: $rt/m40d has mode $mode"; bad=1; }
                XDG_RUNTIME_DIR=$rt M40_SOCKET= $as "$m40d" -m "$dir/store/tiny.gguf" \
                        2> "$dir/second.log"
                [ $? = 1 ] && grep -q "already running (pid $pid)" "$dir/second.log" ||
                        { echo "FAIL: a second m40d:"; cat "$dir/second.log"; bad=1; }
                kill -TERM "$pid"; wait "$pid" || { echo "FAIL: m40d exit $?"; bad=1; }
                pid=
                ! grep -q "loading tiny.gguf:" "$dir/user.log" ||
                        { echo "FAIL: a progress line without a terminal"; bad=1; }
        else
                echo "FAIL: a user's m40d did not answer at \$XDG_RUNTIME_DIR:"
                cat "$dir/user.log"; bad=1
        fi
fi

# 5: the progress line on a terminal
if command -v script >/dev/null 2>&1; then
        printf '[server]\nsocket = %s\ngroup =\n' "$dir/tty.sock" > "$dir/tty.ini"
        script -qec "timeout -s TERM 3 '$m40d' -c '$dir/tty.ini' -m '$model'" \
                "$dir/tty.out" > /dev/null 2>&1
        grep -q "loading $(basename "$model"): .*(100%) .*/s" "$dir/tty.out" ||
                { echo "FAIL: no progress line on a terminal:"; cat "$dir/tty.out"; bad=1; }
fi
exit $bad
