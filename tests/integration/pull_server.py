#!/usr/bin/env python3
"""pull_server.py - a static HTTP/1.1 file server on 127.0.0.1 for test_pull.sh.

Serves the files under --root (404 for anything else) with what `m40ctl pull` relies on:
Content-Length, a strong ETag (size and mtime in ns) and Last-Modified, single byte ranges
("Range: bytes=N-" or "bytes=N-M", 206 with Content-Range; 416 with "bytes */SIZE" past the
end) and If-Range (a range only while the validator still matches, else the whole file, 200).

Faults, set by the test through GET /_control?...:
  cut=PATH&after=N&times=K   the next K responses for PATH stop after N body bytes and close
                             the connection (the client sees a transfer cut short)
  slow=PATH&rate=B           PATH's body is sent at about B bytes/s (rate=0: full speed)
With --tls CERT KEY it speaks HTTPS (a self-signed certificate: pull must refuse it).
Every request except /_control is logged as one JSON line to --log: method, path, the Range
and If-Range headers, the status and the body bytes sent. The bound port is written to
--port-file once the server listens.
"""
import argparse
import email.utils
import json
import os
import ssl
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

lock = threading.Lock()
cuts = {}   # path -> [after, times]
slows = {}  # path -> bytes/s


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "pull-test/1"

    def log_message(self, fmt, *args):
        pass

    def record(self, status, sent):
        entry = {"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                 "if_range": self.headers.get("If-Range"), "status": status, "sent": sent}
        with lock, open(self.server.log_path, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def control(self, query):
        q = urllib.parse.parse_qs(query)
        with lock:
            if "cut" in q:
                cuts[q["cut"][0]] = [int(q["after"][0]), int(q.get("times", ["1"])[0])]
            if "slow" in q:
                slows[q["slow"][0]] = int(q["rate"][0])
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def plain(self, status, text, extra=()):
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(body)
        self.record(status, len(body) if self.command == "GET" else 0)

    def byte_range(self, size, etag, lastmod):
        """(first, last) of a Range the client may have, None for the whole file, or
        'bad' when it starts past the end."""
        rng = self.headers.get("Range")
        if not rng or not rng.startswith("bytes=") or "," in rng:
            return None
        ifr = self.headers.get("If-Range")
        if ifr is not None and ifr != etag and ifr != lastmod:
            return None
        first, _, last = rng[6:].partition("-")
        if not first.isdigit():
            return None
        first = int(first)
        last = int(last) if last.isdigit() else size - 1
        if first >= size:
            return "bad"
        return first, min(last, size - 1)

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/_control":
            return self.control(url.query)
        rel = urllib.parse.unquote(url.path).lstrip("/")
        path = os.path.realpath(os.path.join(self.server.root, rel))
        if not path.startswith(self.server.root + os.sep) or not os.path.isfile(path):
            return self.plain(404, "not found\n")
        st = os.stat(path)
        size = st.st_size
        etag = '"%x-%x"' % (size, st.st_mtime_ns)
        lastmod = email.utils.formatdate(st.st_mtime, usegmt=True)
        rng = self.byte_range(size, etag, lastmod)
        if rng == "bad":
            return self.plain(416, "range not satisfiable\n",
                              [("Content-Range", "bytes */%d" % size)])
        first, last = rng if rng else (0, size - 1)
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("ETag", etag)
        self.send_header("Last-Modified", lastmod)
        self.send_header("Accept-Ranges", "bytes")
        if rng:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (first, last, size))
        self.end_headers()
        self.send_body(url.path, path, first, last - first + 1, 206 if rng else 200)

    def send_body(self, key, path, first, count, status):
        with lock:
            cut = cuts.get(key)
            limit = count
            if cut and cut[1] > 0:
                limit = min(count, cut[0])
                cut[1] -= 1
            rate = slows.get(key, 0)
        sent = 0
        try:
            with open(path, "rb") as f:
                f.seek(first)
                while sent < limit:
                    chunk = f.read(min(16384, limit - sent))
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    sent += len(chunk)
                    if rate:
                        time.sleep(len(chunk) / rate)
        except (BrokenPipeError, ConnectionResetError):
            pass
        if sent < count:
            self.close_connection = True
        self.record(status, sent)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that went away (a cut or interrupted pull) is what the test does


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    a = ap.parse_args()
    srv = Server(("127.0.0.1", 0), Handler)
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*a.tls)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.root = os.path.realpath(a.root)
    srv.log_path = a.log
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(tmp, a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
