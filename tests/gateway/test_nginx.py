#!/usr/bin/env python3
"""test_nginx.py - issue 22 acceptance 6: two m40d + m40-gateway pairs (CPU engine,
SmolLM2-135M-Instruct) behind nginx on loopback, configured by the shipped
client/gateway/nginx-m40.conf (its upstream servers and listen address replaced by the test's
ports):
  - 16 streaming clients of the `openai` package through nginx all complete with the text
    `m40ctl submit --chat` gives for the same greedy request, spread over both pairs;
  - 16 long streams run through nginx; one pair is killed (m40-gateway and m40d, SIGKILL:
    a box going away) once every stream has its first token: exactly the streams that pair
    held fail, the others complete; requests made after it all go to the other pair.
Exit 0 pass, 1 fail, 77 skip (no model, no nginx, or the openai package missing).

Usage: test_nginx.py M40D M40CTL M40_GATEWAY MODEL|tests/fetch-models.sh NGINX_CONF
"""
import concurrent.futures
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gwtest  # noqa: E402

try:
    import openai
except ImportError:
    gwtest.skip("python package missing: openai")
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
if not os.access(NGINX, os.X_OK):
    gwtest.skip("no nginx (Debian: nginx-light)")

SYSTEM = "You are a helpful assistant."
QUESTION = "What is the capital of France?"
MSGS = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
MODEL = "SmolLM2-135M-Instruct.Q4_1"
CLIENTS = 16
failed = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failed.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_nginx(workdir, shipped, gateways):
    """nginx in the foreground on a free port, with the shipped config's upstream servers
    pointing at gateways; returns (process, url)."""
    port = free_port()
    conf = open(shipped).read()
    servers = "".join(f"        server {g} max_fails=1 fail_timeout=10s;\n" for g in gateways)
    conf, n = re.subn(r"(        server 127\.0\.0\.1:80\d\d [^\n]*\n)+", servers, conf)
    conf, m = re.subn(r"listen 127\.0\.0\.1:8080;", f"listen 127.0.0.1:{port};", conf)
    if n != 1 or m != 1:
        raise RuntimeError("nginx-m40.conf no longer has the upstream / listen lines")
    with open(os.path.join(workdir, "m40.conf"), "w") as f:
        f.write(conf)
    tmp = os.path.join(workdir, "nginx-tmp")
    os.makedirs(tmp)
    main = os.path.join(workdir, "nginx.conf")
    with open(main, "w") as f:
        f.write(f"""{"user root;" if os.geteuid() == 0 else ""}
daemon off;
worker_processes 1;
pid {workdir}/nginx.pid;
error_log {workdir}/nginx-error.log;
events {{ worker_connections 512; }}
http {{
    access_log {workdir}/nginx-access.log;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    include {workdir}/m40.conf;
}}
""")
    p = subprocess.Popen([NGINX, "-c", main, "-p", workdir],
                         stderr=open(os.path.join(workdir, "nginx.log"), "w"))
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return p, f"http://127.0.0.1:{port}"
        except OSError:
            if p.poll() is not None:
                break
            time.sleep(0.05)
    p.kill()
    raise RuntimeError("nginx did not start: " + open(os.path.join(workdir, "nginx.log")).read())


def main():
    m40d, m40ctl, gateway, model, shipped = sys.argv[1:6]
    with gwtest.Stack(m40d, m40ctl, gateway, model) as a, \
            gwtest.Stack(m40d, m40ctl, gateway, model) as b:
        ng, url = start_nginx(a.dir, shipped, [a.url[7:], b.url[7:]])
        try:
            run(a, b, url)
        finally:
            ng.terminate()
            ng.wait(10)
    print("FAILED: " + "; ".join(failed) if failed else "all passed")
    return 1 if failed else 0


def run(a, b, url):
    c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=300)
    ref = a.m40ctl("submit", "--chat", "--system", SYSTEM, "--temp", "0", "-n", "24", QUESTION,
                   check=True).stdout

    def short(_):
        return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model=MODEL, messages=MSGS, temperature=0, max_tokens=24, stream=True)
            if ch.choices)

    r0 = (a.status()["requests"], b.status()["requests"])
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        texts = list(pool.map(short, range(CLIENTS)))
    r1 = (a.status()["requests"] - r0[0], b.status()["requests"] - r0[1])
    check(texts == [ref] * CLIENTS, f"{CLIENTS} streams through nginx: "
          f"{texts.count(ref)} with m40ctl's text {ref!r}")
    check(r1[0] > 0 and r1[1] > 0 and sum(r1) == CLIENTS,
          f"spread over both pairs: {r1[0]} + {r1[1]}")

    # long streams; one pair dies once every stream has its first token
    started = threading.Barrier(CLIENTS + 1, timeout=300)

    def long(_):
        n, first = 0, True
        try:
            for ch in c.chat.completions.create(model=MODEL, messages=MSGS, temperature=0,
                                                max_tokens=96, stream=True,
                                                extra_body={"ignore_eos": True}):
                if ch.choices and ch.choices[0].delta.content and first:
                    first = False
                    started.wait()
                if ch.choices and ch.choices[0].finish_reason:
                    return ch.choices[0].finish_reason
                n += 1
            return "no finish"
        except Exception as e:  # noqa: BLE001 - any failure of this stream counts
            if first:
                started.abort()
            return f"failed: {type(e).__name__}"

    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        futs = [pool.submit(long, i) for i in range(CLIENTS)]
        started.wait()
        st = a.status()
        held = st["active"] + st["queued"]
        for p in a.procs:
            p.send_signal(signal.SIGKILL)
        results = [f.result() for f in futs]
    ok = results.count("length")
    check(ok == CLIENTS - held and len(results) - ok == held,
          f"pair A killed holding {held} streams: {ok} of {CLIENTS} completed, the rest "
          f"failed ({sorted(set(results))})")

    r0 = b.status()["requests"]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        texts = list(pool.map(short, range(8)))
    check(texts == [ref] * 8 and b.status()["requests"] - r0 == 8,
          f"after the kill: 8 of 8 new streams complete on pair B ({texts.count(ref)} with the "
          f"reference text)")


if __name__ == "__main__":
    sys.exit(main())
