#!/usr/bin/env bash
# test_errors.sh - issue 22 acceptance 3, with curl against m40-gateway in front of m40d
# (CPU engine, SmolLM2-135M-Instruct):
#   - every error case answers its documented status with a body in the API's JSON shape
#     (OpenAI: {"error":{"message","type","param","code"}}, Ollama: {"error":"..."}):
#     400 (bad JSON, a wrong type, an out-of-range value, n > 1, no messages, a refused
#     feature, m40d's own refusal), 401 (bearer token), 404 (model, path), 405, 413 (the
#     gateway's max_body_bytes, m40d's request size), 429 (max_requests), 503 (no
#     m40d), also inside a stream;
#   - a client that disconnects mid-stream has its sequence freed in m40d within one engine
#     step: m40d generates at most 2 tokens after the hang-up (the step running then and
#     one more while the cancel crosses), and m40ctl status then shows no active sequence
#     and no KV page (polled for up to 10 s: a sanitizer build's steps are slow);
#   - /api/tags and /api/ps give the model file's size in bytes when the gateway finds it
#     in the model store ($M40_MODELS here), 0 when not; /metrics has m40d's held
#     sequences (HELP, TYPE gauge) beside the active ones, at most as many, and its step
#     timings as summaries (HELP, TYPE summary, quantiles 0.5 and 0.99, _sum, _count, a
#     _max gauge) that counted the stream's steps.
#
# Usage: test_errors.sh M40D M40CTL M40_GATEWAY MODEL|tests/fetch-models.sh [PYTHON]
set -euo pipefail
m40d=$1 m40ctl=$2 gateway=$3 model=$4
case $model in
*.sh) model=$(PYTHON=${5:-python3} "$model" smollm2) || exit $? ;;
esac
[ -r "$model" ] || { echo "SKIP: no model at $model"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }
dir=$(mktemp -d /tmp/m40-gwerr.XXXXXX)
pids=()
# shellcheck disable=SC2317 # reached through the EXIT trap
cleanup() {
        for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
        wait 2>/dev/null
        [ "$bad" = 0 ] || tail -n 20 "$dir"/*.log >&2
        rm -rf "$dir"
}
bad=0
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; bad=1; }
sock=$dir/m40d.sock

printf '[model]\npath = %s\n[engine]\nbackend = cpu\n[server]\nsocket = %s\ngroup =\nmax_prompt_bytes = 1024\n' \
        "$model" "$sock" > "$dir/m40d.ini"
"$m40d" -c "$dir/m40d.ini" 2> "$dir/m40d.log" & pids+=($!)
for _ in $(seq 600); do "$m40ctl" status --socket "$sock" >/dev/null 2>&1 && break; sleep 0.1; done
"$m40ctl" status --socket "$sock" >/dev/null || { cat "$dir/m40d.log"; exit 1; }

# start_gateway NAME ARGS... - starts m40-gateway on a free port; sets $url
start_gateway() {
        local name=$1 log
        shift
        log=$dir/$name.log
        "$gateway" --listen 127.0.0.1:0 "$@" 2> "$log" & pids+=($!)
        gw_pid=$!
        for _ in $(seq 100); do
                url=$(sed -n 's/^m40-gateway: listening on \([^,]*\),.*/http:\/\/\1/p' "$log")
                [ -n "$url" ] && return 0
                sleep 0.05
        done
        cat "$log" >&2
        return 1
}

token=0123456789abcdef0123456789abcdef
printf '%s\n' "$token" > "$dir/token"
printf '[gateway]\nmax_body_bytes = 16384\nmax_requests = 1\ntoken_file = %s\n' "$dir/token" \
        > "$dir/gateway.ini"
# the main gateway's model store is the model's directory: /api/tags shows its size
M40_MODELS=$(dirname "$model") start_gateway main --socket "$sock" --config "$dir/gateway.ini"
main=$url main_pid=$gw_pid
auth=(-H "Authorization: Bearer $token")
model_id=SmolLM2-135M-Instruct.Q4_1

