#!/usr/bin/env python3
"""conformance_chat.py - chat with SmolLM2-135M-Instruct through m40d against llama.cpp
(PyPI llama-cpp-python), acceptance 4 of issue 20 (item 12):

1. Rendering: the model's own Jinja template (tokenizer.chat_template, rendered by
   llama-cpp-python's Jinja2ChatFormatter, as llama.cpp's Jinja path renders it) and
   m40-tokenize --chat over the same template give the same text, with and without a
   system message (SmolLM2's template writes a default system message when there is none).
2. Stop point: 20 chat prompts through a real m40d (`m40ctl submit --chat --json`, greedy,
   CPU engine) give the same prompt length, the same tokens and the same end as llama.cpp's
   greedy decoding of the Jinja-rendered prompt, which stops at a token of its
   end-of-generation set (llama_vocab_is_eog: {0, 2, 4} for SmolLM2) or at MAX_TOKENS. As in
   conformance_llamacpp.py (issue 3's rule), a continuation may differ only where llama.cpp's
   own top-2 logit gap at the first differing step is below 0.05 (reported, and then the stop
   point is not compared); at most MAX_EXEMPT prompts may.
3. ignore_eos: a chat request whose reply ends at <|im_end|> after 17 tokens generates
   max_tokens (24) tokens with --ignore-eos, finish "length", the first 17 the same
   (m40.h: M40_REQUEST_IGNORE_EOS does not stop at end-of-generation tokens).
4. An end-of-generation id that is not the file's EOS: m40-gen on the tokens
   "<|im_start|><|im_end|>\\n<|im_end|>\\n" with repeat penalty 1.7 makes <reponame> (4) its
   first token, as llama.cpp does, and stops there (the file names only EOS 2); with
   --ignore-eos it goes on.

Usage: conformance_chat.py M40D M40CTL M40TOKENIZE M40GEN MODEL
Exit 0 pass, 1 fail, 77 when llama_cpp or the model is missing. One thread each (meson runs
conformance tests side by side on 2 cores)."""
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

try:
    import numpy as np
    import llama_cpp
    import llama_cpp.llama_cpp as ll
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conformance_llamacpp as cl  # noqa: E402

MAX_TOKENS = 48
MAX_EXEMPT = 3
GAP = 0.05
SYSTEM = "You are a concise assistant. Answer in one sentence."

# (system message or None, user message)
PROMPTS = [
    (None, "Hi!"),
    (None, "What is the capital of France?"),
    (None, "Say hello in Spanish."),
    (None, "What is 2+2?"),
    (None, "Name a primary color."),
    (None, "Who wrote Hamlet?"),
    (None, "Give me one word that rhymes with cat."),
    (None, "Is water wet? Answer yes or no."),
    (None, "What day comes after Monday?"),
    (None, "Thank you!"),
    (None, "Translate 'good morning' to French."),
    (None, "How many legs does a spider have?"),
    (None, "What color is the sky on a clear day?"),
    (None, "Write a haiku about the sea."),
    (SYSTEM, "What is the boiling point of water in Celsius?"),
    (SYSTEM, "Who painted the Mona Lisa?"),
    (SYSTEM, "What is the largest planet?"),
    (SYSTEM, "Hello, who are you?"),
    ("You reply with a single word.", "What is the opposite of hot?"),
    ("You are a pirate.", "Greet me."),
]

failures = 0


def fail(msg):
    global failures
    failures += 1
    print("FAIL: " + msg, flush=True)


def messages(system, user):
    return ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": user}]


def jinja_render(tmpl, msgs, add_ass=True):
    f = Jinja2ChatFormatter(template=tmpl, eos_token="<|im_end|>", bos_token="<|im_start|>",
                            add_generation_prompt=add_ass)
    return f(messages=msgs).prompt


