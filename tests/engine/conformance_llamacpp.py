#!/usr/bin/env python3
"""conformance_llamacpp.py - the CPU engine (through m40-gen) against llama.cpp (PyPI
llama-cpp-python), acceptance 1 of issue 3, in both activation modes (engine.h):
ggml (M40_ACT_GGML, the default: activations converted as ggml's CPU backend does) and
f32 (M40_ACT_F32: float activations, the specification of the CUDA kernels).

  conformance_llamacpp.py stories M40_GEN MODEL     stories260K (F32), 10 prompts, both
        modes: greedy 64 tokens identical to llama.cpp's, first-step logits within
        1e-3 * max|logit|.
  conformance_llamacpp.py smollm2 M40_GEN MODEL     SmolLM2-135M-Instruct Q4_1, 10 prompts,
        greedy 64 tokens. ggml mode, issue 3's rule: identical to llama.cpp's, except
        where llama.cpp's own top-2 logit gap at the first differing step is < 0.05
        (reported). f32 mode: identical, no exception, to llama.cpp on the same weights
        dequantized to F32 (llama_model_quantize to ALL_F32), where llama.cpp quantizes
        nothing either; against the Q4_1 file itself f32 mode is only reported. With a
        llama.cpp built without AVX-512 (see below) ggml mode's attention sums in another
        order than that llama.cpp's, and its divergences are reported, not failed.
  conformance_llamacpp.py types M40_GEN MKMODEL     every weight type (small m40-mkmodel
        files, arch llama; qwen2 for F16 and Q4_K_M): last-position logits after a
        10-token prompt within the tolerances below, same argmax.

Tolerances of the types check, max |logit delta| / max|logit|:
  ggml mode vs llama.cpp run one token at a time (n_batch 1: every product is ggml's
      vec_dot kernel, which ggml mode reproduces):               TOL_GGML_DECODE (1e-6;
      measured: 0, bit-identical, for every type). ggml mode sums float products (F32,
      F16 weights; attention on the f16 KV cache) in the order of ggml's AVX-512 kernels
      (daemon/engine/ggml_inl.h); a llama.cpp built for a CPU without AVX-512 (its
      system info lacks "AVX512 = 1") sums them 8 lanes wide instead, so there the F32
      and F16 types are held to TOL[type] and the run says so. The integer-sum types
      stay bit-identical on any build.
  ggml mode vs llama.cpp with its default batching (the prompt's products go through
      llamafile/tiled GEMMs that sum in another order, and a flipped 8-bit rounding
      can cascade):                                                TOL[type]
  f32 mode vs llama.cpp on the file itself (llama.cpp quantizes activations, f32 mode
      does not):                                                  TOL[type]
  f32 mode vs llama.cpp on the dequantized F32 file:             TOL_DEQUANT (2e-3)
An argmax may differ only where llama.cpp's own top-2 gap is below twice the tolerance.

llama.cpp's extra CPU buffer types (AMX, repacked weights) crash on this host; they are
disabled, so llama.cpp runs its plain vec_dot kernels. Both engines run one thread
(meson runs conformance tests side by side on 2 cores; spinning thread pools collapse
when oversubscribed). Exit 0 pass, 1 fail, 77 when llama_cpp or a model is missing.
"""
import ctypes
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numpy as np
    import llama_cpp
    import llama_cpp.llama_cpp as ll
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

PROMPTS = [
    "Once upon a time",
    "The little dog",
    "One day, a girl named Lily",
    "Tom and his mom went to the park",
    "The sun was hot and",
    "There was a big red ball",
    "The cat said",
    "In a small house lived",
    "The bird flew over the tree and",
    "Ben wanted to",
]

# max |logit delta| / max|logit| against llama.cpp with its default batching: f32 mode
# (activation quantization on llama.cpp's side only) and ggml mode (summation order of the
# batched GEMMs). Measured worst over seeds ~0.8x these.
TOL = {"F32": 1e-3, "F16": 4e-3, "BF16": 2e-2, "Q8_0": 5e-2, "Q4_0": 5e-2, "Q4_1": 5e-2,
       "Q5_0": 5e-2, "Q5_1": 5e-2, "Q4_K": 6e-2, "Q5_K": 6e-2, "Q6_K": 6e-2, "Q4_K_M": 6e-2}
TOL_DEQUANT = 2e-3     # f32 mode against llama.cpp on the dequantized F32 file
TOL_GGML_DECODE = 1e-6  # ggml mode against llama.cpp one token at a time
FLOAT_SUM_TYPES = ("F32", "F16")  # products summed in float by ggml's vec_dot
AVX512 = True  # set by main(): llama_avx512()


def llama_avx512():
    """Whether this llama.cpp's CPU backend was built with AVX-512 (the float summation
    order ggml mode reproduces)."""
    try:
        return b"AVX512 = 1" in ll.llama_print_system_info()
    except Exception:  # an API without it: assume the order ggml mode was written for
        return True
