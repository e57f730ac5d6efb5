#!/usr/bin/env bash
# tests/gpu/run-on-device.sh - the one script run on the GPU test machine.
#
# Owns the GPU run: configure build-gpu with CUDA for one arch (default 90, set
# CUDA_ARCH=..), build (if the whole tree does not build, at least the GPU tests
# and m40-bench, so a broken unrelated file does not hide GPU results), run the
# unit and gpu suites, run m40-bench with the matrix-kernel benchmark (text in
# the log, JSON to a file), run every gpu test under compute-sanitizer memcheck
# (M40_TEST_QUICK=1: fewer cases) and the kernel and CUDA engine tests under racecheck
# (M40_TEST_QUICK=2: a few types, small shapes) when it is installed, and print
# a summary table last. Keeps going after a failed
# step; exits 1 at the end if any step failed (a gpu suite that only skips
# counts as failed here: on this machine it means CUDA did not see the GPU),
# else 0.
#
# The caller first runs `source .devdeps/use.sh` (liburing, inih, libsystemd,
# cmocka, pcre2). Logs go to ${OUT:-/tmp}/gpu-logs/; the benchmark JSON to
# $OUT/bench.json when OUT is set. SKIP_UNIT=1 skips the unit suite;
# BENCH_ARGS replaces m40-bench's arguments (default --matvec). MODELS="SHAPE:TYPE ..."
# then runs the model benchmarks (tests/bench/run-model-bench.sh, results under $OUT)
# before the sanitizers; SANITIZE=0 skips the sanitizers; DEADLINE=S (seconds from the
# start) skips the steps that would start after it and caps the model benchmarks, so
# one device call (600 s at most) always comes back with its summary.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

