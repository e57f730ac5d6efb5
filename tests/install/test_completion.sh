#!/usr/bin/env bash
# test_completion.sh - m40ctl's bash completion (client/m40ctl.bash-completion) under
# bash-completion, driven as bash drives it (COMP_WORDS, COMP_CWORD, then _m40ctl):
#   - `m40ctl <TAB>` offers exactly the commands of `m40ctl help`; `m40ctl --<TAB>` its
#     options (--help, --version);
#   - `m40ctl submit --<TAB>` offers every option of `m40ctl submit --help` and nothing
#     else, and so for run, status and show; `m40ctl submit --max<TAB>` only --max-tokens;
#   - `m40ctl status --socket <TAB>` completes files, `m40ctl submit --temp <TAB>` nothing,
#     `m40ctl show <TAB>` offers *.gguf files and directories, not other files
#     (bash shows the directories with a /: compopt -o filenames).
#
# Usage: test_completion.sh COMPLETION_FILE M40CTL MODELS_DIR
# Exit 0 pass, 1 fail, 77 without bash-completion (Debian: bash-completion).
set -uo pipefail

comp=$(realpath "$1") m40ctl=$(realpath "$2")
bc=/usr/share/bash-completion/bash_completion
[ -f "$bc" ] || { echo "SKIP: no $bc (Debian: bash-completion)"; exit 77; }
work=$(mktemp -d /tmp/m40-comp.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/files/sub"
ln -s "$m40ctl" "$work/bin/m40ctl"
touch "$work/files/a.gguf" "$work/files/b.txt" "$work/files/c.sock"

# complete LINE: the candidates bash-completion offers for LINE (cursor at its end), one a
# line, sorted; in a fresh bash with only bash-completion and our file loaded.
complete_line() {
        (cd "$work/files" && PATH=$work/bin:$PATH bash --norc --noprofile -c '
                source "$1" && source "$2" || exit 1
                read -r -a COMP_WORDS <<<"$3"
                [[ $3 == *" " ]] && COMP_WORDS+=("")
                COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
                COMP_LINE=$3 COMP_POINT=${#3}
                _m40ctl m40ctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
                printf "%s\n" "${COMPREPLY[@]}"' _ "$bc" "$comp" "$1") | sed '/^$/d' | sort
}
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
expect() {   # expect LINE WANT (newline-separated, sorted)
        local got
        got=$(complete_line "$1")
        if [ "$got" = "$2" ]; then
                echo "ok: '$1<TAB>': $(tr '\n' ' ' <<<"$got")"
        else
                fail "'$1<TAB>': got [$(tr '\n' ' ' <<<"$got")], want [$(tr '\n' ' ' <<<"$2")]"
        fi
}
help_options() {   # the options "$@" --help lists
        "$m40ctl" "$@" | awk '/^ +-/ { for (i = 1; i <= NF; i++) { w = $i; sub(/,$/, "", w)
                if (w !~ /^--?[A-Za-z][A-Za-z0-9-]*$/) break; print w } }' | sort -u
}

cmds=$("$m40ctl" help | awk '/^Commands:/ { on = 1; next } on && /^$/ { exit }
        on && /^  [a-z]/ { print $1 }' | sort)
grep -qx submit <<<"$cmds" && grep -qx status <<<"$cmds" || fail "m40ctl help lists no commands"
expect "m40ctl " "$cmds"
expect "m40ctl s" "$(grep '^s' <<<"$cmds")"
expect "m40ctl --" "$(help_options help | grep '^--')"
for c in submit run status show; do
        want=$(help_options "$c" --help | grep '^--')
        [ "$(wc -l <<<"$want")" -ge 2 ] || fail "m40ctl $c --help lists fewer than 2 options"
        expect "m40ctl $c --" "$want"
done
expect "m40ctl submit --max" "--max-tokens"
expect "m40ctl submit -n 5 --temp 0 --ign" "--ignore-eos"
expect "m40ctl submit --temp " ""
expect "m40ctl status --socket " "$(printf '%s\n' a.gguf b.txt c.sock sub | sort)"
expect "m40ctl show " "$(printf '%s\n' a.gguf sub | sort)"

[ $fails = 0 ] && { echo PASS; exit 0; }
echo "$fails check(s) failed"
exit 1
