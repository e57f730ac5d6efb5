#!/usr/bin/env bash
# test_pull.sh - issue 22 scope 2: `m40ctl pull/list/rm/show NAME` against a local HTTP server
# (pull_server.py on 127.0.0.1) serving stories260K.gguf: a full pull verified against the
# published URL.sha256; a transfer cut short and resumed by a second run with a Range request
# (the server's log shows only the missing bytes sent), and one retried within a run; a file
# changed on the server between runs (If-Range: started over); Ctrl-C keeps a resumable
# .part; a failed write keeps the whole-bytes prefix; a wrong sha256 (given, published) and a
# file that is not GGUF leave no file; a 404, a refused connection and a self-signed TLS
# certificate say so and leave no file; list/show/rm on the result; the progress bar on a
# terminal, lines elsewhere.
#
# Usage: test_pull.sh M40CTL MODEL   (exit 0 pass, 1 fail, 77 when MODEL is absent)
set -uo pipefail
m40ctl=$1 model=$2
[ -f "$model" ] || { echo "skip: $model not present"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
srv=
cleanup() {
        [ -n "$srv" ] && kill "$srv" 2>/dev/null && wait "$srv" 2>/dev/null
        rm -rf "$dir"
}
trap cleanup EXIT
bad=0
fail() { echo "FAIL: $*" >&2; bad=1; }
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY
export M40_MODELS=$dir/store

www=$dir/www
mkdir -p "$www"
size=$(stat -c %s "$model")
cp "$model" "$www/stories260K.gguf"
(cd "$www" && sha256sum stories260K.gguf >stories260K.gguf.sha256)
cp "$model" "$www/nosha.gguf"
cp "$model" "$www/cut.gguf"
cp "$model" "$www/retry.gguf"
cp "$model" "$www/slow.gguf"
cp "$model" "$www/wrong.gguf"
printf 'SHA256 (wrong.gguf) = %064d\n' 0 >"$www/wrong.gguf.sha256"
head -c 300000 /dev/urandom >"$www/moving.gguf"
head -c 100000 /dev/urandom >"$www/notgguf.gguf"
want=$(sha256sum <"$model" | cut -d' ' -f1)

python3 "$here/pull_server.py" --root "$www" --log "$dir/log" --port-file "$dir/port" &
srv=$!
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
[ -s "$dir/port" ] || { echo "FAIL: the test server did not start"; exit 1; }
base=http://127.0.0.1:$(cat "$dir/port")
control() { python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1]).read()" "$base/_control?$1"; }
# log_of PATH: the server's log lines for PATH as "status range sent" lines
log_of() {
        python3 -c '
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["path"] == sys.argv[2]:
        print(e["status"], e["range"] or "-", e["if_range"] or "-", e["sent"])' "$dir/log" "$1"
}
pull() { "$m40ctl" pull "$@" >"$dir/out" 2>"$dir/err"; }
no_trace() { # NAME: neither the model nor a .part left in the store
        [ ! -e "$M40_MODELS/$1.gguf" ] || fail "$1: a final file was left"
        [ ! -e "$M40_MODELS/.$1.gguf.part" ] || fail "$1: a .part was left"
        [ ! -e "$M40_MODELS/.$1.gguf.part.meta" ] || fail "$1: a .part.meta was left"
}

# 1. A full pull, verified against the published sha256; progress lines off a terminal.
pull "$base/stories260K.gguf"; rc=$?
[ $rc = 0 ] || fail "full pull: exit $rc: $(cat "$dir/err")"
cmp -s "$model" "$M40_MODELS/stories260K.gguf" || fail "full pull: stored file differs"
grep -q "sha256 $want verified against $base/stories260K.gguf.sha256" "$dir/out" ||
        fail "full pull: no verified sha256 in: $(cat "$dir/out")"
grep -q "^stories260K: 100% " "$dir/err" || fail "full pull: no final progress line: $(cat "$dir/err")"
grep -q $'\r' "$dir/err" && fail "full pull: a terminal bar off a terminal"
no_trace_part() { [ ! -e "$M40_MODELS/.$1.gguf.part" ] || fail "$1: a .part was left"; }
no_trace_part stories260K

# 2. list, show NAME, and a second pull of the same name.
j=$("$m40ctl" list --json) || fail "list --json failed"
python3 -c '
import json, sys
d = json.loads(sys.argv[1]); m = {x["name"]: x for x in d["models"]}
s = m["stories260K"]
assert d["store"] == sys.argv[2], d["store"]
assert s["architecture"] == "llama" and s["type"] == "F32" and s["parameters"] == 292800, s
assert s["bytes"] == int(sys.argv[3]) and d["partial"] == [], d' "$j" "$M40_MODELS" "$size" ||
        fail "list --json: $j"
