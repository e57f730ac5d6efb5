#!/usr/bin/env bash
# tests/bench/ab-variants.sh - same-run A/B of compile-time variants of the CUDA engine on
# whole-model decode, on the GPU machine.
#
# Usage: tests/bench/ab-variants.sh [options] NAME=FLAGS [NAME=FLAGS ...] -- SHAPE:TYPE ...
#   NAME   a variant's name (letters, digits, _ and -); its build is $PREFIX$NAME
#   FLAGS  nvcc options for every .cu file of the variant, comma-separated, e.g.
#          B=-DMV_WPS=16 or C=-DATTN_TILE=64,-DATTN_SPAN_MIN=128; empty (base=) for
#          the tree as it is. The kernels' tuning constants are #ifndef-guarded for this
#          (cuda/kernels/matvec.cuh: MV_MINB, MV_MINB_Q, MV_MINB_Q8, MV_HOIST, MV_PF,
#          MV_PF_ALL, MV_Q32_WIDE_NB, MV_U_K, MV_META_AHEAD, MV_EPI_AHEAD, MV_DIRECT_NB;
#          cuda/kernels/matvec_launch.cuh: MV_WPS, MV_WPS_K, MV_SPLIT_STEPS, MV_R1, MV_R1_K,
#          MV_R8, MV_R4W; cuda/kernels/attention.cuh: ATTN_TILE, ATTN_SPAN_MIN, ATTN_PU,
#          ATTN_Q_EARLY; cuda/kernels/attention_decode.cu: ATTN_G;
#          cuda/kernels/attention_prompt.cu: AP_NG; cuda/kernels/prefetch.cu: PF_MODE,
#          PF_MAX_MB; cuda/kernels/persist_step.cuh: PS_MINB, PS_R1, PS_U, PS_PF,
#          PS_CALLS, PS_TIMING (the kernel prints: run such a build's m40-bench
#          yourself); cuda/kernels/persist_step.cu: PS_DEFAULT).
#   SHAPE:TYPE  m40-mkmodel presets and types, as tests/bench/run-model-bench.sh takes.
# Options:
#   --batches LIST  decode batches to time (m40-bench --batches; default 1)
#   --prefill N     also time a prefill of one N-token prompt (m40-bench --prefill;
#                   default 0, none): the summary adds its tokens/s as column "pf" and
#                   its fraction of the SGEMM rate on the same shapes
#   --rounds N      passes over all models and variants (default 1); the order of the
#                   variants rotates every round, and the summary gives each figure's
#                   median over the rounds
#   --prefix P      build folder prefix (default build-ab-)
#   --model-dir D   where the models are written once and kept (default
#                   build-ab-models; a file already there is reused)
#   -h, --help      this text
#
# Builds every variant (m40-bench and m40-mkmodel only) side by side in parallel
# (NVCC_APPEND_FLAGS carries FLAGS into each nvcc call; a build folder made with other
# flags is wiped first), makes each model once with the first variant's m40-mkmodel
# (--random-blocks), then runs m40-bench --model FILE --no-load --prefill N (0 without
# --prefill) for every model and variant in turn, so that the variants of one model are
# timed minutes apart on the same machine: the only way to compare changes of a few
# percent (separate runs of the same code differ by 1-2%). Prints one line per run and a
# summary table: decode (and prefill) tokens/s for each model and variant, and its ratio
# to the first variant.
# The caller sources .devdeps/use.sh first where the build needs it.
# Exit status: 0 when every variant built and every run gave a figure, 1 otherwise,
# 2 for a usage error.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

usage() {
        sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

BATCHES=1
PREFILL=0
ROUNDS=1
PREFIX=build-ab-
MODEL_DIR=build-ab-models
variants=()
models=()
while [ "$#" -gt 0 ]; do
        case $1 in
        --batches) BATCHES=${2:?--batches needs a list}; shift 2 ;;
        --prefill) PREFILL=${2:?--prefill needs a token count}; shift 2 ;;
        --rounds) ROUNDS=${2:?--rounds needs a count}; shift 2 ;;
        --prefix) PREFIX=${2:?--prefix needs a value}; shift 2 ;;
        --model-dir) MODEL_DIR=${2:?--model-dir needs a folder}; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        --) shift; models=("$@"); break ;;
        -*) echo "$0: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) variants+=("$1"); shift ;;
        esac
done
if [ "${#variants[@]}" -lt 1 ] || [ "${#models[@]}" -lt 1 ]; then
        echo "usage: $0 [options] NAME=FLAGS ... -- SHAPE:TYPE ... (see --help)" >&2
        exit 2
fi
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "$0: --rounds takes a positive count" >&2; exit 2; }
[[ $PREFILL =~ ^[0-9]+$ ]] || { echo "$0: --prefill takes a token count" >&2; exit 2; }
[[ $BATCHES =~ ^[0-9]+(,[0-9]+)*$ ]] || { echo "$0: --batches takes a list like 1,8" >&2; exit 2; }
names=()
for v in "${variants[@]}"; do
        name=${v%%=*}
        if [[ $v != *=* || ! $name =~ ^[A-Za-z0-9_-]+$ ]]; then
                echo "$0: a variant is NAME=FLAGS, got '$v'" >&2
                exit 2
        fi
        for n in "${names[@]}"; do
                [ "$n" != "$name" ] || { echo "$0: variant $name given twice" >&2; exit 2; }
        done
        names+=("$name")
