"""bench.py - tokenizer throughput of m40 beside llama.cpp on the text corpus (issue 4,
acceptance check 5). Usage: bench.py BENCH_TOKENIZE.

For each model present: MB/s through m40_vocab_tokenize (bench_tokenize, C) and through
llama.cpp's llama_tokenize (llama-cpp-python's low-level binding, one preallocated buffer;
the per-call ctypes cost, measured on empty strings, is subtracted from the per-string
figure). "per-string": one call per corpus string; "joined": the corpus as one text.
Prints a Markdown table. Exit 0, or 77 when llama_cpp or the models are missing."""
import ctypes
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus  # noqa: E402
import models  # noqa: E402

try:
    import llama_cpp
except ImportError:
    llama_cpp = None


def best_rate(fn, nbytes, rounds=5, min_t=0.3):
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        reps = 0
        while True:
            fn()
            reps += 1
            t = time.perf_counter() - t0
            if t >= min_t:
                break
        best = max(best, nbytes * reps / t / 1e6)
    return best


def llama_rates(path, texts, joined):
    cb = llama_cpp.llama_log_callback(lambda *a: None)
    llama_cpp.llama_log_set(cb, None)
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    vocab = llm._model.vocab
    cap = len(joined) + 16
    buf = (llama_cpp.llama_token * cap)()
    tok = llama_cpp.llama_tokenize

    def per_string():
        for t in texts:
            tok(vocab, t, len(t), buf, cap, False, False)

    def empty():
        for _ in texts:
            tok(vocab, b"", 0, buf, cap, False, False)

    nbytes = sum(map(len, texts))
    t_all = nbytes / best_rate(per_string, nbytes)      # seconds per pass (in MB units)
    t_empty = nbytes / best_rate(empty, nbytes)
    per = nbytes / max(t_all - t_empty, 1e-9)
    whole = best_rate(lambda: tok(vocab, joined, len(joined), buf, cap, False, False), len(joined))
    del cb
    return per, whole


def main():
    tool = sys.argv[1]
    ms = models.models()
    if not ms or llama_cpp is None:
        print("skip: llama_cpp or models missing")
        return 77
    texts = corpus.corpus()
    joined = b"".join(t + b"\n" for t in texts)
    stdin = "".join(t.hex() + "\n" for t in texts).encode()
    print(f"corpus: {len(texts)} strings, {len(joined)} bytes joined\n")
    print("| model | tokenizer | m40 per-string MB/s | llama.cpp per-string MB/s | "
          "m40 joined MB/s | llama.cpp joined MB/s | ratio (joined) |")
    print("|---|---|---|---|---|---|---|")
    for name, path in ms:
        out = subprocess.run([tool, path, "0"], input=stdin, capture_output=True, check=True,
                             text=False).stdout.decode().split("\n")
        ours = {line.split()[0]: float(line.split()[1]) for line in out if "MB/s" in line}
        per, whole = llama_rates(path, texts, joined)
        kind = "BPE" if name == "smollm2" else "SPM"
        print(f"| {name} | {kind} | {ours['per-string']:.2f} | {per:.2f} | {ours['joined']:.2f} "
              f"| {whole:.2f} | {ours['joined'] / whole:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
