#!/bin/sh
# conformance_smollm2.sh - fetch SmolLM2-135M-Instruct Q4_1 (tests/fetch-models.sh) and run
# conformance_llamacpp.py smollm2 on it (issue 3's rule in ggml mode, the dequantized-F32
# comparison in f32 mode). Usage: conformance_smollm2.sh PYTHON M40_GEN SRCDIR.
# Exit 77 when the model cannot be fetched (offline) or llama_cpp is missing.
py=$1 gen=$2 src=$3
model=$(PYTHON=$py "$src/tests/fetch-models.sh" smollm2) || exit $?
exec "$py" "$src/tests/engine/conformance_llamacpp.py" smollm2 "$gen" "$model"
