"""conformance.py - m40-llm's tokenizers and chat templates against llama.cpp
(llama-cpp-python), issue 4 acceptance checks 1 and 3.

Usage: conformance.py M40_TOKENIZE

1. Token ids: every corpus string (corpus.py), for each model and each of add_bos (llama.cpp's
   add_special) x parse_special, must give exactly llama.cpp's ids.
   Every pre-tokenizer m40 implements is run the same way over SmolLM2's BPE vocabulary
   (a metadata-only copy with tokenizer.ggml.pre replaced, gguf_vocab.py).
2. Pieces and attributes: llama_token_to_piece (special false and true), the token
   attributes and end-of-generation membership for every token id; BOS/EOS and flags.
3. Chat: llama_chat_apply_template over several conversations, for every built-in template
   name we implement and for Jinja templates of each family, must equal m40's text.
Exit 0 pass, 1 fail, 77 when llama_cpp cannot be imported or no model is present.
"""
import ctypes
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_cases  # noqa: E402
import corpus  # noqa: E402
import gguf_vocab  # noqa: E402
import models  # noqa: E402

# One tokenizer.ggml.pre name per pre-tokenizer m40 implements (daemon/text/pretok.c).
PRE_NAMES = [
    "default", "llama-bpe", "dbrx", "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
    "gpt-2", "mpt", "trillion", "starcoder", "smollm", "qwen2", "stablelm2", "qwen35", "grok-2",
    "poro-chat", "bloom", "viking", "chatglm-bpe", "glm4", "tekken", "gpt-4o", "seed-coder",
    "bailingmoe",
]

try:
    import llama_cpp
except ImportError:
    print("skip: llama_cpp is not importable")
    sys.exit(77)

TOOL = sys.argv[1]
FAIL = 0
_QUIET = llama_cpp.llama_log_callback(lambda level, text, user: None)
llama_cpp.llama_log_set(_QUIET, None)  # llama.cpp's warnings (double BOS, ...) are noise here


def fail(msg):
    global FAIL
    FAIL += 1
    if FAIL <= 40:
        print("FAIL:", msg)


def llama_cpp_aborts(b):
    """llama.cpp's BPE aborts (uncaught C++ exception) on 4-byte forms decoding past U+10FFFF."""
    for i in range(len(b) - 3):
        c = b[i]
        if 0xF0 <= c <= 0xF7 and all(0x80 <= x <= 0xBF for x in b[i + 1:i + 4]):
            cpt = ((c & 7) << 18) | ((b[i + 1] & 63) << 12) | ((b[i + 2] & 63) << 6) | (b[i + 3] & 63)
            if cpt > 0x10FFFF:
                return True
    return False


def m40(args, stdin):
    r = subprocess.run([TOOL] + args, input=stdin, capture_output=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"m40-tokenize {args} failed: {r.stderr.decode(errors='replace')}")
    return r.stdout.decode()


def check_ids(name, path, llm, texts, modes=((True, False), (True, True), (False, False),
                                             (False, True))):
    for add_bos, special in modes:
        flags = ([] if add_bos else ["--no-bos"]) + (["--special"] if special else [])
        t0 = time.time()
        ours = m40(["-m", path, "--batch"] + flags,
                   "".join(t.hex() + "\n" for t in texts).encode()).split("\n")
        t1 = time.time()
        n_ok = n_skip = 0
        for i, t in enumerate(texts):
            if llama_cpp_aborts(t):
                n_skip += 1
                continue
            want = llm.tokenize(t, add_bos=add_bos, special=special)
            got = [int(x) for x in ours[i].split()]
            if got == want:
                n_ok += 1
            else:
                fail(f"{name} add_bos={add_bos} special={special} #{i} {t!r}:\n"
                     f"   llama.cpp {want}\n   m40       {got}")
        print(f"{name} add_bos={add_bos} special={special}: {n_ok}/{len(texts) - n_skip} "
              f"identical ({n_skip} skipped: llama.cpp aborts), m40 {t1 - t0:.2f}s")


def check_pretokenizers(bpe_path, texts, tmpdir):
    for pre in PRE_NAMES:
        path = os.path.join(tmpdir, f"vocab-{pre}.gguf")
        gguf_vocab.write_vocab_only(bpe_path, path, {"tokenizer.ggml.pre": pre})
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        check_ids(f"pre={pre}", path, llm, texts, modes=((True, False),))


def check_codepoints(name, path, llm):
    """Code points in context: all of U+0080..U+FFFF, every 13th above, surrogates excluded."""
    cps = [c for c in range(0x80, 0x110000)
           if not 0xD800 <= c <= 0xDFFF and (c < 0x10000 or c % 13 == 0)]
    texts = [("x" + chr(c) + "1 " + chr(c) + chr(c) + "'s").encode() for c in cps]
    ours = m40(["-m", path, "--batch", "--no-bos"],
               "".join(t.hex() + "\n" for t in texts).encode()).split("\n")
    bad = 0
    for i, t in enumerate(texts):
        want = " ".join(map(str, llm.tokenize(t, add_bos=False, special=False)))
        if ours[i] != want:
            bad += 1
            fail(f"{name} code point U+{cps[i]:04X}: llama.cpp [{want}] m40 [{ours[i]}]")
    print(f"{name}: {len(cps) - bad}/{len(cps)} code points tokenize identically in context")


