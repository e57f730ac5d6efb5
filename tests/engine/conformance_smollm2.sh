#!/bin/sh
# conformance_smollm2.sh - fetch SmolLM2-135M-Instruct Q4_1 (tests/fetch-models.sh) and run a
# conformance script of tests/engine on it, the model's path as its last argument:
# conformance_llamacpp.py smollm2 M40_GEN (issue 3's rule in ggml mode, the dequantized-F32
# comparison in f32 mode) or conformance_chat.py M40D M40CTL M40TOKENIZE M40_GEN (chat
# rendering and stop points, issue 20). Usage: conformance_smollm2.sh PYTHON SRCDIR SCRIPT
# ARGS... Exit 77 when the model cannot be fetched (offline) or llama_cpp is missing.
py=$1 src=$2 script=$3
shift 3
model=$(PYTHON=$py "$src/tests/fetch-models.sh" smollm2) || exit $?
exec "$py" "$src/tests/engine/$script" "$@" "$model"
