#!/usr/bin/env bash
# tests/bench/run-model-bench.sh - the model benchmarks of issue 6 (acceptance checks 4
# and 5), run on the GPU machine.
#
# Usage: tests/bench/run-model-bench.sh [SHAPE:TYPE ...]
#   SHAPE is an m40-mkmodel preset (135m, 1b, 8b), TYPE an m40-mkmodel --type (F16, Q8_0,
#   Q4_0, Q4_K_M, ...). Default, in this order: 135m:F16 135m:Q8_0 1b:F16 1b:Q8_0 1b:Q4_0
#   1b:Q4_K_M 8b:Q4_0 8b:Q4_K_M 8b:Q8_0 8b:F16.
#
# For each model: m40-mkmodel writes it into MODEL_DIR (a folder on local disk; quantized
# types with --random-blocks: the bytes of a real file of the type, random values, written
# in seconds), m40-bench --model measures it (load warm and cold, decode at batches 1, 8,
# 32, 64, prefill of 512 tokens beside cuBLAS SGEMM; JSON to $OUT/model-SHAPE-TYPE.json,
# its text tables to $OUT/model-logs/SHAPE-TYPE-bench.txt, progress notes to
# SHAPE-TYPE-bench.log there and to stderr), and the file is deleted. At the end, one summary table
# (also in $OUT/model-summary.txt).
#
# Run after tests/gpu/run-on-device.sh has configured BUILD (default build-gpu); if BUILD
# is not configured this script configures it the same way. It builds only m40-bench and
# m40-mkmodel. The caller sources .devdeps/use.sh first (this script does when it exists
# and PKG_CONFIG_PATH does not point there yet).
#
# Environment:
#   BUILD        build folder (default build-gpu)
#   OUT          where results go (default /tmp/model-bench)
#   MODEL_DIR    where model files are written (default $BUILD/model-bench: the
#                repository's disk; the cold load tests need a real disk, not tmpfs)
#   MODEL_BENCH_ARGS  extra m40-bench arguments, e.g. "--no-load-cold" or "--batches 1,8"
#                (not BENCH_ARGS, which run-on-device.sh uses)
#   MKMODEL_ARGS extra m40-mkmodel arguments (default: --random-blocks)
#   COLD         which models get the cold load tests: "all" (default) or a list of
#                SHAPE:TYPE (e.g. COLD=8b:Q4_0, acceptance check 5); the others run
#                with --no-load-cold (the cold tests read the file from disk 4 times)
#   BUDGET       seconds this script may run (default 560, under a 600 s device call):
#                a model whose estimated time (10 s + 8 s per GB of file) does not fit
#                in what is left is skipped and named in the summary; m40-bench itself
#                is stopped at the budget.
# Exit status: 0 when every requested model was measured, 1 otherwise.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

BUILD=${BUILD:-build-gpu}
OUT=${OUT:-/tmp/model-bench}
MODEL_DIR=${MODEL_DIR:-$BUILD/model-bench}
MODEL_BENCH_ARGS=${MODEL_BENCH_ARGS:-}
MKMODEL_ARGS=${MKMODEL_ARGS:---random-blocks}
BUDGET=${BUDGET:-560}
COLD=${COLD:-all}
LOGS=$OUT/model-logs
START=$(date +%s)

if [ "$#" -gt 0 ]; then
        models=("$@")
else
        models=(135m:F16 135m:Q8_0 1b:F16 1b:Q8_0 1b:Q4_0 1b:Q4_K_M 8b:Q4_0 8b:Q4_K_M 8b:Q8_0
                8b:F16)
fi
for m in "${models[@]}"; do
        case $m in
        *:*) ;;
        *)
                echo "run-model-bench.sh: '$m' is not SHAPE:TYPE (e.g. 8b:Q4_0)" >&2
                exit 2
                ;;
        esac
done

mkdir -p "$OUT" "$LOGS" "$MODEL_DIR" || exit 1