done
for m in "${models[@]}"; do
        [[ $m =~ ^[A-Za-z0-9]+:[A-Za-z0-9_]+$ ]] || { echo "$0: a model is SHAPE:TYPE, got '$m'" >&2; exit 2; }
done
command -v python3 >/dev/null || { echo "$0: needs python3 for the summary" >&2; exit 1; }

failed=0
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# build NAME FLAGS: configure (wiping a folder built with other flags) and build
build() {
        local dir=$PREFIX$1 flags=${2//,/ }
        if [ -f "$dir/ab-flags" ] && [ "$(cat "$dir/ab-flags")" != "$flags" ]; then
                rm -rf "$dir"
        fi
        if [ ! -f "$dir/build.ninja" ]; then
                NVCC_APPEND_FLAGS="$flags" meson setup "$dir" -Dcuda=enabled \
                        "-Dcuda-arch=${CUDA_ARCH:-90}" -Dbuildtype=release >"$OUT/$1.setup" 2>&1 ||
                        { echo "variant $1: meson setup failed:"; tail -n 20 "$OUT/$1.setup"; return 1; }
                printf '%s' "$flags" >"$dir/ab-flags"
        fi
        NVCC_APPEND_FLAGS="$flags" ninja -C "$dir" tests/bench/m40-bench tests/tools/m40-mkmodel \
                >"$OUT/$1.build" 2>&1 ||
                { echo "variant $1: build failed:"; tail -n 30 "$OUT/$1.build"; return 1; }
}

echo "=== building ${#names[@]} variant(s) in parallel"
pids=()
for i in "${!variants[@]}"; do
        build "${names[$i]}" "${variants[$i]#*=}" &
        pids+=($!)
done
for i in "${!pids[@]}"; do
        if ! wait "${pids[$i]}"; then
                failed=1
                echo "=== variant ${names[$i]}: not built, left out"
                names[i]=
        fi
done
built=()
for n in "${names[@]}"; do
        [ -n "$n" ] && built+=("$n")
done
[ "${#built[@]}" -gt 0 ] || { echo "no variant built"; exit 1; }

mkdir -p "$MODEL_DIR"
ready=()
for m in "${models[@]}"; do
        file=$MODEL_DIR/${m%%:*}-${m#*:}.gguf
        if [ ! -f "$file" ]; then
                echo "=== making $m"
                "$PREFIX${built[0]}/tests/tools/m40-mkmodel" --preset "${m%%:*}" --type "${m#*:}" \
                        --random-blocks --quiet -o "$file" || {
                        echo "=== $m: m40-mkmodel failed, left out"
                        rm -f "$file"
                        failed=1
                        continue
                }
        fi
        ready+=("$m")
done

# one line per run: round model variant, then batch:tok/s pairs
for ((r = 0; r < ROUNDS; r++)); do
        for m in "${ready[@]}"; do
                file=$MODEL_DIR/${m%%:*}-${m#*:}.gguf
                for ((k = 0; k < ${#built[@]}; k++)); do
                        n=${built[$(((k + r) % ${#built[@]}))]}
                        json=$OUT/run.json
                        rm -f "$json"
                        if ! "$PREFIX$n/tests/bench/m40-bench" --model "$file" --no-load --prefill "$PREFILL" \
                                --batches "$BATCHES" --quiet --output "$json" >/dev/null 2>"$OUT/run.err"; then
                                echo "round $((r + 1)) $m $n: m40-bench failed: $(tail -n 1 "$OUT/run.err")"
                                failed=1
                                continue
                        fi
                        line=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
m = d["model"]
w = ["%d:%.1f" % (x["batch"], x["tok_s"]) for x in m["decode"]]
p = m.get("prefill")
if p:
    w += ["pf:%.1f" % p["tok_s"]] + (["sg:%.4f" % p["of_sgemm"]] if "of_sgemm" in p else [])
print(" ".join(w))' "$json")
                        echo "round $((r + 1)) $m $n $line" | tee -a "$OUT/runs"
                        [ -n "$line" ] || failed=1
                done
        done
done

echo "=== decode (b) and prefill (pf) tok/s, prefill/SGEMM (sg), median over $ROUNDS round(s); (x) = ratio to variant ${built[0]}"
[ -f "$OUT/runs" ] && python3 - "$OUT/runs" "${built[0]}" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
order_m, order_v, batches = [], [], set()
for line in open(sys.argv[1]):
    w = line.split()
    m, v = w[2], w[3]
    order_m += [m] if m not in order_m else []
    order_v += [v] if v not in order_v else []
    for p in w[4:]:
        b, t = p.split(":")
        b = int(b) if b.isdigit() else b
        runs[(m, v, b)].append(float(t))
        batches.add(b)
base = sys.argv[2]
for m in order_m:
    for v in order_v:
        cells = []
        for b in sorted(batches, key=lambda b: (isinstance(b, str), str(b).zfill(3))):
            name = f"b{b}" if isinstance(b, int) else b
            t = runs.get((m, v, b))
            if not t:
                cells.append(f"{name} -")
                continue
            med = statistics.median(t)
            if b == "sg":
                cells.append(f"sg {med:.3f}")
                continue
            ref = runs.get((m, base, b))
            ratio = f" ({med / statistics.median(ref):.3f})" if ref else ""
            cells.append(f"{name} {med:9.1f}{ratio}")
        print(f"{m:12} {v:10} " + "   ".join(cells))
PY
exit "$failed"