QWEN2_TYPES = ("F16", "Q4_K_M")
THREADS = 1

failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg, flush=True)


def no_extra_buffer_types():
    """The CPU backend's extra buffer types (AMX, repacked layouts) crash llama_decode on
    this host; disabling them leaves the plain vec_dot kernels (as tests/conformance)."""
    orig = ll.llama_model_default_params

    def params():
        p = orig()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p
    ll.llama_model_default_params = params


def load(path, n_ctx=256, n_batch=512):
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
                           logits_all=True, verbose=False, n_threads=THREADS,
                           n_threads_batch=THREADS)


def ref_greedy(llm, ids, n):
    """llama.cpp greedy: tokens, each step's top-2 gap, the first step's logits."""
    llm.reset()
    llm.eval(ids)
    out, gaps, first = [], [], None
    for i in range(n):
        lg = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        if first is None:
            first = lg.copy()
        top2 = np.partition(lg, -2)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        t = int(np.argmax(lg))
        out.append(t)
        llm.eval([t])
    return out, gaps, first


def m40_gen(gen, model, prompts, n, act, logits=False):
    """Every prompt through one m40-gen process: token lists, and with logits=True the
    logits that produced each prompt's last token (one row per prompt)."""
    args = [gen, "-m", model, "--tokens", ";".join(",".join(map(str, p)) for p in prompts),
            "-n", str(n), "--print-tokens", "--ignore-eos", "--act", act,
            "--threads", str(THREADS)]
    with tempfile.TemporaryDirectory() as d:
        lp = os.path.join(d, "logits.bin")
        if logits:
            args += ["--logits-out", lp]
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode != 0:
            fail("m40-gen --act %s failed: %s" % (act, r.stderr.strip()))
            return [[] for _ in prompts], None
        toks = [[int(x) for x in line.split()] for line in r.stdout.strip().split("\n")]
        lg = np.fromfile(lp, dtype=np.float32).reshape(len(prompts), -1) if logits else None
    return toks, lg


def dequantize_to_f32(src, dst):
    p = ll.llama_model_quantize_default_params()
    p.ftype = 0  # LLAMA_FTYPE_ALL_F32
    p.allow_requantize = True
    p.nthread = THREADS
    return ll.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p)) == 0


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def rel(a, b):
    return float(np.abs(a - b).max()) / float(np.abs(b).max())


def check_stories(gen, model):
    llm = load(model)
    prompts = [llm.tokenize(p.encode(), add_bos=True) for p in PROMPTS]
    refs = [ref_greedy(llm, ids, 64) for ids in prompts]
    for act in ("ggml", "f32"):
        mine, _ = m40_gen(gen, model, prompts, 64, act)
        _, lg = m40_gen(gen, model, prompts, 1, act, logits=True)
        for i, p in enumerate(PROMPTS):
            ref, _, ref0 = refs[i]
            at = first_diff(ref, mine[i])
            d = rel(lg[i], ref0) if lg is not None else float("inf")
            print("stories %-4s %-36r greedy64 %s  logits max|d|/max|l| %.2e" %
                  (act, p, "identical" if at is None else "DIFFER at %s" % at, d), flush=True)
            if at is not None:
                fail("stories260K %s %r: continuation differs at step %s" % (act, p, at))
            if d > 1e-3:
                fail("stories260K %s %r: logits differ by %.3g of max|logit|" % (act, p, d))


