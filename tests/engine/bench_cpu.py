#!/usr/bin/env python3
"""bench_cpu.py - decode speed of the CPU engine (m40-gen, both activation modes) beside
llama.cpp (llama-cpp-python) on the same files, threads and prompt: acceptance 4 of
issue 3. A benchmark, not a test: it prints a table (and --json) and always exits 0
unless something fails to run; the lead copies the figures into tests/bench/RESULTS.md.

  bench_cpu.py [--threads 1,2] [--runs 5] [--tokens 64] [--models smollm2,1b]
               [--quiet-below F] [--quiet-wait S] [--json FILE] M40_GEN MKMODEL SRCDIR

Models: smollm2 = SmolLM2-135M-Instruct Q4_1 (tests/fetch-models.sh); 1b = the 1B shape
(m40-mkmodel --preset 1b --type Q4_0), written once into $M40_MODEL_CACHE (default
~/.cache/m40-llm/models). Each run: a 16-token prompt, then --tokens greedy tokens;
the speed is (tokens - 1) / (time after the first token), i.e. decode only, as m40-gen
--stats reports it. Rounds interleave the engines (m40 ggml, m40 f32, llama.cpp) so
that a change of load hits all of them. Before each run the machine's load is sampled:
the share of all CPUs busy during one second (other people's work: nothing of ours runs
then) and the 1-minute load average; with --quiet-below F a run waits (up to
--quiet-wait seconds) until the busy share is below F. The table gives the median and
the best of the runs, the ratio to llama.cpp's median, and the load seen.

llama.cpp runs with its extra CPU buffer types disabled (they crash on this host; the
conformance tests do the same), n_threads = n_threads_batch = the thread count.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

PROMPT = [1, 504, 3458, 282, 253, 4, 100, 200, 300, 17, 42, 99, 7, 311, 1000, 2000]


def cpu_busy(interval=1.0):
    """Share (0..1) of all CPUs busy during interval seconds, from /proc/stat."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        return sum(v), idle
    t0, i0 = sample()
    time.sleep(interval)
    t1, i1 = sample()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


def wait_quiet(args):
    """Sample the load (waiting for quiet when asked); returns (busy share, loadavg1)."""
    deadline = time.time() + args.quiet_wait
    while True:
        busy = cpu_busy()
        if args.quiet_below is None or busy < args.quiet_below or time.time() > deadline:
            return busy, os.getloadavg()[0]


def model_path(name, args):
    cache = os.environ.get("M40_MODEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "m40-llm", "models")
    if name == "smollm2":
        r = subprocess.run([os.path.join(args.srcdir, "tests", "fetch-models.sh"), "smollm2"],
                           capture_output=True, text=True, env=dict(os.environ,
                                                                     PYTHON=sys.executable))
        return r.stdout.strip() if r.returncode == 0 else None
    path = os.path.join(cache, "mk-1b-q4_0.gguf")
    if not os.path.exists(path):
        os.makedirs(cache, exist_ok=True)
        r = subprocess.run([args.mkmodel, "-o", path, "--preset", "1b", "--type", "Q4_0",
                            "--quiet"])
        if r.returncode != 0:
            return None
    return path


def run_m40(args, model, threads, act):
    r = subprocess.run([args.gen, "-m", model, "--tokens", ",".join(map(str, PROMPT)), "-n",
                        str(args.tokens), "--ignore-eos", "--stats", "--threads",
                        str(threads), "--act", act], capture_output=True, text=True)
    m = re.search(r"generated (\d+) tokens, ([0-9.]+) tok/s after the first", r.stderr)
    if r.returncode != 0 or not m:
        raise RuntimeError("m40-gen failed: %s" % r.stderr.strip())
    return float(m.group(2))


class LlamaCpp:
    def __init__(self, model, threads):
        import numpy as np
        import llama_cpp
        import llama_cpp.llama_cpp as ll
        orig = ll.llama_model_default_params

        def params():
            p = orig()
            if hasattr(p, "use_extra_bufts"):
                p.use_extra_bufts = False
            return p
        ll.llama_model_default_params = params
        self.np = np
        self.llm = llama_cpp.Llama(model_path=model, n_ctx=512, verbose=False,
                                   n_threads=threads, n_threads_batch=threads)
        self.n_vocab = self.llm.n_vocab()

    def run(self, n):
        np, llm = self.np, self.llm

        def next_token():
            lg = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(self.n_vocab,))
            return int(np.argmax(lg))
        llm.reset()
        llm.eval(PROMPT)
        tok = next_token()
        t0 = time.perf_counter()
        for _ in range(n - 1):
            llm.eval([tok])
            tok = next_token()
        return (n - 1) / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--models", default="smollm2,1b")
    ap.add_argument("--quiet-below", type=float, default=None)
    ap.add_argument("--quiet-wait", type=float, default=120.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("gen")
    ap.add_argument("mkmodel")
    ap.add_argument("srcdir")
    args = ap.parse_args()
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        import llama_cpp  # noqa: F401
    except ImportError as e:
        print("skip: %s" % e)
        return 77
    rows = []
    print("cpu: %s, %d online; %s" % (open("/proc/cpuinfo").read().split("model name")[1]
                                      .split(":")[1].split("\n")[0].strip(), os.cpu_count(),
                                      time.strftime("%Y-%m-%d %H:%M:%S %Z")), flush=True)
    for name in args.models.split(","):
        model = model_path(name, args)
        if not model:
            print("%s: model not available, skipped" % name, flush=True)
            continue
        for threads in [int(t) for t in args.threads.split(",")]:
            lcpp = LlamaCpp(model, threads)
            res = {"m40 ggml": [], "m40 f32": [], "llama.cpp": []}
            for r in range(args.runs):
                for eng in res:
                    busy, load = wait_quiet(args)
                    if eng == "llama.cpp":
                        tps = lcpp.run(args.tokens)
                    else:
                        tps = run_m40(args, model, threads, eng.split()[1])
                    res[eng].append((tps, busy, load))
                    print("  %-8s t%d round %d %-9s %7.2f tok/s  (busy before %3.0f%%, load1 %.2f)"
                          % (name, threads, r + 1, eng, tps, 100 * busy, load), flush=True)
            del lcpp
            base = statistics.median(t for t, _, _ in res["llama.cpp"])
            for eng, runs in res.items():
                tps = [t for t, _, _ in runs]
                rows.append({"model": name, "threads": threads, "engine": eng,
                             "median": statistics.median(tps), "best": max(tps),
                             "ratio": statistics.median(tps) / base,
                             "busy_max": max(b for _, b, _ in runs),
                             "load1_max": max(lo for _, _, lo in runs), "runs": tps})
    print("\n%-8s %3s %-10s %9s %9s %8s %9s %7s" % ("model", "thr", "engine", "median", "best",
                                                  "vs llama", "busy max", "load1"))
    for r in rows:
        print("%-8s %3d %-10s %9.2f %9.2f %7.0f%% %8.0f%% %7.2f" %
              (r["model"], r["threads"], r["engine"], r["median"], r["best"],
               100 * r["ratio"], 100 * r["busy_max"], r["load1_max"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
