"""gwtest.py - shared by the gateway tests: starts m40d (CPU engine) on a model and
m40-gateway in front of it on a free loopback port (its model store, $M40_MODELS, the
model's directory), in a temporary directory removed at exit; runs m40ctl; exits 77 (skip)
when the model is missing.

    with Stack(m40d, m40ctl, gateway, model, ini_extra, gw_args) as s:
        s.url, s.sock, s.m40ctl(...), s.status()
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def model_path(arg):
    """arg: a model file, or tests/fetch-models.sh, run for SmolLM2 (77 from it: skip)."""
    if not arg.endswith(".sh"):
        return arg
    r = subprocess.run([arg, "smollm2"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHON=sys.executable))
    if r.returncode == 77:
        skip("SmolLM2 cannot be downloaded: " + r.stderr.strip())
    if r.returncode:
        raise RuntimeError("fetch-models.sh failed: " + r.stderr)
    return r.stdout.strip()


class Stack:
    def __init__(self, m40d, m40ctl, gateway, model, ini_extra="", gw_args=(), sock=None):
        model = model_path(model)
        if not os.access(model, os.R_OK):
            skip(f"no model at {model} (tests/fetch-models.sh fetches it)")
        self.m40d_bin, self.m40ctl_bin, self.gw_bin = m40d, m40ctl, gateway
        self.model, self.ini_extra, self.gw_args = model, ini_extra, list(gw_args)
        self.dir = tempfile.mkdtemp(prefix="m40-gwtest.")
        self.sock = os.path.join(self.dir, "m40d.sock")
        self.gw_sock = sock or self.sock
        self.procs = []

    def __enter__(self):
        try:
            self.start_m40d()
            self.start_gateway()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if os.environ.get("M40_KEEP_TEST_DIR"):
            print("kept " + self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)
        return False

    def start_m40d(self):
        ini = os.path.join(self.dir, "m40d.ini")
        with open(ini, "w") as f:
            f.write(f"[model]\npath = {self.model}\n[engine]\nbackend = cpu\n"
                    f"[server]\nsocket = {self.sock}\ngroup =\n{self.ini_extra}\n")
        log = open(os.path.join(self.dir, "m40d.log"), "w")
        self.procs.append(subprocess.Popen([self.m40d_bin, "-c", ini], stderr=log))
        for _ in range(600):
            if self.m40ctl("status").returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("m40d did not come up: " + self.log("m40d.log"))

    def start_gateway(self):
        self.gw_log = os.path.join(self.dir, "gateway.log")
        log = open(self.gw_log, "w")
        # the gateway's model store is the model's directory (/api/tags shows its size)
        env = dict(os.environ, M40_MODELS=os.path.dirname(os.path.abspath(self.model)))
        self.gw = subprocess.Popen([self.gw_bin, "--listen", "127.0.0.1:0", "--socket",
                                    self.gw_sock] + self.gw_args, stderr=log, env=env)
        self.procs.append(self.gw)
        for _ in range(100):
            m = re.search(r"listening on (\S+),", self.log("gateway.log"))
            if m:
                self.url = "http://" + m.group(1)
                return
            if self.gw.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("m40-gateway did not come up: " + self.log("gateway.log"))

    def stop_gateway(self):
        """SIGTERM to m40-gateway; returns its exit status (0: clean, also of leaks under
        ASan)."""
        self.gw.terminate()
        return self.gw.wait(30)

    def log(self, name):
        with open(os.path.join(self.dir, name)) as f:
            return f.read()

    def m40ctl(self, *args, check=False):
        return subprocess.run([self.m40ctl_bin, args[0], "--socket", self.sock] + list(args[1:]),
                              capture_output=True, text=True, check=check, timeout=300)

    def status(self):
        return json.loads(self.m40ctl("status", "--json", check=True).stdout)