BUILD=${BUILD:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
LOGS=${OUT:-/tmp}/gpu-logs
BENCH_JSON=${OUT:+$OUT/bench.json}
BENCH_JSON=${BENCH_JSON:-$LOGS/bench.json}
BENCH_ARGS=${BENCH_ARGS:---matvec}
GPU_TESTS=(test_device test_alloc test_loader test_matvec test_matvec_qkv test_mmq test_ops test_attention test_gemm test_sample
        test_cuda_engine)
GPU_TARGETS=(tests/gpu/test_device tests/gpu/test_alloc tests/gpu/test_loader
        tests/gpu/test_matvec tests/gpu/test_matvec_qkv tests/gpu/test_mmq tests/gpu/test_ops tests/gpu/test_attention tests/gpu/loader_q4km.gguf
        tests/bench/m40-bench
        tests/gpu/test_gemm tests/gpu/test_sample
        tests/gpu/test_cuda_engine tests/gpu/engine_135m_q4_1.gguf)
for t in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_k q5_k q6_k q4_k_m; do
        GPU_TARGETS+=("tests/gpu/engine_tiny_$t.gguf")
done
# stories260K: the copy carried in .devmodels/ on the device machine, else ../shared
STORIES=.devmodels/stories260K.gguf
[ -f "$STORIES" ] || STORIES=../shared/models/stories260K.gguf
mkdir -p "$LOGS"

failed=()
declare -A status
T0=$(date +%s)
DEADLINE=${DEADLINE:-0}
SANITIZE=${SANITIZE:-1}
MODELS=${MODELS:-}

# late NAME: true (and NAME marked skipped) when DEADLINE has passed.
late() {
        if [ "$DEADLINE" -gt 0 ] && [ $(($(date +%s) - T0)) -ge "$DEADLINE" ]; then
                status[$1]="skipped: past DEADLINE=$DEADLINE s"
                echo "=== $1: skipped: past the deadline"
                return 0
        fi
        return 1
}

# step NAME CMD...: run CMD, output to the terminal and $LOGS/NAME.log.
step() {
        local name=$1 rc
        shift
        echo "=== $name: $*"
        "$@" 2>&1 | tee "$LOGS/$name.log"
        rc=${PIPESTATUS[0]}
        if [ "$rc" -eq 0 ]; then
                status[$name]=ok
        else
                status[$name]="FAILED (exit $rc)"
                failed+=("$name")
        fi
        echo "=== $name: ${status[$name]}"
        return "$rc"
}

skip() {
        status[$1]="skipped: $2"
        echo "=== $1: skipped: $2"
}

# meson test's summary counts from a log: "ok fail skip timeout"
counts() {
        awk '/^Ok:/{ok=$2} /^Fail:/{f=$2} /^Skipped:/{s=$2} /^Timeout:/{t=$2} /^Unexpected Pass:/{u=$3}
             END{printf "%d %d %d %d\n", ok, f + u, s, t}' "$1" 2>/dev/null || echo "0 0 0 0"
}

echo "=== environment"
{
        uname -a
        command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
        command -v nvcc >/dev/null && nvcc --version | tail -n 2
        echo "meson $(meson --version), ninja $(ninja --version)"
} 2>&1 | tee "$LOGS/environment.log"

setup_args=(-Dcuda=enabled "-Dcuda-arch=$CUDA_ARCH" -Dbuildtype=release)
if [ -f "$BUILD/meson-private/coredata.dat" ]; then
        step setup meson setup --wipe "$BUILD" "${setup_args[@]}"
else
        rm -rf "$BUILD"
        step setup meson setup "$BUILD" "${setup_args[@]}"
fi

gpu_built=0
if [ "${status[setup]}" = ok ]; then
        if step build ninja -C "$BUILD"; then
                gpu_built=1
        elif step build-gpu ninja -C "$BUILD" "${GPU_TARGETS[@]}"; then
                gpu_built=1
        fi
else
        skip build "setup failed"
fi

if [ "$gpu_built" = 1 ]; then
        if [ "${SKIP_UNIT:-0}" = 1 ]; then
                skip unit "SKIP_UNIT=1"
        elif [ "${status[build]}" = ok ]; then
                step unit meson test -C "$BUILD" --suite unit --print-errorlogs
                cp -f "$BUILD/meson-logs/testlog.txt" "$LOGS/testlog-unit.txt" 2>/dev/null
        else
                skip unit "the full build failed"
        fi
        step gpu meson test -C "$BUILD" --no-rebuild --suite gpu --print-errorlogs --verbose
        cp -f "$BUILD/meson-logs/testlog.txt" "$LOGS/testlog-gpu.txt" 2>/dev/null
        read -r gpu_ok _ < <(counts "$LOGS/gpu.log")
        if [ "${status[gpu]}" = ok ] && [ "$gpu_ok" -eq 0 ]; then
                status[gpu]="FAILED (every gpu test skipped: no GPU seen)"
                failed+=(gpu)
        fi
else
        skip unit "no build"
        skip gpu "no build"
fi

bench=$BUILD/tests/bench/m40-bench
if [ -x "$bench" ]; then
        # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
        step bench "$bench" $BENCH_ARGS --output "$BENCH_JSON"
else
        skip bench "m40-bench not built"
fi

if [ -n "$MODELS" ] && ! late models; then
        left=$((DEADLINE > 0 ? DEADLINE - ($(date +%s) - T0) : 560))
        # shellcheck disable=SC2086 # MODELS is a list of words
        BUDGET=$left BUILD=$BUILD OUT=${OUT:-/tmp} step models tests/bench/run-model-bench.sh $MODELS
fi

# test NAME -> its command line (test_loader takes the model and a scratch folder)
test_cmd() {
        case $1 in
        test_loader) echo "$BUILD/tests/gpu/test_loader $BUILD/tests/gpu/loader_q4km.gguf $BUILD/tests/gpu" ;;
        test_cuda_engine) echo "$BUILD/tests/gpu/test_cuda_engine $STORIES $BUILD/tests/gpu/engine_tiny_q4_k.gguf $BUILD/tests/gpu/engine_tiny_f16.gguf" ;;
        *) echo "$BUILD/tests/gpu/$1" ;;
        esac
}

sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
sanitized=()
[ "$SANITIZE" = 1 ] || sanitizer=""
for t in "${GPU_TESTS[@]}"; do
        if [ -z "$sanitizer" ] || [ ! -x "$BUILD/tests/gpu/$t" ]; then
                skip "memcheck-$t" "no compute-sanitizer, SANITIZE=0 or no $t"
                continue
        fi
        late "memcheck-$t" && { sanitized+=("memcheck-$t"); continue; }
        # shellcheck disable=SC2046 # the command line is words
        M40_TEST_QUICK=1 M40_TEST_COPY_BYTES=$((64 << 20)) step "memcheck-$t" timeout 240 \
                "$sanitizer" --tool memcheck --leak-check full --error-exitcode 3 $(test_cmd "$t")
        sanitized+=("memcheck-$t")
