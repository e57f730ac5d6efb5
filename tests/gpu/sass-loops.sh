#!/usr/bin/env bash
# tests/gpu/sass-loops.sh - the machine code of a kernel's loops, counted, without a GPU.
#
# Usage: tests/gpu/sass-loops.sh [-D NAME=VALUE ...] FILE.cu KERNEL_REGEX
#        tests/gpu/sass-loops.sh -h | --help
# Compiles FILE.cu (one of cuda/*/*.cu) for sm_90 with the nvcc on PATH (or
# /usr/local/cuda/bin/nvcc) as the build does (-O3, the project's include folders; each
# -D is passed on, e.g. -D MV_R1=8 for a tuning knob of
# cuda/kernels/matvec_launch.cuh), disassembles it, and for every kernel whose mangled
# name matches KERNEL_REGEX (grep -E) prints its
# registers and spills (ptxas -v) and each loop: the address range from a backward
# branch's target to the branch, its instruction count and the count of each opcode,
# largest first. A loop's count is per trip: divide by the weights one trip handles to
# get instructions per weight (k_matvec<Q4_0, batch 1, 4 rows>: 4 rows x 16 weights).
# This is how the scale loads that came after the products (matvec.cuh, mv_ahead) were
# found; it is sm_90 code, not the M40's (nvdisasm dropped sm_52 after CUDA 13.0 and no
# older one is on PyPI; .ci/sm52-check.sh prints sm_52 registers and spills).
# Needs cuobjdump and nvdisasm: taken from PATH, else installed once from PyPI
# (nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, pinned below) into .venv/.
# Example: tests/gpu/sass-loops.sh cuda/kernels/matvec_q.cu 'k_matvecILi2ELi1ELi4ELb1ELi0E'
# Exit status: 0, 1 on a failure (compiling, tools, no kernel matched), 2 for usage.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1
TOOLS_VER=13.5.37

usage() {
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}

defs=()
while [ "$#" -gt 0 ]; do
        case $1 in
        -h | --help) usage; exit 0 ;;
        -D) defs+=("-D${2:?-D needs NAME=VALUE}"); shift 2 ;;
        -D*) defs+=("$1"); shift ;;
        --) shift; break ;;
        -*) echo "sass-loops: unknown option $1 (see --help)" >&2; exit 2 ;;
        *) break ;;
        esac
done
[ "$#" -eq 2 ] || { usage >&2; exit 2; }
src=$1 regex=$2
[ -f "$src" ] || { echo "sass-loops: no file $src" >&2; exit 2; }

NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$NVCC" ] || { echo "sass-loops: nvcc not found" >&2; exit 1; }

if ! command -v cuobjdump >/dev/null || ! command -v nvdisasm >/dev/null; then
        bin=.venv/lib/nvidia-tools/nvidia/cu13/bin
        if [ ! -x "$bin/nvdisasm" ] || [ ! -x "$bin/cuobjdump" ]; then
                [ -x .venv/bin/python3 ] || python3 -m venv .venv
                echo "sass-loops: installing cuobjdump and nvdisasm $TOOLS_VER from PyPI into .venv" >&2
                .venv/bin/python3 -m pip install -q --disable-pip-version-check --no-deps \
                        --target .venv/lib/nvidia-tools "nvidia-cuda-cuobjdump==$TOOLS_VER" \
                        "nvidia-cuda-nvdisasm==$TOOLS_VER" || exit 1
                chmod +x "$bin"/* 2>/dev/null || true
        fi
        PATH=$PWD/$bin:$PATH
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sass-loops.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$NVCC" -std=c++17 -O3 -arch=sm_90 -I. -Idaemon -Iinclude "${defs[@]}" -Xptxas -v \
        -cubin -o "$tmp/k.cubin" "$src" 2>"$tmp/ptxas.log" || { cat "$tmp/ptxas.log" >&2; exit 1; }
cuobjdump -sass "$tmp/k.cubin" >"$tmp/k.sass"

python3 - "$tmp/k.sass" "$tmp/ptxas.log" "$regex" <<'PY'
import collections, re, sys

sass, log, regex = sys.argv[1], sys.argv[2], re.compile(sys.argv[3])
res, fn = {}, None
for line in open(log):
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
        fn = m.group(1)
    m = re.search(r"(\d+) bytes spill stores", line)
    if m and fn:
        res.setdefault(fn, {})["spill"] = int(m.group(1))
    m = re.search(r"Used (\d+) registers", line)
    if m and fn:
        res.setdefault(fn, {})["regs"] = int(m.group(1))

kernels, cur = collections.OrderedDict(), None
for line in open(sass):
    m = re.search(r"Function : (\S+)", line)
    if m:
        cur = m.group(1)
        kernels[cur] = []
        continue
    m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(.*?)\s*;", line)
    if m and cur:
        kernels[cur].append((int(m.group(1), 16), m.group(2)))

found = 0
for name, ins in kernels.items():
    if not regex.search(name):
        continue
    found += 1
    r = res.get(name, {})
    print(f"{name}: {r.get('regs', '?')} registers, {r.get('spill', 0)} bytes spilled")
    for addr, text in ins:
        m = re.search(r"\bBRA\s+(?:`\()?[^0-9]*0x([0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        lo = int(m.group(1), 16)
        body = [t for a, t in ins if lo <= a <= addr]
        ops = collections.Counter()
        for t in body:
            op = t.split()[1] if t.startswith("@") else t.split()[0]
            ops[op.split(".")[0]] += 1
        mix = " ".join(f"{o} {n}" for o, n in ops.most_common())
        print(f"  loop 0x{lo:04x}-0x{addr:04x}: {len(body)} instructions: {mix}")
if not found:
    sys.exit("sass-loops: no kernel matches " + regex.pattern)
PY
