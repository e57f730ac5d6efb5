#!/usr/bin/env bash
# tests/gpu/profile-matvec.sh - why a matrix-vector kernel runs at the speed it does:
# Nsight Compute (ncu) metrics of k_matvec on the 8B shapes of m40-bench --matvec, on
# the GPU machine.
#
# Usage: tests/gpu/profile-matvec.sh [TYPE_ID ...]   (GGML type ids; default 1 2 8 12:
#        F16, Q4_0, Q8_0, Q4_K)
# Runs m40-bench --matvec once under ncu, profiling the first launch of every distinct
# grid of the batch-1 plain kernel (k_matvec<T, 1, R, VEC, 0, U>) of the given types,
# and prints per launch: type, grid, time, DRAM and L1 throughput (% of peak), issue
# slots busy, achieved occupancy, registers, and the stall reasons (warps stalled per
# issued instruction) that take more than 0.3. Environment: BUILD (default build-gpu),
# NCU (default ncu on PATH, else /usr/local/cuda/bin/ncu), KERNEL=mmq or mmr to profile a
# batched kernel instead (k_mmq<T, shape> or k_mmr<T, NR, VEC> of the given types at
# every batch the bench gives them; the FMA pipe's busy share, shared-memory and
# global-load L1 wavefronts and bank conflicts are added).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
BUILD=${BUILD:-build-gpu}
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
[ -x "$NCU" ] || { echo "$0: ncu not found" >&2; exit 77; }
types=("$@")
[ "${#types[@]}" -gt 0 ] || types=(1 2 8 12)
alt=$(IFS='|'; echo "${types[*]}")

metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,l1tex__throughput.avg.pct_of_peak_sustained_active
metrics+=,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
metrics+=,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum
metrics+=,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum
metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
metrics+=,l1tex__data_pipe_lsu_wavefronts.sum
metrics+=,smsp__inst_executed.sum
metrics+=,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
stalls="long_scoreboard short_scoreboard lg_throttle mio_throttle wait math_pipe_throttle"
stalls+=" not_selected selected no_instruction barrier dispatch_stall tex_throttle drain"
for s in $stalls; do
        metrics+=,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
kre="regex:k_matvec<\\(int\\)($alt), \\(int\\)1, .*\\(int\\)0, \\(int\\)[12]>"
[ "${KERNEL:-}" = mmq ] && kre="regex:k_mmq<\\(int\\)($alt), "
[ "${KERNEL:-}" = mmr ] && kre="regex:k_mmr<\\(int\\)($alt), "
"$NCU" --csv --kernel-name-base demangled -k "$kre" \
        --filter-mode per-launch-config --launch-count 1 --metrics "$metrics" \
        "$BUILD/tests/bench/m40-bench" --matvec --iters 2 >"$TMP/ncu.csv" 2>"$TMP/ncu.err" ||
        { tail -20 "$TMP/ncu.err"; exit 1; }
python3 - "$TMP/ncu.csv" <<'PY'
import csv, sys, collections
rows = [l for l in open(sys.argv[1]) if l.startswith('"')]
k = collections.OrderedDict()
for r in csv.DictReader(rows):
    key = (r["ID"], r["Kernel Name"].split(">(")[0].replace("void ", "").replace("(int)", "").replace("(bool)", "") + ">", r["Grid Size"])
    k.setdefault(key, {})[r["Metric Name"]] = (r["Metric Value"], r["Metric Unit"])
short = {"gpu__time_duration.sum": "time", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram%",
         "l1tex__throughput.avg.pct_of_peak_sustained_active": "l1%",
         "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue%",
         "sm__warps_active.avg.pct_of_peak_sustained_active": "occ%",
         "launch__registers_per_thread": "regs",
         "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": "ld_req",
         "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": "ld_sect",
         "smsp__inst_executed.sum": "inst",
         "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "fma%",
         "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum": "shared_wf",
         "l1tex__data_pipe_lsu_wavefronts.sum": "lsu_wf",
         "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "bank_confl"}
for (i, name, grid), m in k.items():
    out = [name, "grid", grid]
    for full, s in short.items():
        if full in m:
            out.append("%s=%s%s" % (s, m[full][0], "" if m[full][1] in ("%", "", "register/thread") else m[full][1]))
    st = []
    for full, (v, u) in m.items():
        if "issue_stalled" in full:
            try:
                f = float(v.replace(",", ""))
            except ValueError:
                continue
            if f > 0.3:
                st.append((f, full.split("stalled_")[1].split("_per_issue")[0]))
    st.sort(reverse=True)
    out.append("stalls: " + " ".join("%s=%.2f" % (n, f) for f, n in st))
    print(" ".join(out))
PY