def check_smollm2(gen, model):
    llm = load(model, 512)
    prompts = [llm.tokenize(p.encode(), add_bos=True) for p in PROMPTS]
    refs = [ref_greedy(llm, ids, 64) for ids in prompts]
    del llm
    mine = {act: m40_gen(gen, model, prompts, 64, act)[0] for act in ("ggml", "f32")}
    count = {}
    for act in ("ggml", "f32"):
        for p, (ref, gaps, _), toks in zip(PROMPTS, refs, mine[act]):
            at = first_diff(ref, toks)
            if at is None:
                kind, msg = "identical", "identical"
            elif gaps[at] < 0.05:
                kind = "exempt"
                msg = "differs at step %d, llama.cpp's top-2 gap %.4f < 0.05 (allowed)" % (
                    at, gaps[at])
            else:
                kind = "beyond"
                msg = "differs at step %d, llama.cpp's top-2 gap %.4f >= 0.05" % (at, gaps[at])
            count[act, kind] = count.get((act, kind), 0) + 1
            print("smollm2 q4_1 %-4s %-36r greedy64 %s" % (act, p, msg), flush=True)
            if act == "ggml" and kind == "beyond" and AVX512:
                fail("SmolLM2 Q4_1 %r: ggml mode differs at step %d where llama.cpp's top-2 "
                     "gap is %.4f" % (p, at, gaps[at]))
        print("smollm2 q4_1 %s: %d identical, %d differ after a top-2 gap < 0.05, %d after a "
              "larger gap%s" % (act, count.get((act, "identical"), 0),
                                count.get((act, "exempt"), 0), count.get((act, "beyond"), 0),
                                "" if act == "ggml" and AVX512 else
                                " (reported only: f32 mode does not quantize activations)"
                                if act == "f32" else " (reported only: this llama.cpp sums "
                                "float products in another order, see the file comment)"),
              flush=True)
    with tempfile.TemporaryDirectory() as d:
        f32 = os.path.join(d, "deq.gguf")
        if not dequantize_to_f32(model, f32):
            fail("llama_model_quantize to F32 failed")
            return
        llm = load(f32, 512)
        for p, ids, toks in zip(PROMPTS, prompts, mine["f32"]):
            ref, gaps, _ = ref_greedy(llm, ids, 64)
            at = first_diff(ref, toks)
            print("smollm2 f32  vs llama.cpp on dequantized F32 %-36r greedy64 %s" %
                  (p, "identical" if at is None else "DIFFER at %d (gap %.4f)" % (at, gaps[at])),
                  flush=True)
            if at is not None:
                fail("SmolLM2 f32 mode vs dequantized F32 %r: differs at step %d" % (p, at))


def last_logits(path, ids, n_batch=512):
    llm = load(path, 256, n_batch)
    llm.reset()
    llm.eval(ids)
    lg = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    del llm
    return lg


def compare(label, mine, ref, tol):
    """One logits comparison: tolerance and argmax (near ties excepted)."""
    d = rel(mine, ref)
    top2 = np.sort(ref)[-2:]
    gap = float(top2[1] - top2[0])
    same = int(np.argmax(ref)) == int(np.argmax(mine))
    tie = not same and gap < 2 * tol * float(np.abs(ref).max())
    print("%-50s max|d|/max|l| %.2e (tol %.0e)  argmax %s%s" %
          (label, d, tol, "same" if same else "differs",
           " (near tie: llama.cpp top-2 gap %.4f)" % gap if tie else ""), flush=True)
    if d > tol:
        fail("%s: logits differ by %.3g of max|logit| > %.0e" % (label, d, tol))
    if not same and not tie:
        fail("%s: argmax differs" % label)


def check_types(gen, mkmodel):
    ids = [1, 5, 100, 200, 300, 17, 42, 99, 7, 311]
    cases = [("llama", t) for t in TOL] + [("qwen2", t) for t in QWEN2_TYPES]
    with tempfile.TemporaryDirectory() as d:
        for arch, typ in cases:
            path = os.path.join(d, "m_%s_%s.gguf" % (arch, typ))
            r = subprocess.run([mkmodel, "-o", path, "--preset", "tiny", "--layers", "2",
                                "--arch", arch, "--type", typ, "--quiet", "--seed", "3"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                fail("m40-mkmodel --arch %s --type %s: %s" % (arch, typ, r.stderr.strip()))
                continue
            mine = {act: m40_gen(gen, path, [ids], 1, act, logits=True)[1]
                    for act in ("ggml", "f32")}
            if mine["ggml"] is None or mine["f32"] is None:
                continue
            name = "%s %s" % (arch, typ)
            ref_decode = last_logits(path, ids, n_batch=1)
            ref_batch = last_logits(path, ids)
            tol_decode = TOL_GGML_DECODE
            if typ in FLOAT_SUM_TYPES and not AVX512:
                tol_decode = TOL[typ]
            compare("%s ggml vs llama.cpp one token at a time" % name, mine["ggml"][0],
                    ref_decode, tol_decode)
            compare("%s ggml vs llama.cpp batched" % name, mine["ggml"][0], ref_batch,
                    TOL[typ])
            compare("%s f32  vs llama.cpp batched" % name, mine["f32"][0], ref_batch, TOL[typ])
            if typ != "F32":
                deq = os.path.join(d, "deq.gguf")
                if not dequantize_to_f32(path, deq):
                    fail("%s: dequantize failed" % name)
                    continue
                compare("%s f32  vs llama.cpp on dequantized F32" % name, mine["f32"][0],
                        last_logits(deq, ids), TOL_DEQUANT)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    mode, gen, path = sys.argv[1:]
    if not os.path.exists(path):
        print("skip: %s not present" % path)
        return 77
    no_extra_buffer_types()
    global AVX512
    AVX512 = llama_avx512()
    if not AVX512:
        print("note: this llama.cpp has no AVX-512 kernels: F32/F16 products sum in another "
              "order than ggml mode's, held to the batched tolerance one token at a time")
    {"stories": check_stories, "smollm2": check_smollm2, "types": check_types}[mode](gen, path)
    print("FAILED (%d)" % failures if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
