"""roundtrip.py - detokenize(tokenize(s)) == s, streaming one token at a time (issue 4,
acceptance check 2), for every valid-UTF-8 corpus string on every model present; for the
invalid ones, the streamed text must still be valid UTF-8 (U+FFFD replacements).

Two losses belong to the vocabulary, not to us, and llama.cpp has them too; they are
counted apart: an SPM vocabulary writes spaces as U+2581, so a U+2581 in the text comes back
as a space; a byte no token stands for (SmolLM2 has none for 0x1D, so llama.cpp's
tokenizer drops it) comes back missing.

Usage: roundtrip.py M40_TOKENIZE.  Exit 0 pass, 1 fail, 77 when no model is present."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import models  # noqa: E402


def vocab_losses(tool, path):
    """(is SPM, the bytes no token stands for)."""
    info = subprocess.run([tool, "-m", path, "--info"], capture_output=True, text=True,
                          check=True).stdout
    have = set()
    for line in subprocess.run([tool, "-m", path, "--dump-pieces"], capture_output=True,
                               text=True, check=True).stdout.splitlines():
        piece = bytes.fromhex(line.split(" ")[2])
        if len(piece) == 1:
            have.add(piece[0])
    return "type=spm" in info, bytes(b for b in range(256) if b not in have)


def expected(t, spm, lost):
    if spm:
        t = t.replace("\u2581".encode(), b" ")
    return bytes(b for b in t if b not in lost)


def main():
    tool = sys.argv[1]
    ms = models.models()
    if not ms:
        print("skip: no model present")
        return 77
    texts = corpus.corpus()
    stdin = "".join(t.hex() + "\n" for t in texts).encode()
    fails = 0
    for name, path in ms:
        spm, lost = vocab_losses(tool, path)
        for flags in ([], ["--no-bos"]):
            r = subprocess.run([tool, "-m", path, "--roundtrip"] + flags, input=stdin,
                               capture_output=True, timeout=600)
            if r.returncode != 0:
                print(f"FAIL: {name} {flags}: m40-tokenize: {r.stderr.decode(errors='replace')}")
                return 1
            out = r.stdout.decode().split("\n")
            n_valid = n_ok = n_clean = n_lossy = 0
            for i, t in enumerate(texts):
                back = bytes.fromhex(out[i])
                if corpus.is_valid_utf8(t):
                    n_valid += 1
                    if back == t:
                        n_ok += 1
                    elif back == expected(t, spm, lost):
                        n_lossy += 1
                    else:
                        fails += 1
                        if fails < 20:
                            print(f"FAIL: {name} {flags} #{i}: {t!r} came back as {back!r}")
                elif corpus.is_valid_utf8(back):
                    n_clean += 1
                else:
                    fails += 1
                    print(f"FAIL: {name} {flags} #{i}: invalid UTF-8 escaped: {back!r}")
            print(f"{name} {' '.join(flags) or 'bos'}: {n_ok}/{n_valid} valid strings round-trip "
                  f"exactly, {n_lossy} more up to the vocabulary's own losses; "
                  f"{n_clean}/{len(texts) - n_valid} invalid ones stream as valid UTF-8")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
