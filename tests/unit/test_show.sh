#!/usr/bin/env bash
# test_show.sh - `m40ctl show` on real models reports what the files hold.
# Usage: test_show.sh M40CTL SOURCE_ROOT
# stories260K (../shared/models): llama, 5 layers, embedding 64, 8 heads, 4 KV heads, FFN 172,
# vocab 512, all 48 tensors F32. SmolLM2-135M Q4_1 (tests/fetch-models.sh): 30 layers, vocab
# 49152, Q4_1 weights, chatml template. Exit 0 pass, 1 fail, 77 when stories260K is absent.
set -uo pipefail
m40ctl=$1
root=$2
stories=$root/../shared/models/stories260K.gguf
[ -f "$stories" ] || { echo "skip: $stories not present"; exit 77; }
fail=0
check() { # check JSON EXPR DESCRIPTION
        if ! python3 -c "import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if ($2) else 1)" "$1"; then
                echo "FAIL: $3"
                fail=1
        fi
}

j=$("$m40ctl" show --json "$stories") || { echo "FAIL: m40ctl show failed on $stories"; exit 1; }
echo "$j"
check "$j" 'd["architecture"]=="llama" and d["layers"]==5 and d["embedding"]==64' "stories shape"
check "$j" 'd["heads"]==8 and d["kv_heads"]==4 and d["ffn"]==172 and d["vocab_size"]==512' "stories heads/ffn/vocab"
check "$j" '[w["type"] for w in d["weights"]]==["F32"] and d["weights"][0]["tensors"]==48' "stories all F32"
check "$j" 'd["parameters"]==sum(w["parameters"] for w in d["weights"]) and d["tokenizer"]=="llama"' "stories params/tokenizer"
"$m40ctl" show "$stories" | grep -q '^layers: *5$' || { echo "FAIL: text output"; fail=1; }

# Usage errors exit 2, bad files 1 with the reader's message.
"$m40ctl" show >/dev/null 2>&1; [ $? -eq 2 ] || { echo "FAIL: no-argument exit code"; fail=1; }
msg=$("$m40ctl" show "$root/meson.build" 2>&1); rc=$?
[ $rc -eq 1 ] && [[ $msg == *"offset 0: not a GGUF file"* ]] || { echo "FAIL: non-GGUF: rc $rc, '$msg'"; fail=1; }

smol=$("$root/tests/fetch-models.sh" smollm2); rc=$?
if [ $rc -eq 0 ]; then
        j=$("$m40ctl" show --json "$smol") || { echo "FAIL: m40ctl show failed on $smol"; exit 1; }
        echo "$j"
        check "$j" 'd["layers"]==30 and d["vocab_size"]==49152 and d["embedding"]==576' "smollm2 shape"
        check "$j" '"Q4_1" in [w["type"] for w in d["weights"]] and d["tokenizer"]=="gpt2"' "smollm2 Q4_1 / gpt2"
        check "$j" 'd["chat_template"]=="chatml" and d["heads"]==9 and d["kv_heads"]==3' "smollm2 heads/template"
        check "$j" 'd["parameters"]==134515008' "smollm2 parameter count (llama.cpp: 134515008)"
else
        echo "note: SmolLM2 not available (fetch-models.sh exit $rc); checked stories260K only"
fi
exit $fail
