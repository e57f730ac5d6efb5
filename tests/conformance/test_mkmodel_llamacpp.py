#!/usr/bin/env python3
# test_mkmodel_llamacpp.py - conformance of m40-mkmodel's files with llama.cpp.
#
# Usage: test_mkmodel_llamacpp.py PATH/TO/m40-mkmodel   (meson passes it; run with the
# Python that has llama-cpp-python, e.g. .venv/bin/python3).
#
# Checks, for every weight type (F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K
# Q4_K_M) on small tied and untied shapes:
#   1. without llama.cpp: the file parses as GGUF v3 with the expected tensor names,
#      shapes and per-tensor types (Q4_K_M rules and shape fallbacks recomputed here),
#      the same arguments give a byte-identical file whatever --threads is, and bad
#      arguments exit 2;
#   2. with llama.cpp (llama_cpp): the file loads, llama_model_n_params equals the
#      parameter count computed here from the shape, n_vocab equals --vocab, special
#      tokens and byte tokens are right, and a short eval gives finite, varied logits;
#   3. every tensor's bytes equal what ggml's own ggml_quantize_chunk() (libggml-base of
#      the installed llama_cpp) makes of the same weights taken from an F32 file of the
#      same seed: the quantizers are byte-exact to ggml; and for Q4_K_M, the file equals
#      (tensor types and bytes) what llama_model_quantize() makes of that F32 file.
# Exits 0 pass, 1 fail, 77 skip (llama_cpp cannot be imported; part 1 still must pass).

import ctypes
import os
import struct
import subprocess
import sys
import tempfile

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
         "Q4_K", "Q5_K", "Q6_K", "Q4_K_M"]
GGML = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q5_0": 6, "Q5_1": 7, "Q8_0": 8,
        "Q4_K": 12, "Q5_K": 13, "Q6_K": 14, "BF16": 30}
GGML_NAME = {v: k for k, v in GGML.items()}
BLOCK = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q4_0": (32, 18), "Q4_1": (32, 20),
         "Q5_0": (32, 22), "Q5_1": (32, 24), "Q8_0": (32, 34), "Q4_K": (256, 144),
         "Q5_K": (256, 176), "Q6_K": (256, 210)}
FTYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
         "Q4_K": 14, "Q5_K": 16, "Q6_K": 18, "Q4_K_M": 15, "BF16": 32}

# Shapes: K-quants apply to A and B (d, ffn multiples of 256); C makes them fall back.
SHAPES = {
    "A": dict(layers=2, dim=256, heads=4, kv_heads=2, ffn=512, vocab=512, tied=True),
    "B": dict(layers=2, dim=256, heads=4, kv_heads=2, ffn=512, vocab=512, tied=False),
    "C": dict(layers=3, dim=192, heads=3, kv_heads=1, ffn=512, vocab=300, tied=True),
    "D": dict(layers=8, dim=256, heads=2, kv_heads=1, ffn=256, vocab=260, tied=False),
}
SEED = 7

failures = []
quiet_log = None


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def mkmodel(exe, path, shape, typ, seed=SEED, threads=None, extra=()):
    s = SHAPES[shape]
    args = [exe, "-o", path, "--quiet", "--layers", str(s["layers"]), "--dim", str(s["dim"]),
            "--heads", str(s["heads"]), "--kv-heads", str(s["kv_heads"]),
            "--ffn", str(s["ffn"]), "--vocab", str(s["vocab"]),
            "--tied" if s["tied"] else "--untied", "--type", typ, "--seed", str(seed)]
    if threads:
        args += ["--threads", str(threads)]
    subprocess.run(args + list(extra), check=True)


# ---- an independent GGUF reader ----

def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n]
        pos += n
        return s.decode("utf-8")

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q",
              11: "q", 12: "d"}

    def value(t):
        if t in scalar:
            return take(scalar[t])
        if t == 8:
            return string()
        if t == 9:
            et, n = take("I"), take("Q")
            return [value(et) for _ in range(n)]
        raise ValueError("bad value type %d" % t)

    assert data[:4] == b"GGUF", "magic"
    pos = 4
    version, n_t, n_kv = take("I"), take("Q"), take("Q")
    kv = {}
    for _ in range(n_kv):
        k = string()
        kv[k] = value(take("I"))
    tensors = []
    for _ in range(n_t):
        name = string()
        nd = take("I")
        ne = [take("Q") for _ in range(nd)]
        tensors.append(dict(name=name, ne=ne, type=take("I"), offset=take("Q")))
    align = kv.get("general.alignment", 32)
    base = (pos + align - 1) // align * align
    for t in tensors:
        blk, size = BLOCK[GGML_NAME[t["type"]]]
        rows = 1
        for n in t["ne"][1:]:
            rows *= n
        t["nbytes"] = t["ne"][0] // blk * size * rows
        t["data"] = data[base + t["offset"]: base + t["offset"] + t["nbytes"]]
        assert len(t["data"]) == t["nbytes"], "tensor %s runs past the file" % t["name"]
        assert t["offset"] % align == 0
    return version, kv, tensors