def m40_render(tok, model, tmpl_path, msgs, add_ass=True):
    stdin = "".join("%s %s\n" % (m["role"], m["content"].encode().hex()) for m in msgs)
    r = subprocess.run([tok, "-m", model, "--chat", "@" + tmpl_path] +
                       ([] if add_ass else ["--no-gen"]),
                       input=stdin.encode(), capture_output=True)
    if r.returncode != 0:
        fail("m40-tokenize --chat: %s" % r.stderr.decode().strip())
        return None
    return bytes.fromhex(r.stdout.decode().split("\n")[0]).decode()


def check_render(tok, model, tmpl, d):
    path = os.path.join(d, "tmpl.jinja")
    with open(path, "w") as f:
        f.write(tmpl)
    convs = [messages(s, u) for s, u in PROMPTS[:2] + PROMPTS[-2:]]
    convs.append([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "Bye"}])
    convs.append([{"role": "system", "content": "A"}, {"role": "system", "content": "B"},
                  {"role": "user", "content": "C"}])
    n = 0
    for msgs in convs:
        for add_ass in (True, False):
            want = jinja_render(tmpl, msgs, add_ass)
            got = m40_render(tok, model, path, msgs, add_ass)
            if got == want:
                n += 1
            else:
                fail("render %r add_generation_prompt=%s:\n   jinja %r\n   m40   %r" %
                     ([m["role"] for m in msgs], add_ass, want, got))
    print("render: %d/%d texts identical to the GGUF template's Jinja rendering" %
          (n, 2 * len(convs)), flush=True)


def ref_chat(llm, eog, ids, n, penalty=1.0, one_by_one=False):
    """llama.cpp greedy to an end-of-generation token or n tokens (repeat penalty as its
    penalties sampler applies it over the whole history): tokens, each step's top-2 gap.
    one_by_one: the prompt one token a call, so that every product is ggml's vec_dot kernel,
    the path ggml mode reproduces; in one batch, llama.cpp's prompt takes other kernels on
    some CPUs (an AVX-512 / AMX host's batched prompt made 8 of 20 replies differ from its
    own token-by-token ones after top-2 gaps up to 0.23)."""
    llm.reset()
    if one_by_one:
        for t in ids:
            llm.eval([t])
    else:
        llm.eval(ids)
    out, gaps = [], []
    hist = list(ids)
    for _ in range(n):
        lg = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        if penalty != 1.0:
            seen = np.array(sorted(set(hist[-64:])))
            lg[seen] = np.where(lg[seen] > 0, lg[seen] / penalty, lg[seen] * penalty)
        top2 = np.partition(lg, -2)[-2:]
        gaps.append(float(top2[1] - top2[0]))
        t = int(np.argmax(lg))
        out.append(t)
        hist.append(t)
        if t in eog:
            break
        llm.eval([t])
    return out, gaps


class Daemon:
    def __init__(self, m40d, m40ctl, model, d):
        self.m40ctl = m40ctl
        self.sock = os.path.join(d, "m40d.sock")
        ini = os.path.join(d, "m40d.ini")
        with open(ini, "w") as f:
            f.write("[model]\npath = %s\n[engine]\nthreads = 1\nmax_sequences = 2\n"
                    "[server]\nsocket = %s\ngroup =\n[sampling]\ntemperature = 0\n"
                    "repeat_penalty = 1.0\n" % (model, self.sock))
        self.log = os.path.join(d, "m40d.log")
        self.proc = subprocess.Popen([m40d, "-c", ini], stderr=open(self.log, "w"))
        for _ in range(300):
            if self.ctl(["status"]).returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("m40d did not come up: " + open(self.log).read())

    def ctl(self, args):
        return subprocess.run([self.m40ctl] + args, capture_output=True, text=True,
                              env=dict(os.environ, M40_SOCKET=self.sock))

    def chat(self, system, user, n, extra=()):
        args = ["submit", "--json", "--chat", "--temp", "0", "-n", str(n)] + list(extra)
        if system:
            args += ["--system", system]
        r = self.ctl(args + ["--", user])
        if r.returncode != 0:
            fail("m40ctl submit %r: exit %d %s" % (user, r.returncode, r.stderr.strip()))
            return None
        return json.loads(r.stdout)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