# expect STATUS SHAPE(openai|ollama) METHOD PATH [BODY [CURL ARGS...]] - one request
expect() {
        local want=$1 shape=$2 method=$3 path=$4 body=${5:-} got
        shift 4
        shift $(($# > 0 ? 1 : 0))
        if [ -n "$body" ]; then
                got=$(curl -s -o "$dir/body" -w '%{http_code}' -X "$method" "${auth[@]}" "$@" \
                        -H 'Content-Type: application/json' --data-binary "$body" "$base$path")
        else
                got=$(curl -s -o "$dir/body" -w '%{http_code}' -X "$method" "${auth[@]}" "$@" "$base$path")
        fi
        if [ "$got" != "$want" ]; then
                fail "$method $path: status $got, not $want: $(head -c 300 "$dir/body")"
                return
        fi
        python3 - "$dir/body" "$shape" <<'PY' || fail "$method $path: body not in the $shape error shape: $(head -c 300 "$dir/body")"
import json, sys
e = json.load(open(sys.argv[1]))["error"]
if sys.argv[2] == "openai":
    assert isinstance(e["message"], str) and e["message"] and isinstance(e["type"], str)
    assert "param" in e and "code" in e
else:
    assert isinstance(e, str) and e
PY
        echo "ok   $want $method $path $(head -c 120 "$dir/body")"
}

base=$main
chat() { printf '{"model":"%s","messages":[{"role":"user","content":"Hi"}]%s}' "$model_id" "$1"; }
expect 400 openai POST /v1/chat/completions '{"model":'
expect 400 openai POST /v1/chat/completions '[1,2]'
expect 400 openai POST /v1/chat/completions "$(chat ',"temperature":"hot"')"
expect 400 openai POST /v1/chat/completions "$(chat ',"top_p":3')"
expect 400 openai POST /v1/chat/completions "$(chat ',"n":2')"
expect 400 openai POST /v1/chat/completions "$(chat ',"logprobs":true')"
expect 400 openai POST /v1/chat/completions "$(chat ',"stop":["a","b","c","d","e","f","g","h","i"]')"
expect 400 openai POST /v1/chat/completions "{\"model\":\"$model_id\",\"messages\":[]}"
expect 400 openai POST /v1/chat/completions '{"messages":[{"role":"user","content":"Hi"}]}'
expect 400 openai POST /v1/chat/completions "{\"model\":\"$model_id\",\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}"
expect 400 openai POST /v1/completions "{\"model\":\"$model_id\",\"prompt\":[1,2]}"
# m40d's own refusal (max_tokens above its limit of 4096), streamed or not: a 400 before any byte
expect 400 openai POST /v1/chat/completions "$(chat ',"max_tokens":100000')"
expect 400 openai POST /v1/chat/completions "$(chat ',"max_tokens":100000,"stream":true')"
expect 400 ollama POST /api/chat "{\"model\":\"$model_id\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"options\":{\"num_predict\":100000}}"
expect 400 ollama POST /api/generate '{"model":"x","options":[]}'
expect 404 openai POST /v1/chat/completions "$(printf '{"model":"gpt-4","messages":[{"role":"user","content":"Hi"}]}')"
expect 404 ollama POST /api/chat '{"model":"llama3:latest","messages":[{"role":"user","content":"Hi"}]}'
expect 404 ollama POST /api/show '{"model":"llama3"}'
expect 404 openai GET /v1/nothing
expect 405 openai GET /v1/chat/completions
# 413: the gateway's max_body_bytes (16 KiB), and m40d's request size (max_prompt_bytes
# 1024 plus 4096 for the records)
big=$(head -c 20000 /dev/zero | tr '\0' a)
expect 413 openai POST /v1/chat/completions "$(chat '')$big"
expect 413 openai POST /v1/completions "{\"model\":\"$model_id\",\"prompt\":\"${big:0:8000}\"}"
expect 413 ollama POST /api/generate "{\"model\":\"$model_id\",\"prompt\":\"${big:0:8000}\"}"
# 401: no token, a wrong one; /health needs none
saved=("${auth[@]}")
auth=()
expect 401 openai GET /v1/models
auth=(-H "Authorization: Bearer ${token}x")
expect 401 ollama GET /api/tags
auth=()
[ "$(curl -s -o /dev/null -w '%{http_code}' "$main/health")" = 200 ] || fail "/health without a token"
auth=("${saved[@]}")

# /api/tags: the model file's size in bytes when the gateway finds it in the store, else 0
# (a gateway whose store is empty; the service's store, /var/lib/m40d/models, is looked at
# too); /api/ps lists the same
# tags_size URL [CURL ARGS...] - the size /api/tags gives the one model, or "bad: ..."
tags_size() {
        curl -s "${@:2}" "$1/api/tags" | python3 -c '
import json, sys
m = json.load(sys.stdin)["models"]
print(m[0]["size"] if len(m) == 1 and type(m[0]["size"]) is int else f"bad: {m}")'
}
model_bytes=$(stat -L -c %s "$model")
got=$(tags_size "$main" "${auth[@]}") || got="no JSON"
[ "$got" = "$model_bytes" ] || fail "/api/tags size $got, not the model file's $model_bytes bytes"
got=$(curl -s "${auth[@]}" "$main/api/ps" | python3 -c 'import json,sys; print(json.load(sys.stdin)["models"][0]["size"])') ||
        got="no JSON"
[ "$got" = "$model_bytes" ] || fail "/api/ps size $got, not the model file's $model_bytes bytes"
M40_MODELS=$dir/nostore start_gateway nostore --socket "$sock"
want=0
[ -f "/var/lib/m40d/models/$(basename "$model")" ] && want=$(stat -L -c %s "/var/lib/m40d/models/$(basename "$model")")
got=$(tags_size "$url") || got="no JSON"
[ "$got" = "$want" ] || fail "/api/tags size $got with the model in no store, not $want"
kill "$gw_pid"
echo "ok   /api/tags size: $model_bytes bytes from the store, $want when the store lacks the file"

# /metrics: m40d's held sequences beside the active ones, HELP and TYPE as the others
# metric NAME - its value in a /metrics answer ($dir/metrics); nothing when it has no
# value, no HELP line or no TYPE gauge line
metric() {
        if grep -q "^# HELP $1 ." "$dir/metrics" && grep -q "^# TYPE $1 gauge$" "$dir/metrics"; then
                sed -n "s/^$1 \([0-9][0-9.e+]*\)$/\1/p" "$dir/metrics"
        fi
}

# a long stream holds the one max_requests slot: the next request gets 429; then its client
# hangs up and m40d frees the sequence at once
curl -sN "${auth[@]}" "$main/v1/chat/completions" -d "$(chat ',"max_tokens":4000,"ignore_eos":true,"stream":true')" \
        > "$dir/stream" & curl_pid=$!
pids+=("$curl_pid")
for _ in $(seq 600); do [ -s "$dir/stream" ] && break; sleep 0.05; done
sleep 0.5
[ "$("$m40ctl" status --socket "$sock" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["active"])')" = 1 ] ||
        fail "the stream is not running in m40d"
curl -s "${auth[@]}" "$main/metrics" > "$dir/metrics"
active=$(metric m40_active_sequences) held=$(metric m40_held_sequences)
{ [ "$active" = 1 ] && [ -n "$held" ] && [ "$held" -le "$active" ]; } ||
        fail "/metrics during one stream: m40_active_sequences '$active', m40_held_sequences '$held' (empty: no value or no HELP/TYPE gauge lines)"
width=$(metric m40_decode_width) running=$(metric m40_decode_running)
{ [ "$width" = 1 ] && [ "$running" = 1 ]; } ||
        fail "/metrics during one stream: m40_decode_width '$width' of m40_decode_running '$running', not 1 of 1"
expect 429 openai POST /v1/chat/completions "$(chat '')"
expect 429 ollama POST /api/chat "{\"model\":\"$model_id\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}"
grep -q '^data: {' "$dir/stream" || fail "the long stream sent no chunk"
kill "$curl_pid"
t0=$(date +%s%N)
g0=$("$m40ctl" status --socket "$sock" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["generated_tokens"])')
freed=
for _ in $(seq 1000); do
        st=$("$m40ctl" status --socket "$sock" --json)
        if python3 -c 'import json,sys; s=json.loads(sys.argv[1]); sys.exit(s["active"] or s["kv_pages_used"])' "$st"; then
                freed=$(( ($(date +%s%N) - t0) / 1000000 ))
                break
        fi
        sleep 0.01
done
g1=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["generated_tokens"])' "$st")
if [ -z "$freed" ]; then
        fail "the hung-up stream's sequence was not freed within 10 s ($((g1 - g0)) tokens after the hang-up)"
else
        echo "ok   disconnect mid-stream: sequence and KV pages freed ${freed} ms after the hang-up, $((g1 - g0)) tokens generated after it"
fi
[ $((g1 - g0)) -le 2 ] || fail "m40d generated $((g1 - g0)) tokens after the client hung up"
# nothing runs now: no sequence active or held, in /metrics as in m40ctl status
curl -s "${auth[@]}" "$main/metrics" > "$dir/metrics"
active=$(metric m40_active_sequences) held=$(metric m40_held_sequences)
{ [ "$active" = 0 ] && [ "$held" = 0 ]; } ||
        fail "/metrics after the stream: m40_active_sequences '$active', m40_held_sequences '$held' (empty: no value or no HELP/TYPE gauge lines)"
echo "ok   /metrics: m40_held_sequences $held of m40_active_sequences $active"
# summary NAME - NAME_count of a summary with HELP, TYPE, both quantiles, _sum and a _max
# gauge in $dir/metrics; nothing when one of them is missing
summary() {
        grep -q "^# HELP $1 ." "$dir/metrics" && grep -q "^# TYPE $1 summary$" "$dir/metrics" &&
                grep -q "^$1{quantile=\"0.5\"} [0-9.]*$" "$dir/metrics" &&
                grep -q "^$1{quantile=\"0.99\"} [0-9.]*$" "$dir/metrics" &&
                grep -q "^$1_sum [0-9.]*$" "$dir/metrics" &&
                grep -q "^# TYPE $1_max gauge$" "$dir/metrics" &&
                grep -q "^$1_max [0-9.]*$" "$dir/metrics" &&
                sed -n "s/^$1_count \([0-9]*\)$/\1/p" "$dir/metrics" || true
}
for name in m40_step_seconds m40_step_gap_seconds m40_step_wake_seconds m40_step_handover_seconds; do
        n=$(summary $name)
        [ -n "$n" ] && [ "$n" -gt 2 ] ||
                fail "/metrics: $name counted '$n' steps of the stream (empty: a line is missing)"
done
echo "ok   /metrics: step timings, $(summary m40_step_seconds) steps, $(summary m40_step_gap_seconds) gaps"

# 503: no m40d behind the gateway, for every endpoint that needs it; /health says so
start_gateway nodaemon --socket "$dir/none.sock"
base=$url auth=()
expect 503 openai GET /v1/models
expect 503 openai POST /v1/chat/completions "$(chat ',"stream":true')"
expect 503 ollama GET /api/tags
expect 503 ollama POST /api/generate "{\"model\":\"$model_id\",\"prompt\":\"Hi\"}"
expect 503 openai GET /health
curl -s "$base/metrics" | grep -q '^m40_up 0$' || fail "/metrics without m40d: no m40_up 0"

# 503 inside a stream: m40d stops while the gateway streams; the stream ends with an error
# record and data: [DONE]
base=$main auth=("${saved[@]}")
curl -sN "${auth[@]}" "$main/v1/chat/completions" -d "$(chat ',"max_tokens":4000,"ignore_eos":true,"stream":true')" \
        > "$dir/stream2" & curl_pid=$!
for _ in $(seq 600); do [ -s "$dir/stream2" ] && break; sleep 0.05; done
kill -9 "${pids[0]}"
wait "$curl_pid" || true
tail -n 4 "$dir/stream2" | grep -q '^data: {"error":{"message":"m40d is unreachable' ||
        fail "a stream whose m40d died does not end with an error record: $(tail -c 300 "$dir/stream2")"
tail -n 2 "$dir/stream2" | grep -q '^data: \[DONE\]' || fail "that stream does not end with [DONE]"
echo "ok   m40d killed mid-stream: the stream ends with a 503 error record and [DONE]"

# SIGTERM: the gateway stops cleanly (exit 0; under ASan also without a leak)
kill "$main_pid"
if wait "$main_pid"; then
        echo "ok   SIGTERM: m40-gateway exits 0"
else
        fail "m40-gateway exited $? after SIGTERM"
fi

[ "$bad" = 0 ] && echo "all passed"
exit $bad
