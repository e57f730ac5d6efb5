#!/usr/bin/env bash
# test_manpages.sh - the man pages cannot drift from the code: every option that a
# program's --help lists is documented, in bold (*--option*), in its page:
#   m40d(8)       every option of `m40d --help`;
#   m40ctl(1)     every command of `m40ctl help`, and every option of `m40ctl --help` and of
#                 `m40ctl COMMAND --help` for each command;
#   m40d.ini(5)   every section and key daemon/m40d/config.c compares against, and every
#                 key of the shipped m40d.ini, as *key* at the start of a line;
#   libm40(3)     every function declared in include/m40/m40.h and m40/error.h, as
#                 *name*();
#   m40-gateway(8) every option of `m40-gateway --help`, when GATEWAY is given.
# Each extraction must find something (an empty list fails: the check would pass
# vacuously), and every page must render with scdoc when scdoc is installed.
#
# Usage: test_manpages.sh SCD_DIR M40D M40CTL CONFIG_C M40D_INI M40_H ERROR_H [GATEWAY]
#   SCD_DIR: the pages after configure_file() (build/man), NAME.SECTION.scd
# Exit 0 pass, 1 fail.
set -uo pipefail

[ $# -ge 7 ] || { echo "usage: $0 SCD_DIR M40D M40CTL CONFIG_C M40D_INI M40_H ERROR_H [GATEWAY]" >&2; exit 2; }
dir=$1 m40d=$2 m40ctl=$3 config_c=$4 ini=$5 m40_h=$6 error_h=$7 gateway=${8:-}
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

# options HELP_TEXT: the options of lines that start (after spaces) with one, as in
# "  -n, --max-tokens N   ..." or "      --temp T ..."
options() {
        awk '/^ +-/ {
                for (i = 1; i <= NF; i++) {
                        w = $i
                        sub(/,$/, "", w)
                        if (w !~ /^--?[A-Za-z][A-Za-z0-9-]*$/)
                                break
                        print w
                }
        }' <<<"$1" | sort -u
}

# documented PAGE WHAT ITEM...: each ITEM must appear in bold (*ITEM*) in PAGE
documented() {
        local page=$dir/$1 what=$2 item n=0 missing=()
        shift 2
        [ -f "$page" ] || { fail "no $page"; return; }
        [ $# -gt 0 ] || { fail "$1: found no $what to check (the extraction is broken)"; return; }
        for item in "$@"; do
                n=$((n + 1))
                grep -qF -- "*$item*" "$page" || missing+=("$item")
        done
        if [ ${#missing[@]} -gt 0 ]; then
                fail "$(basename "$page"): $what not documented: ${missing[*]}"
        else
                echo "ok: $(basename "$page" .scd) documents all $n $what"
        fi
}

# ---- m40d(8) ----------------------------------------------------------------------------
help=$("$m40d" --help) || fail "m40d --help: exit $?"
mapfile -t opts < <(options "$help")
documented m40d.8.scd "options of m40d --help" "${opts[@]}"

# ---- m40ctl(1) --------------------------------------------------------------------------
help=$("$m40ctl" help) || fail "m40ctl help: exit $?"
mapfile -t cmds < <(awk '/^Commands:/ { on = 1; next } on && /^$/ { exit }
        on && /^  [a-z]/ { print $1 }' <<<"$help")
documented m40ctl.1.scd "commands of m40ctl help" "${cmds[@]}"
mapfile -t opts < <(options "$help")
documented m40ctl.1.scd "options of m40ctl --help" "${opts[@]}"
for c in "${cmds[@]}"; do
        [ "$c" = help ] && continue
        chelp=$("$m40ctl" "$c" --help) || { fail "m40ctl $c --help: exit $?"; continue; }
        mapfile -t opts < <(options "$chelp")
        documented m40ctl.1.scd "options of m40ctl $c --help" "${opts[@]}"
done

# ---- m40d.ini(5) ------------------------------------------------------------------------
mapfile -t sections < <(grep -o 'strcmp(section, "[a-z_]*")' "$config_c" |
        sed 's/.*"\(.*\)")/[\1]/' | sort -u)
documented m40d.ini.5.scd "sections of config.c" "${sections[@]}"
mapfile -t keys < <({ grep -o 'strcmp(key, "[a-z_]*")' "$config_c" | sed 's/.*"\(.*\)")/\1/'
        sed -n 's/^[[:space:]]*\([a-z_][a-z_0-9]*\)[[:space:]]*=.*/\1/p' "$ini"; } | sort -u)
documented m40d.ini.5.scd "keys of config.c and m40d.ini" "${keys[@]}"
# a key in bold at the start of a line is a key's own entry
for k in "${keys[@]}"; do
        grep -q "^\*$k\* =" "$dir/m40d.ini.5.scd" || fail "m40d.ini.5: no entry '*$k* = ...'"
done

# ---- libm40(3) --------------------------------------------------------------------------
mapfile -t funcs < <(cat "$m40_h" "$error_h" |
        grep -oE '^[a-z][a-z0-9_ ]*[ *](m40_[a-z0-9_]+)\(' | grep -oE 'm40_[a-z0-9_]+\($' |
        tr -d '(' | sort -u)
documented libm40.3.scd "functions of m40/m40.h and m40/error.h" "${funcs[@]}"

# ---- m40-gateway(8) ---------------------------------------------------------------------
if [ -n "$gateway" ]; then
        help=$("$gateway" --help) || fail "m40-gateway --help: exit $?"
        mapfile -t opts < <(options "$help")
        documented m40-gateway.8.scd "options of m40-gateway --help" "${opts[@]}"
else
        echo "note: no m40-gateway in this build: m40-gateway(8) not checked"
fi

# ---- scdoc renders every page -----------------------------------------------------------
if command -v scdoc >/dev/null; then
        for page in "$dir"/*.scd; do
                scdoc <"$page" >/dev/null 2>"$dir/.scdoc.err" ||
                        fail "scdoc $(basename "$page"): $(cat "$dir/.scdoc.err")"
        done
        rm -f "$dir/.scdoc.err"
else
        echo "note: no scdoc: rendering not checked"
fi

[ $fails = 0 ] && { echo PASS; exit 0; }
echo "$fails check(s) failed"
exit 1