def verdict(ref, gaps, mine, mine_end, eog):
    """'same', 'exempt' (first difference after a near tie) or 'differ'; the step."""
    ref_end = "eos" if ref[-1] in eog else "length"
    at = cl.first_diff(ref, mine)
    if at is None and mine_end == ref_end:
        return "same", None
    if at is not None and at < len(gaps) and gaps[at] < GAP:
        return "exempt", at
    return "differ", at


def report(label, user, kind, at, ref, gaps, eog):
    if kind == "same":
        print("%s %-48r %2d tokens, both end at %s" %
              (label, user, len(ref), "token %d" % ref[-1] if ref[-1] in eog else "max_tokens"),
              flush=True)
    else:
        print("%s %-48r differs at step %s, llama.cpp's top-2 gap %s" %
              (label, user, at, "%.4f" % gaps[at] if at is not None and at < len(gaps)
               else "-"), flush=True)


def check_stops_f32(gen, model, llm_ids, eog, d):
    """The engine's stop points, exactly: f32 mode against llama.cpp on the weights
    dequantized to F32 (conformance_llamacpp.py: identical there, on any CPU)."""
    f32 = os.path.join(d, "deq.gguf")
    if not cl.dequantize_to_f32(model, f32):
        fail("llama_model_quantize to F32 failed")
        return
    llm = cl.load(f32, 512)
    args = [gen, "-m", model, "--act", "f32", "--tokens",
            ";".join(",".join(map(str, ids)) for ids in llm_ids), "-n", str(MAX_TOKENS),
            "--print-tokens", "--threads", "1"]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        fail("m40-gen --act f32: %s" % r.stderr.strip())
        return
    mine = [[int(x) for x in line.split()] for line in r.stdout.strip().split("\n")]
    count = {"same": 0, "exempt": 0, "differ": 0}
    for (system, user), ids, toks in zip(PROMPTS, llm_ids, mine):
        ref, gaps = ref_chat(llm, eog, ids, MAX_TOKENS)
        end = "eos" if toks and toks[-1] in eog else "length"
        kind, at = verdict(ref, gaps, toks, end, eog)
        count[kind] += 1
        report("f32 ", user, kind, at, ref, gaps, eog)
        if kind == "differ":
            fail("f32 %r: m40 %s, llama.cpp %s" % (user, toks, ref))
    os.unlink(f32)
    print("engine stop points (f32 mode vs llama.cpp on F32 weights): %d of %d identical, "
          "%d differ after a near tie" % (count["same"], len(PROMPTS), count["exempt"]),
          flush=True)
    if count["exempt"] > MAX_EXEMPT:
        fail("%d prompts differ after a near tie (at most %d)" % (count["exempt"], MAX_EXEMPT))


def check_stops_daemon(daemon, llm, llm_ids, eog):
    """The request path (chat template, tokenization, stop ids, the engine's EOG set) in
    ggml mode against llama.cpp on the Q4_1 file (its prompt one token at a time, as
    ref_chat() says why): identical prompts; identical tokens and
    end up to a difference after a near tie (or, with a llama.cpp without AVX-512, any
    difference: reported, see conformance_llamacpp.py); and in every reply an end token only
    as the last token, with finish "eos"."""
    count = {"same": 0, "exempt": 0, "differ": 0}
    for (system, user), ids in zip(PROMPTS, llm_ids):
        ref, gaps = ref_chat(llm, eog, ids, MAX_TOKENS, one_by_one=True)
        got = daemon.chat(system, user, MAX_TOKENS)
        if got is None:
            continue
        mine = got["tokens"]
        if got["n_prompt"] != len(ids):
            fail("%r: prompt of %d tokens, llama.cpp's %d" % (user, got["n_prompt"], len(ids)))
            continue
        ends = [i for i, t in enumerate(mine) if t in eog]
        if ends not in ([], [len(mine) - 1]) or (got["finish"] == "eos") != bool(ends):
            fail("%r: end tokens at %s of %d, finish %s" % (user, ends, len(mine),
                                                           got["finish"]))
        kind, at = verdict(ref, gaps, mine, got["finish"], eog)
        count[kind] += 1
        report("m40d", user, kind, at, ref, gaps, eog)
        if kind == "differ" and cl.AVX512:
            fail("m40d %r: m40 %s (finish %s), llama.cpp %s" % (user, mine, got["finish"], ref))
    print("request-path stop points (ggml mode vs llama.cpp on Q4_1): %d of %d identical, %d "
          "differ after a near tie, %d after a larger gap%s" %
          (count["same"], len(PROMPTS), count["exempt"], count["differ"],
           "" if cl.AVX512 else " (reported only: this llama.cpp has no AVX-512 kernels)"),
          flush=True)