# ---- what the file should contain, computed from the shape ----

def expected_tensors(shape, typ):
    s = SHAPES[shape]
    d, f, n, v = s["dim"], s["ffn"], s["layers"], s["vocab"]
    kv = s["kv_heads"] * (d // s["heads"])
    out = [("token_embd.weight", [d, v], "embd")]
    for i in range(n):
        b = "blk.%d." % i
        out += [(b + "attn_norm.weight", [d], "norm"), (b + "attn_q.weight", [d, d], "mat"),
                (b + "attn_k.weight", [d, kv], "mat"), (b + "attn_v.weight", [d, kv], "v"),
                (b + "attn_output.weight", [d, d], "mat"), (b + "ffn_norm.weight", [d], "norm"),
                (b + "ffn_gate.weight", [d, f], "mat"), (b + "ffn_up.weight", [d, f], "mat"),
                (b + "ffn_down.weight", [f, d], "down")]
    out.append(("output_norm.weight", [d], "norm"))
    if not s["tied"]:
        out.append(("output.weight", [d, v], "output"))

    def more_bits(i):  # llama.cpp's use_more_bits()
        return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2

    def fallback(t, ne0):  # llama.cpp's tensor_type_fallback()
        if ne0 % BLOCK[t][0] == 0:
            return t
        t = {"Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}.get(t, t)
        return t if ne0 % BLOCK[t][0] == 0 else "F16"

    res = []
    for name, ne, kind in out:
        if kind == "norm":
            t = "F32"
        elif typ != "Q4_K_M":
            t = typ
        elif kind == "output" or (kind == "embd" and s["tied"]):
            t = "Q8_0" if ne[0] % 256 else "Q6_K"
        elif kind in ("v", "down"):
            t = "Q6_K" if more_bits(int(name.split(".")[1])) else "Q4_K"
        else:
            t = "Q4_K"
        res.append((name, ne, fallback(t, ne[0])))
    return res


def expected_params(shape):
    s = SHAPES[shape]
    d, f, v = s["dim"], s["ffn"], s["vocab"]
    kv = s["kv_heads"] * (d // s["heads"])
    per_layer = 2 * d + 2 * d * d + 2 * d * kv + 3 * d * f
    return v * d * (1 if s["tied"] else 2) + d + s["layers"] * per_layer


def check_structure(path, shape, typ):
    version, kv, tensors = read_gguf(path)
    s = SHAPES[shape]
    want = expected_tensors(shape, typ)
    got = [(t["name"], t["ne"], GGML_NAME[t["type"]]) for t in tensors]
    if version != 3:
        fail("%s: version %d" % (path, version))
    if got != want:
        for g, w in zip(got, want):
            if g != w:
                fail("%s %s: tensor %s, want %s" % (shape, typ, g, w))
                break
        else:
            fail("%s %s: %d tensors, want %d" % (shape, typ, len(got), len(want)))
    checks = {
        "general.architecture": "llama", "general.file_type": FTYPE[typ],
        "general.alignment": 32, "llama.block_count": s["layers"],
        "llama.embedding_length": s["dim"], "llama.feed_forward_length": s["ffn"],
        "llama.attention.head_count": s["heads"],
        "llama.attention.head_count_kv": s["kv_heads"],
        "llama.rope.dimension_count": s["dim"] // s["heads"], "llama.vocab_size": s["vocab"],
        "tokenizer.ggml.model": "llama", "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_eos_token": False,
    }
    for k, v in checks.items():
        if kv.get(k) != v:
            fail("%s %s: %s = %r, want %r" % (shape, typ, k, kv.get(k), v))
    toks = kv["tokenizer.ggml.tokens"]
    ttype = kv["tokenizer.ggml.token_type"]
    if (len(toks) != s["vocab"] or len(set(toks)) != len(toks) or
            toks[:3] != ["<unk>", "<s>", "</s>"] or toks[3 + 0x41] != "<0x41>" or
            ttype[:4] != [2, 3, 3, 6] or set(ttype[259:]) != {1} or
            len(kv["tokenizer.ggml.scores"]) != s["vocab"]):
        fail("%s %s: vocabulary metadata" % (shape, typ))
    return tensors


# ---- llama.cpp ----

def check_llama(llama_cpp, path, shape, typ):
    s = SHAPES[shape]
    llm = llama_cpp.Llama(model_path=path, vocab_only=False, n_ctx=64, logits_all=True,
                          verbose=False)
    n_params = llama_cpp.llama_model_n_params(llm.model)
    want = expected_params(shape)
    if n_params != want:
        fail("%s %s: llama.cpp counts %d parameters, want %d" % (shape, typ, n_params, want))
    if llm.n_vocab() != s["vocab"]:
        fail("%s %s: n_vocab %d, want %d" % (shape, typ, llm.n_vocab(), s["vocab"]))
    if llm.token_bos() != 1 or llm.token_eos() != 2:
        fail("%s %s: bos/eos %d/%d" % (shape, typ, llm.token_bos(), llm.token_eos()))
    if llm.detokenize([3 + ord("A")]) != b"A":
        fail("%s %s: byte token <0x41> detokenizes to %r" %
             (shape, typ, llm.detokenize([3 + ord("A")])))
    toks = llm.tokenize(b"a b")
    if toks[0] != 1:
        fail("%s %s: tokenize did not add BOS: %r" % (shape, typ, toks))
    llm.eval(toks + [s["vocab"] - 1])
    logits = llm.scores[llm.n_tokens - 1]
    lo, hi = float(min(logits)), float(max(logits))
    if not (lo == lo and hi == hi and abs(lo) < 1e6 and abs(hi) < 1e6 and hi > lo):
        fail("%s %s: logits not finite and varied: min %r max %r" % (shape, typ, lo, hi))
    print("ok %-6s shape %s (%s): params %d vocab %d logits %.3f..%.3f" %
          (typ, shape, "tied" if s["tied"] else "untied", n_params, llm.n_vocab(), lo, hi),
          flush=True)
    del llm


def no_extra_buffer_types():
    """Load weights into plain CPU buffers. The CPU backend's extra buffer types (AMX and
    repacked Q4_0/Q8_0 layouts) crash in llama_decode on some hosts (this one has
    AMX_INT8), even for files llama.cpp quantized itself; they only change how weights
    are laid out in memory, not what is read from the file. M40_LLAMA_EXTRA_BUFTS=1 keeps
    them. Llama() takes no such argument, so its default model params are wrapped."""
    if os.environ.get("M40_LLAMA_EXTRA_BUFTS") == "1":
        return
    import llama_cpp.llama_cpp as ll
    orig = ll.llama_model_default_params

    def params():
        p = orig()
        if hasattr(p, "use_extra_bufts"):
            p.use_extra_bufts = False
        return p
    ll.llama_model_default_params = params


def ggml_lib(llama_cpp):
    d = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    for name in ("libggml-base.so", "libggml-base.so.0", "libggml.so"):
        p = os.path.join(d, name)
        if os.path.exists(p):
            lib = ctypes.CDLL(p)
            f = lib.ggml_quantize_chunk
            f.restype = ctypes.c_size_t
            f.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                          ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
            return f
    return None


def check_bytes(quantize_chunk, tensors, ref_tensors, shape, typ):
    ref = {t["name"]: t for t in ref_tensors}
    for t in tensors:
        src = ref[t["name"]]["data"]  # F32 weights of the same seed
        n_per_row = t["ne"][0]
        nrows = len(src) // 4 // n_per_row
        dst = ctypes.create_string_buffer(t["nbytes"])
        n = quantize_chunk(t["type"], src, dst, 0, nrows, n_per_row, None)
        if n != t["nbytes"] or dst.raw != t["data"]:
            at = next(i for i in range(t["nbytes"]) if dst.raw[i] != t["data"][i])
            fail("%s %s: %s (%s) differs from ggml_quantize_chunk at byte %d" %
                 (shape, typ, t["name"], GGML_NAME[t["type"]], at))
            return
    print("ok %-6s shape %s: all %d tensors byte-identical to ggml_quantize_chunk" %
          (typ, shape, len(tensors)), flush=True)


def check_llama_quantize(llama_cpp, path, tensors, ref, shape):
    """Q4_K_M as llama.cpp's own llama_model_quantize() makes it from the F32 file: the
    same type for every tensor and the same bytes."""
    global quiet_log
    if quiet_log is None:  # llama-quantize logs every fallback to stderr
        quiet_log = llama_cpp.llama_log_callback(lambda level, text, data: None)
        llama_cpp.llama_log_set(quiet_log, ctypes.c_void_p(0))
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = FTYPE["Q4_K_M"]
    p.nthread = 2
    out = path + ".llama-q4km"
    if llama_cpp.llama_model_quantize(ref.encode(), out.encode(), ctypes.byref(p)) != 0:
        fail("%s: llama_model_quantize failed" % shape)
        return
    theirs = {t["name"]: t for t in read_gguf(out)[2]}
    os.unlink(out)
    for t in tensors:
        o = theirs.get(t["name"])
        if o is None or o["type"] != t["type"] or o["ne"] != t["ne"]:
            fail("%s Q4_K_M: %s is %s, llama-quantize makes it %s" %
                 (shape, t["name"], GGML_NAME[t["type"]],
                  GGML_NAME.get(o["type"], o["type"]) if o else "absent"))
            return
        if o["data"] != t["data"]:
            fail("%s Q4_K_M: %s bytes differ from llama-quantize's" % (shape, t["name"]))
            return
    print("ok Q4_K_M shape %s: types and bytes equal llama_model_quantize's" % shape,
          flush=True)


def check_cli(exe, tmp):
    bad = [["--dim", "250"], ["--heads", "3"], ["--kv-heads", "3"], ["--vocab", "259"],
           ["--dim", "0"], ["--layers", "99999999999999999999999"], ["--type", "Q2_K"],
           ["--seed", "-1"], ["--threads", "0"], ["--dim", "12x"], ["--bogus"], []]
    for extra in bad:
        args = [exe] + (["-o", os.path.join(tmp, "bad.gguf")] if extra else []) + extra
        r = subprocess.run(args, capture_output=True)
        if r.returncode != 2 or not r.stderr:
            fail("%r: exit %d, want 2 with a message" % (extra, r.returncode))
    r = subprocess.run([exe, "-o", os.path.join(tmp, "no/such/dir/x.gguf"), "--quiet"],
                       capture_output=True)
    if r.returncode != 1:
        fail("unwritable output: exit %d, want 1" % r.returncode)
    if subprocess.run([exe, "--help"], capture_output=True).returncode != 0:
        fail("--help does not exit 0")
    if any(n.endswith(".tmp") for n in os.listdir(tmp)):
        fail("a failed run left a .tmp file")


def main():
    if len(sys.argv) != 2:
        print("usage: %s PATH/TO/m40-mkmodel" % sys.argv[0], file=sys.stderr)
        return 1
    exe = sys.argv[1]
    try:
        import llama_cpp
    except ImportError as e:
        llama_cpp = None
        print("llama_cpp not importable (%s): llama.cpp checks skipped" % e, flush=True)
    quantize_chunk = ggml_lib(llama_cpp) if llama_cpp else None
    if llama_cpp:
        no_extra_buffer_types()

    with tempfile.TemporaryDirectory(prefix="mkmodel-") as tmp:
        check_cli(exe, tmp)
        # Determinism: same arguments, different thread counts, same bytes.
        a, b = os.path.join(tmp, "d1.gguf"), os.path.join(tmp, "d2.gguf")
        mkmodel(exe, a, "B", "Q4_K_M", threads=1)
        mkmodel(exe, b, "B", "Q4_K_M", threads=5)
        if open(a, "rb").read() != open(b, "rb").read():
            fail("same arguments with --threads 1 and 5 gave different files")
        mkmodel(exe, b, "B", "Q4_K_M", seed=SEED + 1)
        if open(a, "rb").read() == open(b, "rb").read():
            fail("different seeds gave the same file")

        cases = [(typ, "A" if i % 2 == 0 else "B") for i, typ in enumerate(TYPES)]
        cases += [("Q4_K_M", "A"), ("Q4_K", "C"), ("Q6_K", "C"), ("Q4_K_M", "C"),
                  ("Q5_K", "C"), ("Q4_K_M", "D")]
        refs = {}
        for shape in SHAPES:
            refs[shape] = os.path.join(tmp, "ref-%s.gguf" % shape)
            mkmodel(exe, refs[shape], shape, "F32")
        for typ, shape in cases:
            path = os.path.join(tmp, "m-%s-%s.gguf" % (typ, shape))
            mkmodel(exe, path, shape, typ)
            tensors = check_structure(path, shape, typ)
            if llama_cpp:
                check_llama(llama_cpp, path, shape, typ)
            if quantize_chunk:
                check_bytes(quantize_chunk, tensors, read_gguf(refs[shape])[2], shape, typ)
            if llama_cpp and typ == "Q4_K_M":
                check_llama_quantize(llama_cpp, path, tensors, refs[shape], shape)
            os.unlink(path)

    if failures:
        print("%d failure(s)" % len(failures))
        return 1
    if not llama_cpp:
        return 77
    if not quantize_chunk:
        print("libggml-base not found next to llama_cpp: byte-exactness not checked")
    print("all ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