done
for t in test_matvec test_matvec_qkv test_mmq test_ops test_attention test_sample test_cuda_engine; do
        if [ -z "$sanitizer" ] || [ ! -x "$BUILD/tests/gpu/$t" ]; then
                skip "racecheck-$t" "no compute-sanitizer, SANITIZE=0 or no $t"
                continue
        fi
        late "racecheck-$t" && { sanitized+=("racecheck-$t"); continue; }
        # shellcheck disable=SC2046
        M40_TEST_QUICK=2 step "racecheck-$t" timeout 240 "$sanitizer" --tool racecheck \
                --racecheck-report all --error-exitcode 3 $(test_cmd "$t")
        sanitized+=("racecheck-$t")
done

# The summary.
dev="?"
cc="?"
copy="?"
if [ -s "$BENCH_JSON" ]; then
        j=$(cat "$BENCH_JSON")
        dev=$(printf '%s' "$j" | sed -n 's/.*"name":"\([^"]*\)".*/\1/p')
        cc=$(printf '%s' "$j" | sed -n 's/.*"cc":"\([^"]*\)".*/\1/p')
        best=$(printf '%s' "$j" | sed -n 's/.*"best_gbs":\([0-9.]*\).*/\1/p')
        mc=$(printf '%s' "$j" | sed -n 's/.*"memcpy_gbs":\([0-9.]*\).*/\1/p')
        kc=$(printf '%s' "$j" | sed -n 's/.*"kernel_gbs":\([0-9.]*\).*/\1/p')
        peak=$(printf '%s' "$j" | sed -n 's/.*"peak_bw_gbs":\([0-9.]*\).*/\1/p')
        copy="$best GB/s best (cudaMemcpyAsync $mc, k_copy $kc; peak $peak)"
elif command -v nvidia-smi >/dev/null; then
        dev=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
fi
nvcc_v=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p')

echo
echo "=== m40-llm GPU run summary (logs: $LOGS)"
printf '%-10s %s\n' device "${dev:-?} (compute capability ${cc:-?})"
printf '%-10s %s\n' nvcc "${nvcc_v:-?} (built for sm_$CUDA_ARCH)"
for s in setup build build-gpu unit gpu bench models "${sanitized[@]}"; do
        [ -n "${status[$s]:-}" ] || continue
        line=${status[$s]}
        if { [ "$s" = unit ] || [ "$s" = gpu ]; } && [ -f "$LOGS/$s.log" ]; then
                read -r o f k t < <(counts "$LOGS/$s.log")
                line="$line; $o passed, $f failed, $k skipped, $t timed out"
        fi
        printf '%-10s %s\n' "$s" "$line"
done
printf '%-10s %s\n' copy "$copy"
if [ -f "$LOGS/bench.log" ] && grep -q '^matvec, batch 1' "$LOGS/bench.log"; then
        echo "matvec     $(sed -n 's/^matvec, batch 1: //p' "$LOGS/bench.log")"
        sed -n '/^matvec, batch 1/,/^$/p' "$LOGS/bench.log" | sed '1d;/^$/d;s/^/           /'
fi
if [ -f "$LOGS/gpu.log" ] && grep -q 'greedy' "$LOGS/gpu.log"; then
        echo "engine     CUDA vs CPU engine (f32), greedy tokens and last logits:"
        grep -o '[a-zA-Z0-9_.]*\.gguf *[a-z]* *seq [0-9]*: greedy.*' "$LOGS/gpu.log" | sed 's/^/           /'
fi
if [ -n "$MODELS" ] && [ -f "${OUT:-/tmp}/model-summary.txt" ]; then
        echo "models     (tests/bench/run-model-bench.sh)"
        sed 's/^/           /' "${OUT:-/tmp}/model-summary.txt"
fi
if [ "${#failed[@]}" -gt 0 ]; then
        printf '%-10s %s\n' result "FAIL: ${failed[*]}"
        exit 1
fi
printf '%-10s %s\n' result PASS
exit 0
