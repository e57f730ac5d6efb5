#!/bin/sh
# run-fuzz.sh - runs one libFuzzer target for a time box (or a number of runs) from its
# checked-in seeds, without writing into the source tree: the seeds (text; *.hex files are
# hex dumps of binary inputs, turned into bytes here) are copied into a temporary corpus
# that the fuzzer grows and that is deleted afterwards. A crash leaves its input in
# $M40_FUZZ_ARTIFACTS (default: the current directory) and fails the run.
#
#   run-fuzz.sh TARGET SEED_DIR [libFuzzer options...]
set -eu
target=$1 seeds=$2
shift 2
corpus=$(mktemp -d "${TMPDIR:-/tmp}/m40-fuzz.XXXXXX")
trap 'rm -rf "$corpus"' EXIT INT TERM
for f in "$seeds"/*; do
        [ -f "$f" ] || continue
        case $f in
        *.hex) perl -ne 's/#.*//; s/\s+//g; print pack("H*", $_)' "$f" >"$corpus/$(basename "$f" .hex)" ;;
        *) cp "$f" "$corpus/" ;;
        esac
done
art=${M40_FUZZ_ARTIFACTS:-.}
exec_status=0
# -error_exitcode=1: libFuzzer's default for a finding, 77, is meson's "skipped"
"$target" -artifact_prefix="$art/" -error_exitcode=1 -print_final_stats=1 "$@" "$corpus" ||
        exec_status=$?
exit $exec_status
