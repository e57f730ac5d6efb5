#!/usr/bin/env python3
"""test_clients.py - issue 22 acceptance 1 and 2: the `openai` and `ollama` Python packages
against m40-gateway in front of m40d (CPU engine) on SmolLM2-135M-Instruct:
  - openai: models list, chat completion, streamed chat completion (with usage), text
    completion; the streamed text equals `m40ctl submit --chat`'s for the same greedy
    request, the completion equals `m40ctl submit`'s; 32 concurrent streaming clients all
    complete with that same text;
  - ollama: list (the model file's size in bytes: the gateway finds it in its model
    store), chat (not streamed and streamed), generate; the same text again.
Exit 0 pass, 1 fail, 77 skip (no model, or the packages are not installed).

Usage: test_clients.py M40D M40CTL M40_GATEWAY MODEL|tests/fetch-models.sh
"""
import concurrent.futures
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwtest  # noqa: E402

try:
    import ollama
    import openai
except ImportError as e:
    gwtest.skip(f"python package missing: {e.name} (pip install openai ollama)")

SYSTEM = "You are a helpful assistant."
QUESTION = "What is the capital of France?"
N_TOKENS = 24
CLIENTS = 32

failed = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failed.append(what)


def main():
    m40d, m40ctl, gateway, model = sys.argv[1:5]
    # 32 streams at once: all in m40d's batch, each on its own gateway connection
    with gwtest.Stack(m40d, m40ctl, gateway, model, "max_clients = 64\n[engine]\n"
                      "max_sequences = 32") as s:
        ref = s.m40ctl("submit", "--chat", "--system", SYSTEM, "--temp", "0", "-n",
                       str(N_TOKENS), QUESTION, check=True).stdout
        raw_ref = s.m40ctl("submit", "--temp", "0", "-n", "16", "Once upon a time",
                           check=True).stdout
        check("Paris" in ref, f"m40ctl's greedy answer names Paris: {ref!r}")
        run_openai(s, ref, raw_ref)
        run_ollama(s, ref)
        st = s.status()
        check(st["active"] == 0 and st["kv_pages_used"] == 0,
              "m40d holds no sequence and no KV page afterwards")
        rc = s.stop_gateway()
        check(rc == 0, f"m40-gateway exits 0 at SIGTERM (got {rc})")
        if rc:
            print(s.log("gateway.log")[-3000:])
    print("FAILED: " + "; ".join(failed) if failed else "all passed")
    return 1 if failed else 0


def run_openai(s, ref, raw_ref):
    c = openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=300)
    ids = [m.id for m in c.models.list()]
    check(ids == ["SmolLM2-135M-Instruct.Q4_1"], f"openai models.list: {ids}")
    model = ids[0]
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]

    r = c.chat.completions.create(model=model, messages=msgs, temperature=0,
                                  max_tokens=N_TOKENS)
    check(r.choices[0].message.content == ref, f"openai chat = m40ctl: {r.choices[0].message.content!r}")
    check(r.choices[0].finish_reason in ("stop", "length"), f"finish_reason {r.choices[0].finish_reason}")
    check(r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0 and
          r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens,
          f"openai chat usage {r.usage}")

    def stream_once():
        text, finish, usage = "", None, None
        for ch in c.chat.completions.create(model=model, messages=msgs, temperature=0,
                                            max_tokens=N_TOKENS, stream=True,
                                            stream_options={"include_usage": True}):
            if ch.usage:
                usage = ch.usage
            for choice in ch.choices:
                text += choice.delta.content or ""
                finish = choice.finish_reason or finish
        return text, finish, usage

    text, finish, usage = stream_once()
    check(text == ref, f"openai streamed chat = m40ctl submit --chat: {text!r}")
    check(finish in ("stop", "length") and usage and usage.completion_tokens > 0,
          f"streamed finish {finish}, usage {usage}")

    r = c.completions.create(model=model, prompt="Once upon a time", temperature=0,
                             max_tokens=16)
    check(r.choices[0].text == raw_ref, f"openai completion = m40ctl submit: {r.choices[0].text!r}")
    check(r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length",
          f"completion usage {r.usage}, finish {r.choices[0].finish_reason}")

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        results = list(pool.map(lambda _: stream_once(), range(CLIENTS)))
    same = sum(1 for t, f, u in results if t == ref and u and u.completion_tokens > 0)
    check(same == CLIENTS, f"{CLIENTS} concurrent streaming clients: {same} complete with the reference text")


def run_ollama(s, ref):
    c = ollama.Client(host=s.url, timeout=300)
    listed = c.list().models
    names = [m.model for m in listed]
    check(names == ["SmolLM2-135M-Instruct.Q4_1:latest"], f"ollama list: {names}")
    sizes = [m.size for m in listed]
    check(sizes == [os.path.getsize(s.model)],
          f"ollama list: size {sizes}, the model file has {os.path.getsize(s.model)} bytes")
    model = names[0]
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    opts = {"temperature": 0, "num_predict": N_TOKENS}

    r = c.chat(model=model, messages=msgs, options=opts)
    check(r.message.content == ref, f"ollama chat = m40ctl: {r.message.content!r}")
    check(r.done and r.eval_count > 0 and r.prompt_eval_count > 0 and r.eval_duration > 0 and
          r.total_duration >= r.eval_duration, f"ollama chat done record: eval_count "
          f"{r.eval_count}, durations {r.total_duration}/{r.eval_duration}")

    text, last = "", None
    for part in c.chat(model=model, messages=msgs, options=opts, stream=True):
        text += part.message.content
        last = part
    check(text == ref, f"ollama streamed chat = m40ctl: {text!r}")
    check(last.done and last.done_reason in ("stop", "length") and last.eval_count > 0,
          f"ollama stream ends with done ({last.done_reason}, {last.eval_count} tokens)")

    r = c.generate(model=model, prompt=QUESTION, system=SYSTEM, options=opts)
    check(r.response == ref, f"ollama generate = m40ctl: {r.response!r}")
    text = "".join(p.response for p in c.generate(model=model, prompt=QUESTION, system=SYSTEM,
                                                  options=opts, stream=True))
    check(text == ref, f"ollama streamed generate = m40ctl: {text!r}")


if __name__ == "__main__":
    sys.exit(main())