def check_ignore_eos(daemon):
    """A reply that ends at <|im_end|> before 24 tokens; with --ignore-eos it goes on to 24."""
    user = "Hello, who are you?"
    base = daemon.chat(SYSTEM, user, MAX_TOKENS)
    got = daemon.chat(SYSTEM, user, 24, ["--ignore-eos"])
    if base is None or got is None:
        return
    print("ignore_eos: without it %d tokens (finish %s); with it %d tokens (finish %s)" %
          (len(base["tokens"]), base["finish"], got["n_generated"], got["finish"]), flush=True)
    if base["finish"] != "eos" or len(base["tokens"]) >= 24:
        fail("the reply to %r no longer ends early at an end of turn: %s" % (user, base))
    elif got["finish"] != "length" or got["n_generated"] != 24 or \
            got["tokens"][:len(base["tokens"])] != base["tokens"]:
        fail("a chat request with ignore_eos stopped at an end of turn: %s" % got)


def check_raw_eog(gen, model, llm, eog):
    ids = [1, 2, 198, 2, 198]  # <|im_start|><|im_end|>\n<|im_end|>\n
    ref, _ = ref_chat(llm, eog, ids, 8, penalty=1.7)
    out = {}
    for extra in ([], ["--ignore-eos"]):
        r = subprocess.run([gen, "-m", model, "--tokens", ",".join(map(str, ids)), "-n", "8",
                            "--repeat-penalty", "1.7", "--print-tokens", "--threads", "1"] +
                           extra, capture_output=True, text=True)
        if r.returncode != 0:
            fail("m40-gen: %s" % r.stderr.strip())
            return
        out[bool(extra)] = [int(x) for x in r.stdout.split()]
    print("end-of-generation id 4 (EOS is 2): llama.cpp %s, m40-gen %s, with --ignore-eos %d "
          "tokens" % (ref, out[False], len(out[True])), flush=True)
    if ref != [4] or out[False] != ref:
        fail("m40-gen does not stop at <reponame> (4) where llama.cpp does")
    if len(out[True]) != 8 or out[True][0] != 4:
        fail("m40-gen --ignore-eos: %s" % out[True])


def main():
    if len(sys.argv) != 6:
        print(__doc__)
        return 2
    m40d, m40ctl, tok, gen, model = sys.argv[1:]
    if not os.path.exists(model):
        print("skip: %s not present" % model)
        return 77
    cl.no_extra_buffer_types()
    llm = cl.load(model, 512)
    tmpl = llm.metadata["tokenizer.chat_template"]
    vocab = ll.llama_model_get_vocab(llm.model)
    eog = {t for t in range(llm.n_vocab()) if ll.llama_vocab_is_eog(vocab, t)}
    print("llama.cpp's end-of-generation set: %s" % sorted(eog), flush=True)
    cl.AVX512 = cl.llama_avx512()
    llm_ids = [llm.tokenize(jinja_render(tmpl, messages(s, u)).encode(), add_bos=False,
                            special=True) for s, u in PROMPTS]
    with tempfile.TemporaryDirectory() as d:
        check_render(tok, model, tmpl, d)
        check_raw_eog(gen, model, llm, eog)
        daemon = Daemon(m40d, m40ctl, model, d)
        try:
            check_stops_daemon(daemon, llm, llm_ids, eog)
            check_ignore_eos(daemon)
        finally:
            daemon.stop()
        del llm
        check_stops_f32(gen, model, llm_ids, eog, d)
    print("FAILED (%d)" % failures if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