"$m40ctl" list | grep -Eq '^stories260K +1\.1 MiB +llama +292\.8K +F32 +[0-9]{4}-' ||
        fail "list: $("$m40ctl" list)"
a=$("$m40ctl" show --json stories260K) || fail "show NAME failed"
b=$("$m40ctl" show --json "$model")
[ "${a#*\"file_bytes\"}" = "${b#*\"file_bytes\"}" ] || fail "show NAME differs from show FILE"
"$m40ctl" show nosuchmodel >/dev/null 2>"$dir/err"; rc=$?
[ $rc = 1 ] && grep -q "no model 'nosuchmodel' in the store" "$dir/err" || fail "show of a missing name: $rc"
pull "$base/stories260K.gguf"; rc=$?
[ $rc = 1 ] && grep -q "in the store already" "$dir/err" || fail "second pull: exit $rc"
pull --force -q "$base/stories260K.gguf"; rc=$?
[ $rc = 0 ] && [ ! -s "$dir/err" ] || fail "pull --force -q: exit $rc, stderr $(cat "$dir/err")"

# 3. No sha256 published: said so, the GGUF check still applies.
pull "$base/nosha.gguf" --name plain; rc=$?
[ $rc = 0 ] && grep -q "no sha256 given or published" "$dir/err" &&
        grep -q "not verified" "$dir/out" || fail "unverified pull: exit $rc: $(cat "$dir/err")"

# 4. Cut short, no retries: fails, keeps the .part; the next run fetches only the rest.
control "cut=/cut.gguf&after=400000&times=1"
pull --retries 0 "$base/cut.gguf"; rc=$?
[ $rc = 1 ] && grep -q "run the same command to resume" "$dir/err" || fail "cut pull: exit $rc: $(cat "$dir/err")"
[ "$(stat -c %s "$M40_MODELS/.cut.gguf.part" 2>/dev/null)" = 400000 ] || fail "cut pull: .part is not 400000 bytes"
"$m40ctl" list 2>&1 >/dev/null | grep -q "partial download: cut" || fail "list does not name the partial download"
pull "$base/cut.gguf"; rc=$?
[ $rc = 0 ] && cmp -s "$model" "$M40_MODELS/cut.gguf" || fail "resumed pull: exit $rc: $(cat "$dir/err")"
grep -q "resuming 'cut' at" "$dir/err" || fail "resumed pull: not said"
l=$(log_of /cut.gguf)
[ "$(echo "$l" | sed -n 1p)" = "200 - - 400000" ] || fail "cut: first request: $l"
echo "$l" | sed -n 2p | grep -Eq "^206 bytes=400000- \"[0-9a-f]+-[0-9a-f]+\" $((size - 400000))$" ||
        fail "cut: the resume did not ask for (only) the missing bytes with If-Range: $l"
no_trace_part cut

# 5. Cut short twice within one run: retried with Range requests, one command.
control "cut=/retry.gguf&after=300000&times=2"
pull "$base/retry.gguf"; rc=$?
[ $rc = 0 ] && cmp -s "$model" "$M40_MODELS/retry.gguf" || fail "retried pull: exit $rc: $(cat "$dir/err")"
l=$(log_of /retry.gguf | cut -d' ' -f1,2,4 | tr '\n' '|')
[ "$l" = "200 - 300000|206 bytes=300000- 300000|206 bytes=600000- $((size - 600000))|" ] ||
        fail "retried pull: requests $l"

# 6. The file changed on the server between two runs: If-Range fails, the pull starts over.
control "cut=/moving.gguf&after=100000&times=1"
pull --retries 0 "$base/moving.gguf"; rc=$?
[ $rc = 1 ] || fail "moving: first run exit $rc"
sleep 0.01
cp "$model" "$www/moving.gguf.new" && mv "$www/moving.gguf.new" "$www/moving.gguf"
pull "$base/moving.gguf"; rc=$?
[ $rc = 0 ] && cmp -s "$model" "$M40_MODELS/moving.gguf" && grep -q "starting over" "$dir/err" ||
        fail "moving: exit $rc: $(cat "$dir/err")"
log_of /moving.gguf | sed -n 2p | grep -Eq "^200 bytes=100000- \"" || fail "moving: $(log_of /moving.gguf)"

# A .part that is complete already (a run stopped before its rename): the server answers the
# resume with 416 and the whole size, nothing is fetched again.
cp "$model" "$M40_MODELS/.done.gguf.part"
printf 'url %s\nvalidator \n' "$base/cut.gguf" >"$M40_MODELS/.done.gguf.part.meta"
pull "$base/cut.gguf" --name done; rc=$?
[ $rc = 0 ] && cmp -s "$model" "$M40_MODELS/done.gguf" || fail "complete .part: exit $rc: $(cat "$dir/err")"
log_of /cut.gguf | tail -n 1 | grep -q "^416 bytes=$size- - " || fail "complete .part: $(log_of /cut.gguf)"
no_trace_part done