def check_pieces(name, path, llm):
    vocab = llm._model.vocab
    buf = ctypes.create_string_buffer(1 << 16)
    lines = m40(["-m", path, "--dump-pieces"], b"").splitlines()
    bad = 0
    for line in lines:
        tid, p0, p1, attr = line.split(" ") if line.count(" ") == 3 else (line.split(" ") + [""] * 4)[:4]
        tid = int(tid)
        for special, ours in ((False, p0), (True, p1)):
            n = llama_cpp.llama_token_to_piece(vocab, tid, buf, len(buf), 0, special)
            if buf.raw[:n].hex() != ours:
                bad += 1
                fail(f"{name} piece {tid} special={special}: llama.cpp {buf.raw[:n]!r} m40 {bytes.fromhex(ours)!r}")
        want_attr = llama_cpp.llama_vocab_get_attr(vocab, tid)
        if int(attr) != want_attr:
            bad += 1
            fail(f"{name} attr {tid}: llama.cpp {want_attr} m40 {attr}")
    info = dict(kv.split("=", 1) for kv in m40(["-m", path, "--info"], b"").split())
    eog = [t for t in range(len(lines)) if llama_cpp.llama_vocab_is_eog(vocab, t)]
    want = {"bos": llama_cpp.llama_vocab_bos(vocab), "eos": llama_cpp.llama_vocab_eos(vocab),
            "add_bos": int(llama_cpp.llama_vocab_get_add_bos(vocab)),
            "add_eos": int(llama_cpp.llama_vocab_get_add_eos(vocab)),
            "eog": ",".join(map(str, eog))}
    for k, v in want.items():
        if str(v) != info[k]:
            bad += 1
            fail(f"{name} {k}: llama.cpp {v} m40 {info[k]}")
    print(f"{name}: pieces, attributes, EOG set, BOS/EOS of {len(lines)} tokens: {bad} differences"
          f" (EOT: llama.cpp {llama_cpp.llama_vocab_eot(vocab)}, m40 {info['eot']})")


def llama_chat(tmpl, msgs, add_ass):
    arr = (llama_cpp.llama_chat_message * len(msgs))()
    keep = []
    for i, (role, content) in enumerate(msgs):
        r, c = role.encode(), content.encode()
        keep += [r, c]
        arr[i].role = r
        arr[i].content = c
    n = llama_cpp.llama_chat_apply_template(tmpl.encode(), arr, len(msgs), add_ass, None, 0)
    if n < 0:
        return None
    buf = ctypes.create_string_buffer(n + 1)
    llama_cpp.llama_chat_apply_template(tmpl.encode(), arr, len(msgs), add_ass, buf, n + 1)
    return buf.raw[:n]


def check_chat(tmpdir):
    n_ok = n = 0
    for label, tmpl in chat_cases.templates():
        if tmpl.startswith("{"):
            path = os.path.join(tmpdir, "tmpl.jinja")
            with open(path, "w") as f:
                f.write(tmpl)
            arg = "@" + path
        else:
            arg = tmpl
        sys_msg = chat_cases.DEFAULT_SYSTEM.get(label)
        for ci, conv in enumerate(chat_cases.CONVERSATIONS):
            for add_ass in (True, False):
                n += 1
                full = conv
                if sys_msg and conv[0][0] != "system":
                    full = [("system", sys_msg)] + conv
                want = llama_chat(tmpl, full, add_ass)
                stdin = "".join(f"{r} {c.encode().hex()}\n" for r, c in conv).encode()
                got = bytes.fromhex(m40(["--chat", arg] + ([] if add_ass else ["--no-gen"]),
                                        stdin).split("\n")[0])
                if want == got:
                    n_ok += 1
                else:
                    fail(f"chat {label} conversation {ci} add_ass={add_ass}:\n"
                         f"   llama.cpp {want!r}\n   m40       {got!r}")
                if sys_msg:
                    n += 1
                    jinja = jinja_chat(tmpl, conv, add_ass)
                    if jinja == got:
                        n_ok += 1
                    else:
                        fail(f"chat {label} conversation {ci} add_ass={add_ass} vs its Jinja:"
                             f"\n   jinja {jinja!r}\n   m40   {got!r}")
    print(f"chat: {n_ok}/{n} formatted texts identical")


def jinja_chat(tmpl, msgs, add_ass):
    """The template's own Jinja rendering (llama-cpp-python's formatter, as llama.cpp's
    Jinja path renders it)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
    f = Jinja2ChatFormatter(template=tmpl, eos_token="</s>", bos_token="<s>",
                            add_generation_prompt=add_ass)
    return f(messages=[{"role": r, "content": c} for r, c in msgs]).prompt.encode()


def main():
    ms = models.models()
    if not ms:
        print("skip: no model present")
        return 77
    texts = corpus.corpus()
    print(f"corpus: {len(texts)} strings, {sum(map(len, texts))} bytes")
    for name, path in ms:
        llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        check_ids(name, path, llm, texts)
        if "type=bpe" in m40(["-m", path, "--info"], b""):  # SPM has no regexes
            check_codepoints(name, path, llm)
        check_pieces(name, path, llm)
    with tempfile.TemporaryDirectory() as tmpdir:
        bpe = [path for name, path in ms if name == "smollm2"]
        if bpe:
            check_pretokenizers(bpe[0], texts, tmpdir)
        check_chat(tmpdir)
    print("FAILED" if FAIL else "ok", f"({FAIL} failures)")
    return 1 if FAIL else 0


if __name__ == "__main__":
    sys.exit(main())
