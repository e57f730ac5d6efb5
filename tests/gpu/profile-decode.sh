#!/usr/bin/env bash
# tests/gpu/profile-decode.sh - where a decode step of the CUDA engine spends its GPU
# time, kernel by kernel (Nsight Compute, ncu), on the GPU machine.
#
# Usage: tests/gpu/profile-decode.sh SHAPE:TYPE [SHAPE:TYPE ...]   (e.g. 1b:Q4_0)
# Makes the model with m40-mkmodel --random-blocks when $BUILD/model-bench lacks it,
# runs m40-gen --backend cuda on a 4-token prompt twice under ncu (gpu__time_duration
# of every kernel, graph nodes profiled one by one, caches and clocks left alone),
# generating A and B tokens, and
# prints the difference divided by B - A: GPU time per decode token, per kernel,
# largest first, with its share. With BATCH=N (N > 1) the runs are m40-bench decoding
# N sequences of A and B tokens instead, and the figures are per decode step of N
# tokens. ncu serializes kernels, so the sum is GPU busy time
# without launch gaps: compare it with 1 / (tokens/s) of m40-bench for the gaps. It ranks
# kernels; it does not predict what removing a small one gains: ncu times each kernel
# alone, and a kernel of a few microseconds costs several times less inside the step's
# graph (k_rope_store: 2.8 us per call here, 0.8 us per layer saved when it was fused
# away). Measure such changes with tests/bench/ab-variants.sh or m40-bench.
# Environment: BUILD (default build-gpu), NCU (default ncu on PATH, else
# /usr/local/cuda/bin/ncu), A and B (default 3 and 11), BATCH (default 1).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
BUILD=${BUILD:-build-gpu}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
A=${A:-3}
B=${B:-11}
BATCH=${BATCH:-1}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

[ "$#" -gt 0 ] || { echo "usage: $0 SHAPE:TYPE ..." >&2; exit 2; }
[ -x "$NCU" ] || { echo "$0: ncu not found" >&2; exit 77; }

for spec in "$@"; do
        shape=${spec%%:*} type=${spec#*:}
        model=$BUILD/model-bench/$shape-$type.gguf
        mkdir -p "$BUILD/model-bench"
        if [ ! -f "$model" ]; then
                "$BUILD/tests/tools/m40-mkmodel" -o "$model" --preset "$shape" --type "$type" \
                        --random-blocks --quiet || exit 1
        fi
        for n in "$A" "$B"; do
                if [ "$BATCH" -gt 1 ]; then
                        cmd=("$BUILD/tests/bench/m40-bench" --model "$model" --no-load
                             --batches "$BATCH" --tokens "$n" --prompt 4 --quiet)
                else
                        cmd=("$BUILD/tests/engine/m40-gen" -m "$model" --tokens 1,2,3,4 -n "$n"
                             --backend cuda --ignore-eos)
                fi
                "$NCU" --csv --metrics gpu__time_duration.sum --graph-profiling node \
                        --cache-control none --clock-control none \
                        "${cmd[@]}" >"$TMP/$n.csv" 2>"$TMP/$n.err" ||
                        { tail -5 "$TMP/$n.err"; exit 1; }
        done
        echo "== $spec: GPU time per decode step of $BATCH (ncu, tokens $A vs $B)"
        python3 - "$TMP/$A.csv" "$TMP/$B.csv" "$((B - A))" <<'PY'
import csv, sys, collections
def load(path):
    t = collections.Counter(); c = collections.Counter()
    rows = [l for l in open(path) if l.startswith('"')]
    for r in csv.DictReader(rows):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        u = r["Metric Unit"]
        v *= {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,
              "ms": 1e3, "second": 1e6, "s": 1e6}[u]
        name = r["Kernel Name"].split("(")[0].replace("void ", "")
        key = name + " grid " + r["Grid Size"]
        t[key] += v; c[key] += 1
    return t, c
(ta, ca), (tb, cb), n = load(sys.argv[1]), load(sys.argv[2]), int(sys.argv[3])
d = {k: (tb[k] - ta.get(k, 0)) / n for k in tb}
cnt = {k: (cb[k] - ca.get(k, 0)) / n for k in cb}
tot = sum(v for v in d.values() if v > 0)
print(f"{'us/token':>9} {'share':>6} {'calls':>6}  kernel")
for k, v in sorted(d.items(), key=lambda kv: -kv[1]):
    if v > 0.05:
        print(f"{v:9.1f} {v / tot:6.1%} {cnt[k]:6.1f}  {k}")
print(f"{tot:9.1f} total GPU time per token ({1e6 / tot:.0f} tok/s if there were no gaps)")
PY
done
