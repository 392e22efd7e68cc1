#!/usr/bin/env python3
"""A real HTTP/1.1 server on loopback for BatonNetwork's tests and benchmarks (standard library only).

    python3 server.py [--root DIR]

It binds 127.0.0.1 on a port the system chooses, prints that port on the first line of stdout, and
serves until its stdin closes (so it never outlives the process that started it). Every route that a
test needs to observe the client is keyed (`key=...`): `/_stats?key=K` reports what the server saw.

Routes
  /status/CODE?times=N&then=CODE2&key=K&retry_after=S|date:S&body=TEXT
        CODE for the first N requests of key K (all of them without `times`), then CODE2.
  /json?name=NAME                   {"name": NAME, "tags": ["a", "b"]}
  /echo                             JSON {"method", "length", "body"} of the request (any method)
  /delay-headers?ms=N&key=K         waits N ms before the status line, watching for the client to go
  /slow-body?bytes=N&chunk=C&interval_ms=I&key=K   headers at once, then C bytes every I ms
  /drop?bytes=N&after=M             announces N bytes, sends M, then resets the connection
  /bytes?n=N                        N bytes at full speed
  /concurrent?ms=N                  sleeps N ms; counts requests in flight at once
  /_stats?key=K                     {"max_concurrent", "max_connections" (beyond those open at the last reset), ...}
  /_await?key=K&requests=N|closed=1 /_stats, once that holds (or after timeout=S seconds, default 20)
  /_reset                           forgets the counts
  anything else                     a file under --root (the cookbook), or 404
"""

import email.utils
import json
import os
import select
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

ROOT = None
LOCK = threading.Lock()
# Notified whenever a count changes, for /_await.
CHANGED = threading.Condition(LOCK)
STATE = {"in_flight": 0, "max_concurrent": 0, "requests": {}, "closed_early": {}, "connections": 0,
         "max_connections": 0, "connections_at_reset": 0}


def reset():
    with LOCK:
        # Connections open at the reset (idle ones of earlier clients) are not counted after it.
        STATE.update(in_flight=0, max_concurrent=0, requests={}, closed_early={},
                     max_connections=STATE["connections"], connections_at_reset=STATE["connections"])