if [ -f .devdeps/use.sh ] && [[ "${PKG_CONFIG_PATH:-}" != */opt/devdeps/* ]]; then
        # shellcheck disable=SC1091
        source .devdeps/use.sh
fi

elapsed() { echo $(($(date +%s) - START)); }

echo "=== model benchmarks: ${models[*]} (build $BUILD, files in $MODEL_DIR, results in $OUT)"
if [ ! -f "$BUILD/build.ninja" ]; then
        meson setup "$BUILD" -Dcuda=enabled "-Dcuda-arch=${CUDA_ARCH:-90}" -Dbuildtype=release \
                >"$LOGS/setup.log" 2>&1 || {
                echo "meson setup failed: see $LOGS/setup.log"
                tail -n 20 "$LOGS/setup.log"
                exit 1
        }
fi
if ! ninja -C "$BUILD" tests/bench/m40-bench tests/tools/m40-mkmodel >"$LOGS/build.log" 2>&1; then
        echo "build failed: see $LOGS/build.log"
        tail -n 30 "$LOGS/build.log"
        exit 1
fi
BENCH=$BUILD/tests/bench/m40-bench
MKMODEL=$BUILD/tests/tools/m40-mkmodel
echo "file system of $MODEL_DIR: $(stat -f -c %T "$MODEL_DIR"), $(df -h --output=avail "$MODEL_DIR" | tail -n 1 | tr -d ' ') free; $(nproc) CPUs"
if [ "$(stat -f -c %T "$MODEL_DIR")" = tmpfs ]; then
        echo "warning: $MODEL_DIR is tmpfs: the cold load figures will not be from a disk"
fi

# bytes of the file m40-mkmodel will write: SHAPE TYPE -> GB estimate (parameters x bytes
# per weight of the type)
est_gb() {
        local params bpw
        case $1 in
        135m) params=0.135 ;;
        1b) params=1.24 ;;
        8b) params=8.03 ;;
        *) params=8 ;;
        esac
        case ${2^^} in
        F32) bpw=4 ;;
        F16 | BF16) bpw=2 ;;
        Q8_0) bpw=1.07 ;;
        Q6_K) bpw=0.82 ;;
        Q5_*) bpw=0.69 ;;
        *) bpw=0.6 ;;
        esac
        awk -v p="$params" -v b="$bpw" 'BEGIN { printf "%.1f", p * b }'
}

declare -A status
failed=0
for m in "${models[@]}"; do
        shape=${m%%:*}
        type=${m#*:}
        name=$shape-$type
        gb=$(est_gb "$shape" "$type")
        need=$(awk -v g="$gb" 'BEGIN { printf "%d", 10 + 8 * g }')
        left=$((BUDGET - $(elapsed)))
        if [ "$need" -gt "$left" ]; then
                status[$m]="skipped: needs ~${need} s, ${left} s left of BUDGET"
                echo "=== $m: ${status[$m]}"
                failed=1
                continue
        fi
        avail_kb=$(df --output=avail -k "$MODEL_DIR" | tail -n 1)
        if awk -v g="$gb" -v a="$avail_kb" 'BEGIN { exit !(g * 1.1e6 > a) }'; then
                status[$m]="skipped: ${gb} GB does not fit the free space of $MODEL_DIR"
                echo "=== $m: ${status[$m]}"
                failed=1
                continue
        fi
        file=$MODEL_DIR/$name.gguf
        json=$OUT/model-$name.json
        rm -f "$json"
        echo "=== $m: m40-mkmodel (~$gb GB) at $(elapsed) s"
        t0=$(date +%s.%N)
        # shellcheck disable=SC2086 # MKMODEL_ARGS is a list of words
        "$MKMODEL" --preset "$shape" --type "$type" $MKMODEL_ARGS -o "$file" \
                >"$LOGS/$name-mkmodel.log" 2>&1
        rc=$?
        tail -n 1 "$LOGS/$name-mkmodel.log"
        if [ "$rc" -ne 0 ] || [ ! -f "$file" ]; then
                status[$m]="FAILED: m40-mkmodel (see $LOGS/$name-mkmodel.log)"
                echo "=== $m: ${status[$m]}"
                failed=1
                continue
        fi
        gen_s=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
        left=$((BUDGET - $(elapsed)))
        [ "$left" -gt 0 ] || left=1
        cold_args=
        if [ "$COLD" != all ] && [[ " $COLD " != *" $m "* ]]; then
                cold_args=--no-load-cold
        fi
        echo "=== $m: m40-bench --model (generated in $gen_s s; $left s left)"
        # shellcheck disable=SC2086 # MODEL_BENCH_ARGS is a list of words
        timeout --signal=INT --kill-after=10 "$left" "$BENCH" --model "$file" --output "$json" \
                $cold_args $MODEL_BENCH_ARGS >"$LOGS/$name-bench.txt" \
                2> >(tee "$LOGS/$name-bench.log" >&2)
        rc=$?
        rm -f "$file" "$file.tmp"
        if [ "$rc" -eq 0 ]; then
                status[$m]="ok (file written in $gen_s s)"
        else
                status[$m]="FAILED: m40-bench exit $rc (see $LOGS/$name-bench.log)"
                failed=1
        fi
        echo "=== $m: ${status[$m]} at $(elapsed) s"
done

# The summary, from the JSON files.
echo
python3 - "$OUT" "${models[@]}" <<'EOF' | tee "$OUT/model-summary.txt"
import json, os, sys

out, models = sys.argv[1], sys.argv[2:]
# llama.cpp on the same H100, batch 1 tg128 (DESIGN.md section 7)
ref = {("135m", "F16"): 894, ("135m", "Q8_0"): 863, ("1b", "F16"): 688, ("1b", "Q8_0"): 745,
       ("1b", "Q4_0"): 859, ("1b", "Q4_K_M"): 801, ("8b", "F16"): 164, ("8b", "Q8_0"): 226,
       ("8b", "Q4_0"): 316, ("8b", "Q4_K_M"): 255}
hdr = ("shape", "type", "GB", "b1 tok/s", "llama.cpp", "of copy", "b8", "b32", "b64",
       "b64 %peak", "prefill", "of SGEMM", "engine w/c", "loader w/c", "read w/c", "cold res")
fmt = "%-5s %-7s %6s %9s %9s %7s %8s %8s %8s %9s %8s %8s %13s %13s %13s %8s"
print("model benchmarks on the CUDA engine; tok/s aggregate; load in GB/s of tensor data")
copy = h2d = None
rows = []
for m in models:
    shape, typ = m.split(":", 1)
    p = os.path.join(out, "model-%s-%s.json" % (shape, typ))
    try:
        with open(p) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        rows.append((shape, typ) + ("-",) * (len(hdr) - 2) + ("no result (%s)" % p,))
        continue
    copy = copy or j.get("copy", {}).get("best_gbs")
    mo = j.get("model", {})
    h2d = h2d or mo.get("h2d_gbs")
    dec = {d["batch"]: d for d in mo.get("decode", [])}
    pre = mo.get("prefill") or {}
    lw, lc = mo.get("load_warm") or {}, mo.get("load_cold") or {}

    def g(d, k, f="%.0f"):
        return f % d[k] if d and k in d and d[k] is not None else "-"

    def wc(k, f="%.1f"):
        return "%s/%s" % (g(lw, k, f), g(lc, k, f))
    b1 = dec.get(1, {})
    r = ref.get((shape, typ))
    rows.append((shape, typ, "%.2f" % (mo.get("tensor_bytes", 0) / 1e9),
                 g(b1, "tok_s", "%.1f"), str(r) if r else "-",
                 g(b1, "of_copy", "%.3f") if b1 else "-",
                 g(dec.get(8), "tok_s"), g(dec.get(32), "tok_s"), g(dec.get(64), "tok_s"),
                 ("%.1f%%" % (100 * dec[64]["of_fp32_peak"])) if 64 in dec else "-",
                 g(pre, "tok_s"), ("%.0f%%" % (100 * pre["of_sgemm"])) if "of_sgemm" in pre else "-",
                 wc("engine_gbs"), wc("loader_gbs"), wc("read_gbs"),
                 ("%.2fG" % (lc["resident_bytes"] / 1e9)) if lc else "-") +
                (("error: " + mo["error"],) if mo.get("error") else ()))
print("copy bandwidth %s GB/s, host-to-device (pinned) %s GB/s (the first run's); FP32 peak "
      "and everything else per model in %s/model-*.json" % (copy, h2d, out))
print(fmt % hdr)
for r in rows:
    print(fmt % r[:16] + ("  " + r[16] if len(r) > 16 else ""))
EOF
echo
for m in "${models[@]}"; do
        printf '%-12s %s\n' "$m" "${status[$m]:-not run}"
done
echo "total $(elapsed) s"
exit "$failed"
