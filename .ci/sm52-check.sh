#!/usr/bin/env bash
# .ci/sm52-check.sh - the M40 build check (DESIGN.md §3).
#
# Owns: proving that every .cu file under cuda/ (all its folders) builds to Tesla M40 machine code.
# No nvcc that targets sm_52 exists here (CUDA 13 dropped it), so each file is
# compiled by clang (a real CUDA compiler) for sm_52 against /usr/local/cuda's
# headers to PTX, the PTX is checked to say `.target sm_52`, and ptxas 12.9 (PyPI
# nvidia-cuda-nvcc-cu12, the last CUDA with sm_52) assembles it into an sm_52
# cubin, rejecting any instruction an M40 lacks. Prints ptxas's resource usage
# for every kernel of every file. Exits nonzero, naming the file, on any failure.
#
# Environment: CLANGXX (default clang++-22), CUDA_PATH (default /usr/local/cuda),
# PYTHON (default python3), PTXAS (default: the one in $PYTHON's nvidia.cuda_nvcc
# package, pip-installed into $PYTHON if missing), SM52_ARCH (default sm_52).
# Compiler warnings fail the check (STYLE.md: warnings are errors in CI), with
# the project's warning set (-Wall -Wextra -Wno-unused-parameter).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

CLANGXX=${CLANGXX:-clang++-22}
CUDA_PATH=${CUDA_PATH:-/usr/local/cuda}
ARCH=${SM52_ARCH:-sm_52}
PTXAS_PKG=nvidia-cuda-nvcc-cu12==12.9.86
PYTHON=${PYTHON:-python3}

die() {
        echo "sm52-check: error: $*" >&2
        exit 1
}

command -v "$CLANGXX" >/dev/null 2>&1 ||
        die "$CLANGXX not found; install it first (Debian: apt-get install clang-22, as .ci/run does)"
[ -f "$CUDA_PATH/include/cuda_runtime.h" ] ||
        die "no CUDA headers at $CUDA_PATH/include (set CUDA_PATH)"

find_ptxas() {
        "$PYTHON" - <<'EOF' 2>/dev/null
import os
import nvidia.cuda_nvcc as m
for d in list(getattr(m, "__path__", [])) + [os.path.dirname(getattr(m, "__file__", "") or "")]:
    p = os.path.join(d, "bin", "ptxas")
    if d and os.access(p, os.X_OK):
        print(p)
        break
EOF
}

if [ -z "${PTXAS:-}" ]; then
        PTXAS=$(find_ptxas || true)
        if [ -z "$PTXAS" ]; then
                echo "sm52-check: ptxas not found; pip-installing $PTXAS_PKG"
                "$PYTHON" -m pip install --quiet --disable-pip-version-check "$PTXAS_PKG" ||
                        die "could not install $PTXAS_PKG ($PYTHON -m pip install $PTXAS_PKG)"
                PTXAS=$(find_ptxas || true)
        fi
fi
{ [ -n "$PTXAS" ] && [ -x "$PTXAS" ]; } || die "no ptxas (set PTXAS, or $PYTHON -m pip install $PTXAS_PKG)"

CUOBJDUMP=""
if [ -x "$CUDA_PATH/bin/cuobjdump" ]; then
        CUOBJDUMP="$CUDA_PATH/bin/cuobjdump"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/sm52-check.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

echo "sm52-check: $("$CLANGXX" --version | head -n 1)"
echo "sm52-check: $("$PTXAS" --version | tail -n 1) ($PTXAS)"
echo "sm52-check: CUDA headers: $CUDA_PATH/include, target $ARCH"

mapfile -t files < <(find cuda -name '*.cu' -type f | LC_ALL=C sort)
[ "${#files[@]}" -gt 0 ] || die "no .cu files under cuda/"

failed=()
for f in "${files[@]}"; do
        base=$tmp/$(echo "$f" | tr '/' '_')
        echo "== $f"
        if ! "$CLANGXX" -x cuda --cuda-gpu-arch="$ARCH" --cuda-device-only -S -O3 \
                --cuda-path="$CUDA_PATH" -Wno-unknown-cuda-version -Wall -Wextra -Wno-unused-parameter \
                -I include -I daemon -I . "$f" -o "$base.ptx" 2>"$base.clang.log"; then
                cat "$base.clang.log" >&2
                echo "sm52-check: FAIL $f: clang could not compile it for $ARCH" >&2
                failed+=("$f")
                continue
        fi
        # clang's own warnings (not the CUDA-version one) still fail the check
        if [ -s "$base.clang.log" ]; then
                cat "$base.clang.log" >&2
                echo "sm52-check: FAIL $f: clang warnings" >&2
                failed+=("$f")
                continue
        fi
        if ! grep -Eq "^[[:space:]]*\.target[[:space:]]+$ARCH([[:space:],]|\$)" "$base.ptx"; then
                echo "sm52-check: FAIL $f: the PTX does not say .target $ARCH:" >&2
                grep -E '^[[:space:]]*\.target' "$base.ptx" >&2 || true
                failed+=("$f")
                continue
        fi
        if ! "$PTXAS" -arch="$ARCH" -O3 -v "$base.ptx" -o "$base.cubin" >"$base.ptxas.log" 2>&1; then
                cat "$base.ptxas.log" >&2
                echo "sm52-check: FAIL $f: ptxas rejected the PTX for $ARCH" >&2
                failed+=("$f")
                continue
        fi
        # One line per kernel: its (demangled where possible) name and resources.
        kernel=""
        while IFS= read -r line; do
                case "$line" in
                *"Compiling entry function"*)
                        kernel=$(echo "$line" | sed -E "s/.*entry function '([^']*)'.*/\1/")
                        if command -v c++filt >/dev/null 2>&1; then
                                kernel=$(echo "$kernel" | c++filt)
                        fi
                        ;;
                *"Used "*)
                        echo "   $f: $kernel: ${line#ptxas info    : }"
                        ;;
                esac
        done <"$base.ptxas.log"
        # The cubin's ELF header: e_machine 190 (EM_CUDA), SM version in the low
        # byte of e_flags (0x34 = 52).
        machine=$(od -A n -t u2 -j 18 -N 2 "$base.cubin" | tr -d ' ')
        flags=$(od -A n -t u4 -j 48 -N 4 "$base.cubin" | tr -d ' ')
        if [ "$machine" != 190 ] || [ "sm_$((flags & 0xff))" != "$ARCH" ]; then
                echo "sm52-check: FAIL $f: the cubin is not $ARCH code (e_machine $machine, e_flags $flags)" >&2
                failed+=("$f")
                continue
        fi
        if [ -n "$CUOBJDUMP" ] && ! "$CUOBJDUMP" -sass "$base.cubin" >"$base.sass" 2>&1; then
                cat "$base.sass" >&2
                echo "sm52-check: FAIL $f: cuobjdump cannot read the cubin" >&2
                failed+=("$f")
                continue
        fi
        echo "   $f: OK ($ARCH cubin, ELF e_flags sm_$((flags & 0xff)), $(stat -c %s "$base.cubin") bytes)"
done

if [ "${#failed[@]}" -gt 0 ]; then
        echo "sm52-check: ${#failed[@]} of ${#files[@]} file(s) failed: ${failed[*]}" >&2
        exit 1
fi
echo "sm52-check: all ${#files[@]} .cu file(s) compiled to $ARCH machine code"
