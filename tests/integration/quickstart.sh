#!/usr/bin/env bash
# quickstart.sh - the README's first command after setup: fetches the default model
# (SmolLM2-135M-Instruct, tests/fetch-models.sh), starts m40d on it as the current user with
# a private socket, opens `m40ctl run`, and stops m40d when the chat ends.
#
# Usage: tests/integration/quickstart.sh [MODEL.gguf] [-- m40ctl run options]
# Environment: BUILD (default build/), the meson build directory.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${BUILD:-build}
model=
if [ $# -gt 0 ] && [ "$1" != "--" ]; then model=$1; shift; fi
[ "${1:-}" = "--" ] && shift
[ -n "$model" ] || model=$(tests/fetch-models.sh smollm2)
for exe in "$build/daemon/m40d/m40d" "$build/client/m40ctl"; do
        [ -x "$exe" ] || { echo "quickstart: $exe is missing: run 'bash .ci/setup' first" >&2; exit 1; }
done

dir=$(mktemp -d "${XDG_RUNTIME_DIR:-/tmp}/m40-quickstart.XXXXXX")
export M40_SOCKET=$dir/m40d.sock
cat > "$dir/m40d.ini" <<INI
[model]
path = $model
[server]
socket = $M40_SOCKET
group =
INI
"$build/daemon/m40d/m40d" -c "$dir/m40d.ini" 2> "$dir/m40d.log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 600); do
        "$build/client/m40ctl" status >/dev/null 2>&1 && break
        kill -0 "$pid" 2>/dev/null || { sed 's/^<[0-9]>//' "$dir/m40d.log" >&2; exit 1; }
        sleep 0.1
done
grep -h 'backend\|loaded' "$dir/m40d.log" | sed 's/^<[0-9]>/m40d: /' >&2
"$build/client/m40ctl" run "$@"
