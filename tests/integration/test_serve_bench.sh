#!/usr/bin/env bash
# test_serve_bench.sh - m40-serve-bench (issue 19's serving benchmark) on the CPU engine: a
# clients sweep of 1, 2 and 4 clients with short prompts and generations against the real
# m40d it starts, whose JSON must hold sane figures (every request finished with all its
# tokens, no error, tok/s and latencies > 0); a short mixed load; the usage errors (exit 2),
# the --clients list's limit of 16 entries among them.
#
# Usage: test_serve_bench.sh M40-SERVE-BENCH M40D MODEL    (exit 77 without the model)
set -euo pipefail
bench=$1 m40d=$2 model=$3
[ -r "$model" ] || { echo "SKIP: no model at $model"; exit 77; }
dir=$(mktemp -d /tmp/m40-serve-itest.XXXXXX)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

rc=0; "$bench" --model "$model" --clients 0 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "--clients 0: exit $rc, want 2"
# --clients takes up to 16 runs (m40-bench --batches, which it is handed to, as many)
list16=1,2,4,5,8,9,12,16,24,32,48,64,96,128,192,256
rc=0; err=$("$bench" --model "$model" --clients "$list16,3" 2>&1) || rc=$?
{ [ "$rc" = 2 ] && [[ $err == *"more than 16 entries"* ]]; } ||
        fail "--clients with 17 entries: exit $rc ($err), want 2"
rc=0; err=$("$bench" --model "$dir/none.gguf" --clients "$list16" 2>&1) || rc=$?
{ [ "$rc" = 1 ] && [[ $err == *"none.gguf"* ]]; } ||
        fail "--clients with 16 entries: exit $rc ($err), want 1 for the missing model"
rc=0; "$bench" --model "$model" --tokens 99999 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "--tokens 99999: exit $rc, want 2"
rc=0; "$bench" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "no --model: exit $rc, want 2"
"$bench" --help | grep -q '^EXIT STATUS' || fail "--help has no EXIT STATUS"

"$bench" --m40d "$m40d" --model "$model" --engine cpu --threads 1 --clients 1,2,4 \
        --prompt 8 --tokens 24 --engine-figure --quiet --output "$dir/sweep.json" \
        > "$dir/sweep.txt" || fail "sweep: exit $? ($(cat "$dir/sweep.txt"))"
cat "$dir/sweep.txt"
python3 - "$dir/sweep.json" <<'PY' || fail "sweep JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["tool"] == "m40-serve-bench" and j["engine"] == "cpu" and j["error"] is None, j
assert 1 <= j["prompt_tokens"] <= 16 and j["max_tokens"] == 24, j
assert [r["clients"] for r in j["runs"]] == [1, 2, 4], j["runs"]
for r in j["runs"]:
    n = r["clients"]
    assert r["finished"] == n and r["errors"] == 0 and r["short"] == 0, r
    assert r["generated_tokens"] == 24 * n, r
    assert r["prompt_tokens"] == j["prompt_tokens"] * n, r
    assert r["tok_s"] > 0 and r["seconds"] > 0, r
    assert r["ttft_ms"]["n"] == n and 0 < r["ttft_ms"]["p50"] <= r["ttft_ms"]["p99"], r
    assert r["itl_ms"]["n"] == 23 * n and r["itl_ms"]["p50"] <= r["itl_ms"]["p99"], r
    assert r["engine_tok_s"] is None and r["error"] is None, r
assert j["engine_note"].startswith("n/a"), j["engine_note"]
PY

"$bench" --m40d "$m40d" --model "$model" --engine cpu --threads 1 --mixed --streams 2 \
        --stream-tokens 2000 --prompt 8 --arrivals 3 --arrival-prompt 32 --arrival-tokens 4 \
        --interval 20 --warmup 50 --window 200 --quiet --json > "$dir/mixed.json" ||
        fail "mixed: exit $? ($(cat "$dir/mixed.json"))"
python3 - "$dir/mixed.json" <<'PY' || fail "mixed JSON"
import json, sys
j = json.load(open(sys.argv[1]))
m = j["mixed"]
assert j["error"] is None and m["errors"] == 0 and m["error"] is None, j
assert m["newcomers_finished"] == 3 and m["newcomer_ttft_ms"]["n"] == 3, m
assert m["before"]["tokens"] > 0 and m["during"]["tokens"] > 0 and m["ratio"] > 0, m
assert m["before"]["seconds"] > 0.15 and m["during"]["seconds"] > 0, m
print("mixed: before %.1f tok/s, during %.1f tok/s, newcomers' TTFT p99 %.2f ms"
      % (m["before"]["tok_s"], m["during"]["tok_s"], m["newcomer_ttft_ms"]["p99"]))
PY
echo "m40-serve-bench: sweep and mixed load sane"