# 7. A wrong sha256, given or published: an error, no file left.
pull --sha256 "$(printf '%064d' 1)" "$base/nosha.gguf" --name given; rc=$?
[ $rc = 1 ] && grep -q "sha256 mismatch for 'given': expected 0*1 (from --sha256), got $want; the download was removed" "$dir/err" ||
        fail "wrong --sha256: exit $rc: $(cat "$dir/err")"
no_trace given
pull "$base/wrong.gguf"; rc=$?
[ $rc = 1 ] && grep -q "sha256 mismatch for 'wrong': expected 0\{64\} (from $base/wrong.gguf.sha256)" "$dir/err" ||
        fail "wrong published sha256: exit $rc: $(cat "$dir/err")"
no_trace wrong
pull --sha256 "$want" "$base/nosha.gguf" --name right; rc=$?
[ $rc = 0 ] && grep -q "verified against --sha256" "$dir/out" || fail "right --sha256: exit $rc"

# 8. Not a GGUF file; a 404; nothing listening: clear errors, no file left.
pull "$base/notgguf.gguf"; rc=$?
[ $rc = 1 ] && grep -q "not a usable GGUF model.*not a GGUF file.*it was removed" "$dir/err" ||
        fail "not GGUF: exit $rc: $(cat "$dir/err")"
no_trace notgguf
pull "$base/missing.gguf"; rc=$?
[ $rc = 1 ] && grep -q "$base/missing.gguf: HTTP 404 Not Found (no such file at this URL)" "$dir/err" ||
        fail "404: exit $rc: $(cat "$dir/err")"
no_trace missing
[ "$(log_of /missing.gguf | wc -l)" = 1 ] || fail "404 retried: $(log_of /missing.gguf)"
pull --retries 0 "http://127.0.0.1:1/x.gguf"; rc=$?
[ $rc = 1 ] && grep -qi "connect" "$dir/err" || fail "refused: exit $rc: $(cat "$dir/err")"
no_trace x

# A server whose certificate nobody vouches for: refused, said to be TLS, nothing left.
if command -v openssl >/dev/null &&
        openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=127.0.0.1 -days 1 \
                -keyout "$dir/key.pem" -out "$dir/cert.pem" >/dev/null 2>&1; then
        python3 "$here/pull_server.py" --root "$www" --log "$dir/tlslog" \
                --port-file "$dir/tlsport" --tls "$dir/cert.pem" "$dir/key.pem" &
        tls=$!
        for _ in $(seq 100); do [ -s "$dir/tlsport" ] && break; sleep 0.1; done
        pull --sha256 "$want" "https://127.0.0.1:$(cat "$dir/tlsport")/nosha.gguf" --name tls; rc=$?
        [ $rc = 1 ] && grep -q ": TLS: .*certificate.*(m40ctl never skips the check)" "$dir/err" ||
                fail "self-signed TLS: exit $rc: $(cat "$dir/err")"
        no_trace tls
        kill $tls; wait $tls 2>/dev/null
fi

# 9. A write that fails (file size limit standing in for a full disk): the .part keeps
#    what was written, and the next run resumes from there.
(trap '' XFSZ; ulimit -f 500; exec "$m40ctl" pull "$base/slow.gguf" --name capped --retries 0) \
        >"$dir/out" 2>"$dir/err"; rc=$?
[ $rc = 1 ] && grep -q "cannot write .*\.capped\.gguf\.part: File too large" "$dir/err" ||
        fail "write error: exit $rc: $(cat "$dir/err")"
kept=$(stat -c %s "$M40_MODELS/.capped.gguf.part" 2>/dev/null || echo 0)
[ "$kept" -gt 0 ] && [ "$kept" -le 512000 ] || fail "write error: .part has $kept bytes"
cmp -s -n "$kept" "$model" "$M40_MODELS/.capped.gguf.part" || fail "write error: .part is not a prefix"
pull "$base/slow.gguf" --name capped; rc=$?
[ $rc = 0 ] && cmp -s "$model" "$M40_MODELS/capped.gguf" || fail "after write error: exit $rc"

# 10. Ctrl-C during a slow transfer: exit 130, the .part stays and resumes.
control "slow=/slow.gguf&rate=200000"
"$m40ctl" pull "$base/slow.gguf" --name intr >"$dir/out" 2>"$dir/err" &
p=$!
for _ in $(seq 100); do
        [ "$(stat -c %s "$M40_MODELS/.intr.gguf.part" 2>/dev/null || echo 0)" -gt 100000 ] && break
        sleep 0.1
