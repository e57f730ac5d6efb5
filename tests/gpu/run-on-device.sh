#!/usr/bin/env bash
# tests/gpu/run-on-device.sh - the one script run on the GPU test machine.
#
# Owns the GPU run: configure build-gpu with CUDA for one arch (default 90, set
# CUDA_ARCH=..), build, run the unit and gpu suites, record m40-bench's JSON,
# run test_device under compute-sanitizer (memcheck) when it is installed, and
# print a summary table last. Keeps going after a failed step; exits 1 at the
# end if any step failed (a gpu suite that only skips counts as failed here: on
# this machine it means CUDA did not see the GPU), else 0.
#
# The caller first runs `source .devdeps/use.sh` (liburing, inih, libsystemd,
# cmocka, pcre2). Logs go to ${OUT:-/tmp}/gpu-logs/; the benchmark JSON to
# $OUT/bench.json when OUT is set.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

BUILD=${BUILD:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
LOGS=${OUT:-/tmp}/gpu-logs
BENCH_JSON=${OUT:+$OUT/bench.json}
BENCH_JSON=${BENCH_JSON:-$LOGS/bench.json}
mkdir -p "$LOGS"

failed=()
declare -A status

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

if [ "${status[setup]}" = ok ]; then
        step build ninja -C "$BUILD"
else
        skip build "setup failed"
fi

if [ "${status[build]:-}" = ok ]; then
        step unit meson test -C "$BUILD" --suite unit --print-errorlogs
        cp -f "$BUILD/meson-logs/testlog.txt" "$LOGS/testlog-unit.txt" 2>/dev/null
        step gpu meson test -C "$BUILD" --suite gpu --print-errorlogs --verbose
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
        step bench-text "$bench"
        echo "=== bench-json: $bench --json > $BENCH_JSON"
        if "$bench" --json >"$BENCH_JSON" 2>"$LOGS/bench-json.log"; then
                status[bench-json]=ok
                cat "$BENCH_JSON"
        else
                status[bench-json]="FAILED (exit $?)"
                failed+=(bench-json)
                cat "$LOGS/bench-json.log"
        fi
else
        skip bench-text "m40-bench not built"
fi

sanitizer=$(command -v compute-sanitizer || true)
[ -z "$sanitizer" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [ -n "$sanitizer" ] && [ -x "$BUILD/tests/gpu/test_device" ]; then
        M40_TEST_COPY_BYTES=$((64 << 20)) step memcheck timeout 480 "$sanitizer" --tool memcheck \
                --leak-check full --error-exitcode 3 "$BUILD/tests/gpu/test_device"
else
        skip memcheck "no compute-sanitizer or no test_device"
fi

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
for s in setup build unit gpu bench-text bench-json memcheck; do
        [ -n "${status[$s]:-}" ] || continue
        line=${status[$s]}
        if { [ "$s" = unit ] || [ "$s" = gpu ]; } && [ -f "$LOGS/$s.log" ]; then
                read -r o f k t < <(counts "$LOGS/$s.log")
                line="$line; $o passed, $f failed, $k skipped, $t timed out"
        fi
        printf '%-10s %s\n' "$s" "$line"
done
printf '%-10s %s\n' copy "$copy"
if [ "${#failed[@]}" -gt 0 ]; then
        printf '%-10s %s\n' result "FAIL: ${failed[*]}"
        exit 1
fi
printf '%-10s %s\n' result PASS
exit 0