def count(key):
    """Counts a request of `key` and returns its number (1, 2, ...)."""
    with LOCK:
        STATE["requests"][key] = STATE["requests"].get(key, 0) + 1
        CHANGED.notify_all()
        return STATE["requests"][key]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "BatonTestServer/1"

    def log_message(self, *args):
        pass

    def finish(self):
        try:
            super().finish()
        finally:
            with LOCK:
                STATE["connections"] -= 1

    def setup(self):
        with LOCK:
            STATE["connections"] += 1
            STATE["max_connections"] = max(STATE["max_connections"], STATE["connections"])
        super().setup()
        # Headers and body go out in separate writes: without this, Nagle's algorithm holds the body
        # back until the client's delayed acknowledgement (40 ms on Linux).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # Every method goes through one dispatcher.
    def do_GET(self):
        self.dispatch()

    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_GET

    def dispatch(self):
        url = urlparse(self.path)
        query = {name: values[-1] for name, values in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        parts = [part for part in url.path.split("/") if part]
        route = parts[0] if parts else ""
        # Every request with a key is counted, whatever its route; `number` is its place (1, 2, ...).
        self.number = count(query["key"]) if "key" in query and not route.startswith("_") else 0
        try:
            handler = getattr(self, "route_" + route.replace("-", "_"), None)
            if handler is not None:
                handler(parts, query, body)
            else:
                self.serve_file(url.path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def reply(self, status, body=b"", content_type="application/octet-stream", headers=()):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def reply_json(self, status, value):
        self.reply(status, json.dumps(value).encode(), "application/json")

    def client_left(self, seconds):
        """Waits up to `seconds`; True as soon as the client closes its end of the connection."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
            if readable:
                try:
                    if self.connection.recv(1, socket.MSG_PEEK) == b"":
                        return True
                except OSError:
                    return True

    def mark_closed(self, key):
        with LOCK:
            STATE["closed_early"][key] = True
            CHANGED.notify_all()
        self.close_connection = True

    # Routes

    def route_status(self, parts, query, body):
        code = int(parts[1]) if len(parts) > 1 else 200
        number = self.number
        if "times" in query and number > int(query["times"]):
            code = int(query.get("then", "200"))
        headers = []
        after = query.get("retry_after")
        if after and code != 200:
            if after.startswith("date:"):
                when = time.time() + float(after[5:])
                headers.append(("Retry-After", email.utils.formatdate(when, usegmt=True)))
            else:
                headers.append(("Retry-After", after))
        text = query.get("body", f"status {code}, request {number}")
        self.reply(code, text.encode(), "text/plain", headers)

    def route_json(self, parts, query, body):
        self.reply_json(200, {"name": query.get("name", "baton"), "tags": ["a", "b"]})

    def route_echo(self, parts, query, body):
        self.reply_json(200, {"method": self.command, "length": len(body), "body": body[:64].decode("latin-1")})

    def route_delay_headers(self, parts, query, body):
        key = query.get("key", "delay-headers")
        if self.client_left(int(query.get("ms", "1000")) / 1000):
            return self.mark_closed(key)
        self.reply(200, b"late", "text/plain")

    def route_slow_body(self, parts, query, body):
        key = query.get("key", "slow-body")
        total = int(query.get("bytes", "1000"))
        chunk = int(query.get("chunk", "100"))
        interval = int(query.get("interval_ms", "100")) / 1000
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(total))
        self.end_headers()
        sent = 0
        while sent < total:
            piece = min(chunk, total - sent)
            try:
                self.wfile.write(b"x" * piece)
                self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError):
                return self.mark_closed(key)
            sent += piece
            if sent < total and self.client_left(interval):
                return self.mark_closed(key)

    def route_drop(self, parts, query, body):
        total = int(query.get("bytes", "100000"))
        after = int(query.get("after", "1000"))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(total))
        self.end_headers()
        self.wfile.write(b"d" * after)
        self.wfile.flush()
        # A reset, not a clean close: SO_LINGER with a zero timeout.
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.close_connection = True

    def route_bytes(self, parts, query, body):
        total = int(query.get("n", "1024"))
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(total))
        self.end_headers()
        block = bytes(range(256)) * 4096  # 1 MiB
        sent = 0
        while sent < total:
            piece = min(len(block), total - sent)
            self.wfile.write(block if piece == len(block) else block[:piece])
            sent += piece

    def route_concurrent(self, parts, query, body):
        with LOCK:
            STATE["in_flight"] += 1
            STATE["max_concurrent"] = max(STATE["max_concurrent"], STATE["in_flight"])
        try:
            time.sleep(int(query.get("ms", "20")) / 1000)
        finally:
            with LOCK:
                STATE["in_flight"] -= 1
        self.reply(200, b"ok", "text/plain")

    def route__stats(self, parts, query, body):
        key = query.get("key")
        with LOCK:
            value = {
                "max_concurrent": STATE["max_concurrent"],
                "max_connections": STATE["max_connections"] - STATE["connections_at_reset"],
                "in_flight": STATE["in_flight"],
                "requests": STATE["requests"].get(key, 0) if key else sum(STATE["requests"].values()),
                "closed_early": STATE["closed_early"].get(key, False) if key else bool(STATE["closed_early"]),
            }
        self.reply_json(200, value)

    def route__await(self, parts, query, body):
        """Answers /_stats once key K has `requests` requests (at least) or, with closed=1, once the
        client closed its connection early; or after `timeout` seconds (default 20), whatever holds."""
        key = query.get("key", "")
        wanted = int(query.get("requests", "0"))
        closed = query.get("closed") == "1"
        with CHANGED:
            CHANGED.wait_for(
                lambda: STATE["requests"].get(key, 0) >= wanted and (not closed or STATE["closed_early"].get(key, False)),
                timeout=float(query.get("timeout", "20")))
        self.route__stats(parts, query, body)

    def route__reset(self, parts, query, body):
        reset()
        self.reply_json(200, {})

    def serve_file(self, path):
        if ROOT is None:
            return self.reply(404, b"not found", "text/plain")
        full = os.path.realpath(os.path.join(ROOT, path.lstrip("/")))
        if not full.startswith(os.path.realpath(ROOT) + os.sep) or not os.path.isfile(full):
            return self.reply(404, b"not found", "text/plain")
        with open(full, "rb") as file:
            data = file.read()
        kind = "image/png" if full.endswith(".png") else "application/json"
        self.reply(200, data, kind)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024

    def handle_error(self, request, client_address):
        # A client that goes away mid-request is what the cancellation tests do: not an error here.
        if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
            super().handle_error(request, client_address)


def main():
    global ROOT
    if "--root" in sys.argv:
        ROOT = sys.argv[sys.argv.index("--root") + 1]
    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    # Serve until whoever started us closes our stdin (or dies).
    sys.stdin.read()
    os._exit(0)


if __name__ == "__main__":
    main()