done
pull "$base/slow.gguf" --name intr; rc=$?
[ $rc = 1 ] && grep -q "another m40ctl pull of 'intr' is running" "$dir/err" || fail "concurrent pull: exit $rc"
"$m40ctl" rm intr 2>"$dir/err"; rc=$?
[ $rc = 1 ] && grep -q "a pull of 'intr' is running" "$dir/err" || fail "rm during pull: exit $rc"
kill -INT $p
wait $p; rc=$?
[ $rc = 130 ] && grep -q "interrupted; .*\.intr\.gguf\.part kept" "$dir/err" || fail "Ctrl-C: exit $rc: $(cat "$dir/err")"
kept=$(stat -c %s "$M40_MODELS/.intr.gguf.part" 2>/dev/null || echo 0)
[ "$kept" -gt 100000 ] && [ "$kept" -lt "$size" ] || fail "Ctrl-C: .part has $kept bytes"
control "slow=/slow.gguf&rate=0"
pull "$base/slow.gguf" --name intr; rc=$?
[ $rc = 0 ] && cmp -s "$model" "$M40_MODELS/intr.gguf" || fail "after Ctrl-C: exit $rc"
# (any line, not the last: the server logs the interrupted transfer when its sending ends,
# which at the slow rate can come after the resumed request's line)
log_of /slow.gguf | grep -q "^206 bytes=$kept- " || fail "after Ctrl-C: $(log_of /slow.gguf)"

# 11. The bar on a terminal (script(1) gives the pull a pty): bytes, rate, ETA, redrawn.
if command -v script >/dev/null; then
        control "slow=/slow.gguf&rate=1000000"
        M40CTL=$m40ctl URL=$base/slow.gguf script -qec '"$M40CTL" pull --name tty "$URL"' \
                "$dir/typescript" >/dev/null 2>&1; rc=$?
        [ $rc = 0 ] || fail "tty pull: exit $rc"
        n=$(grep -o $'\r''tty' "$dir/typescript" | wc -l)
        grep -q 'tty \[#*\.*\] *[0-9]*% *[0-9.]* [KM]iB / 1\.1 MiB .*/s  ETA [0-9]*:[0-9][0-9]' "$dir/typescript" &&
                grep -q '100% *1\.1 MiB / 1\.1 MiB .*  in 0:0' "$dir/typescript" && [ "$n" -ge 3 ] ||
                fail "tty pull: no progress bar ($n redraws): $(tr '\r' '\n' <"$dir/typescript")"
        control "slow=/slow.gguf&rate=0"
fi

# 12. rm: names only; a missing name fails unless --force; a partial download goes too.
"$m40ctl" rm "$M40_MODELS/cut.gguf" >/dev/null 2>"$dir/err"; rc=$?
[ $rc = 2 ] && grep -q "is not a model name" "$dir/err" || fail "rm PATH: exit $rc"
[ -f "$M40_MODELS/cut.gguf" ] || fail "rm PATH removed the file"
"$m40ctl" rm cut plain >"$dir/out"; rc=$?
[ $rc = 0 ] && [ ! -e "$M40_MODELS/cut.gguf" ] && [ ! -e "$M40_MODELS/plain.gguf" ] || fail "rm: exit $rc"
"$m40ctl" rm cut 2>"$dir/err"; rc=$?
[ $rc = 1 ] && grep -q "no model 'cut' in the store" "$dir/err" || fail "rm missing: exit $rc"
"$m40ctl" rm -f cut 2>"$dir/err"; rc=$?
[ $rc = 0 ] && [ ! -s "$dir/err" ] || fail "rm -f missing: exit $rc"
control "cut=/cut.gguf&after=200000&times=1"
pull --retries 0 "$base/cut.gguf" --name part; rc=$?
"$m40ctl" rm part >"$dir/out"; rc=$?
[ $rc = 0 ] && grep -q "removed part (with its partial download)" "$dir/out" || fail "rm partial: exit $rc"
no_trace part
"$m40ctl" show stories260K >/dev/null || fail "show after rm of others"

# 13. Bad command lines: exit 2, nothing fetched.
for args in "" "--sha256 abc $base/a.gguf" "ftp://127.0.0.1/a.gguf" "$base/" \
        "--name a/b $base/a.gguf" "--name .x $base/a.gguf" "--retries -1 $base/a.gguf" "a b"; do
        # shellcheck disable=SC2086
        "$m40ctl" pull $args >/dev/null 2>&1; rc=$?
        [ $rc = 2 ] || fail "pull $args: exit $rc, not 2"
done
exit $bad
