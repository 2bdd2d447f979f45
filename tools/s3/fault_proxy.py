"""A fault-injecting HTTP/1.1 proxy for loopback tests of object storage.

It sits between an S3 client (segpredict, boto3, a test) and an
S3-compatible server (moto's, started by tests/util/s3.rs), or an Azure
Blob client and Azurite (tests/util/azure.rs: SharedKey signs no host, so
it passes unchanged too; a "fail" there is Azure's 503 ServerBusy), and forwards
every request unchanged: method, target, headers (Host included, so a SigV4
signature made for the proxy's address still matches what the server sees)
and body, relayed as the raw bytes read off the socket (Content-Length or
chunked framing, so `aws-chunked` / `STREAMING-...` payloads pass through
untouched). For a share of requests it injects a fault instead:

  fail           answer 503 SlowDown (S3's XML error; ServerBusy to a
                 request with x-ms-version) without forwarding
  reset          reset the connection (SO_LINGER 0): before any response,
                 not forwarded; or, for a GET, half the body then the reset
                 (the request was served)
  stall          send the response's head at once and dribble its body over
                 --stall-seconds (an empty body: wait, then send the head)
  lose-response  forward the request (the server applies it), then reset
                 before any response: the case where a retried conditional
                 put meets its own earlier write
  hold           hold the whole request for --hold-seconds, then forward it
                 whether or not its client is still there: a PUT still in
                 flight when its writer is killed, landing much later
  corrupt        forward the request, then flip one byte (the middle one)
                 of a 2xx GET's body: damage in transit, the stored object
                 intact (others pass unharmed)

Besides the rates, "fail_next": N (POST /__proxy/config) answers the next
N requests (of those targeted) 503 SlowDown, whatever the draw: a burst of
consecutive 503s; a rate of fail 1.0 set and later unset is an outage.
"corrupt_next": N corrupts the next N targeted GETs the same way.

--methods and --path-contains keep the faults to some requests (only PUTs,
only `_SUCCESS`); --latency-seconds delays every forwarded request, as a
real network's round trip would (the reader's range-request concurrency is
measured against it).

Each request draws once from a seeded generator, so a given seed and the
same request order give the same faults. Control endpoints (never faulted,
never counted):

  GET  /__proxy/stats         counts of requests, forwards and each fault
  POST /__proxy/stats/reset   zero the counts
  GET  /__proxy/config        the rates in force
  POST /__proxy/config        JSON {"fail": 0.1, "methods": "PUT", ...}: change some

Usage:
  python tools/s3/fault_proxy.py --target 127.0.0.1:PORT [--listen-port 0]
      [--fail F] [--reset F] [--stall F] [--lose-response F]
      [--stall-seconds S] [--latency-seconds S] [--methods PUT,POST]
      [--path-contains TEXT] [--seed N] [--log FILE]

The first line on stdout is the port it listens on (useful with
--listen-port 0). --log writes one JSON line per request (method, path,
Range, status, body bytes each way, fault): requests and bytes per row group
for benches/cpu/s3.py. Python's standard library only.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import threading
import time
from collections import Counter

FAULTS = ("fail", "reset", "stall", "lose_response", "hold", "corrupt")
# Settings that are counts, not shares: requests still to fail in a row.
COUNTS = ("fail_next", "corrupt_next")
# Which requests may meet a fault: methods (comma-separated, empty: all) and
# a substring of the path ("_SUCCESS", "uploadId=").
TARGETS = ("methods", "path_contains")
MAX_HEAD = 64 * 1024
UPSTREAM_TIMEOUT_S = 300


class ProxyState:
    """Rates, the seeded draw and the counts, shared by connection threads."""

    def __init__(self, rates: dict, seed: int, log_path: str | None):
        self.lock = threading.Lock()
        self.rng = random.Random(seed)
        self.rates = dict(rates)
        self.counts: Counter = Counter()
        self.log = open(log_path, "a", encoding="utf-8") if log_path else None

    def draw(self, method: str, path: str) -> tuple[str | None, float, bool]:
        """The fault for the next request (or None), the stall time, and a
        coin for a GET's reset: before the response or mid-body. Every
        request draws, targeted or not, so the sequence stays the seed's."""
        with self.lock:
            u = self.rng.random()
            mid_body = self.rng.random() < 0.5
            stall_s = self.rates["stall_seconds"]
            methods = [m for m in self.rates["methods"].upper().split(",") if m]
            if (methods and method not in methods) or self.rates["path_contains"] not in path:
                return None, stall_s, mid_body
            if self.rates["fail_next"] > 0:
                self.rates["fail_next"] -= 1
                return "fail", stall_s, mid_body
            if self.rates["corrupt_next"] > 0 and method == "GET":
                self.rates["corrupt_next"] -= 1
                return "corrupt", stall_s, mid_body
            edge = 0.0
            for name in FAULTS:
                edge += self.rates[name]
                if u < edge:
                    return name, stall_s, mid_body
            return None, stall_s, mid_body

    def latency(self) -> float:
        with self.lock:
            return self.rates["latency_seconds"]

    def count(self, **increments: int) -> None:
        with self.lock:
            self.counts.update(increments)

    def record(self, entry: dict) -> None:
        if self.log is None:
            return
        with self.lock:
            self.log.write(json.dumps(entry) + "\n")
            self.log.flush()

    def stats(self) -> dict:
        with self.lock:
            keys = ["requests", "forwarded", *FAULTS, "reset_before", "reset_mid_body", "corrupt_skipped"]
            out = {k: self.counts.get(k, 0) for k in keys}
            out.update(self.counts)
            return out

    def configure(self, changes: dict) -> dict:
        with self.lock:
            for key, value in changes.items():
                key = key.replace("-", "_")
                if key not in self.rates:
                    raise ValueError(f"unknown setting {key!r}; known: {sorted(self.rates)}")
                if key in TARGETS:
                    self.rates[key] = str(value)
                elif key in COUNTS:
                    self.rates[key] = int(value)
                else:
                    self.rates[key] = float(value)
            if sum(self.rates[f] for f in FAULTS) > 1.0:
                raise ValueError(f"fault rates add up to more than 1: {self.rates}")
            return dict(self.rates)


class Message:
    """One HTTP message's head as read: the raw bytes and the parsed parts."""

    def __init__(self, raw: bytes):
        self.raw = raw
        lines = raw.decode("latin-1").split("\r\n")
        self.start = lines[0].split(" ", 2)
        self.headers: dict[str, str] = {}
        for line in lines[1:]:
            if ":" in line:
                name, value = line.split(":", 1)
                self.headers[name.strip().lower()] = value.strip()

    def header(self, name: str) -> str:
        return self.headers.get(name, "")

    def wants_close(self) -> bool:
        return "close" in self.header("connection").lower()


def read_head(rfile) -> Message | None:
    """The next message's head, or None at a clean end of stream."""
    raw = b""
    while True:
        line = rfile.readline(MAX_HEAD)
        if not line:
            if raw:
                raise ConnectionError("end of stream inside a message head")
            return None
        if not raw and line in (b"\r\n", b"\n"):
            continue  # a stray line between messages
        raw += line
        if line in (b"\r\n", b"\n"):
            return Message(raw)
        if len(raw) > MAX_HEAD:
            raise ConnectionError("message head too long")


def read_exact(rfile, n: int) -> bytes:
    data = rfile.read(n)
    if len(data) != n:
        raise ConnectionError(f"end of stream after {len(data)} of {n} body bytes")
    return data


def read_chunked(rfile) -> bytes:
    """A chunked body with its framing, as raw bytes (trailers included)."""
    raw = b""
    while True:
        size_line = rfile.readline(MAX_HEAD)
        if not size_line:
            raise ConnectionError("end of stream inside a chunked body")
        raw += size_line
        size = int(size_line.split(b";")[0].strip(), 16)
        if size == 0:
            while True:
                trailer = rfile.readline(MAX_HEAD)
                raw += trailer
                if trailer in (b"\r\n", b"\n", b""):
                    return raw
        raw += read_exact(rfile, size + 2)


def read_body(rfile, head: Message, until_close: bool) -> bytes:
    """The body as framed on the wire: chunked, Content-Length, or (a
    response with neither) everything up to the end of the stream."""
    if "chunked" in head.header("transfer-encoding").lower():
        return read_chunked(rfile)
    length = head.header("content-length")
    if length:
        return read_exact(rfile, int(length))
    return rfile.read() if until_close else b""


def response_has_body(method: str, status: int) -> bool:
    return method != "HEAD" and status >= 200 and status not in (204, 304)


def reset(conn: socket.socket) -> None:
    """Close with SO_LINGER 0: the peer sees a connection reset."""
    try:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    finally:
        conn.close()


def slow_down(request_id: str, azure: bool = False) -> bytes:
    """S3's 503 SlowDown, or for an Azure request (it carries x-ms-version)
    the Blob service's 503 ServerBusy, each in its own error shape."""
    if azure:
        body = (
            '<?xml version="1.0" encoding="utf-8"?>\n<Error><Code>ServerBusy</Code>'
            f"<Message>The server is currently unable to receive requests. RequestId:{request_id}</Message></Error>"
        ).encode()
        head = (
            "HTTP/1.1 503 Server Busy\r\nContent-Type: application/xml\r\n"
            f"Content-Length: {len(body)}\r\nx-ms-request-id: {request_id}\r\n"
            "x-ms-error-code: ServerBusy\r\n\r\n"
        ).encode()
        return head + body
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
        "<Message>Please reduce your request rate.</Message>"
        f"<RequestId>{request_id}</RequestId></Error>"
    ).encode()
    head = (
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\n"
        f"Content-Length: {len(body)}\r\nx-amz-request-id: {request_id}\r\n\r\n"
    ).encode()
    return head + body


def json_response(status: int, payload) -> bytes:
    body = json.dumps(payload).encode()
    reason = "OK" if status == 200 else "Bad Request"
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def control(state: ProxyState, head: Message, body: bytes) -> bytes:
    method, target = head.start[0], head.start[1]
    try:
        if target == "/__proxy/stats" and method == "GET":
            return json_response(200, state.stats())
        if target == "/__proxy/stats/reset" and method == "POST":
            with state.lock:
                state.counts.clear()
            return json_response(200, {})
        if target == "/__proxy/config" and method == "GET":
            with state.lock:
                return json_response(200, dict(state.rates))
        if target == "/__proxy/config" and method == "POST":
            return json_response(200, state.configure(json.loads(body or b"{}")))
        return json_response(400, {"error": f"unknown control request {method} {target}"})
    except (ValueError, TypeError) as e:
        return json_response(400, {"error": str(e)})


class Exchange:
    """One request from the client, forwarded to the target (or not)."""

    def __init__(self, state: ProxyState, target: tuple[str, int], conn, rfile, head: Message):
        self.state, self.target, self.conn, self.rfile, self.head = state, target, conn, rfile, head
        self.method = head.start[0]
        self.entry = {"method": self.method, "path": head.start[1], "range": head.header("range")}

    def run(self) -> bool:
        """Serves the exchange; False when the client connection must end."""
        expect = self.head.header("expect").lower() == "100-continue"
        body = b"" if expect else read_body(self.rfile, self.head, until_close=False)
        fault, stall_s, mid_body = self.state.draw(self.method, self.head.start[1])
        self.state.count(requests=1)
        self.entry["fault"] = fault
        if fault == "fail":
            self.state.count(fail=1)
            azure = bool(self.head.header("x-ms-version"))
            self.conn.sendall(slow_down(f"proxy{random.getrandbits(32):08x}", azure))
            self.state.record({**self.entry, "status": 503, "bytes_in": len(body), "bytes_out": 0})
            return not expect  # the unsent body would desynchronise the stream
        if fault == "reset" and not (self.method == "GET" and mid_body):
            self.state.count(reset=1, reset_before=1)
            self.state.record({**self.entry, "status": None, "bytes_in": len(body), "bytes_out": 0})
            reset(self.conn)
            return False
        delay = self.state.latency()
        if fault == "hold":
            self.state.count(hold=1)
            with self.state.lock:
                delay += self.state.rates["hold_seconds"]
        if delay > 0:
            time.sleep(delay)
        response, resp_body, sent_body = self.forward(body, expect)
        if fault == "hold":
            self.state.count(held_landed=1)
        self.state.count(forwarded=1)
        return self.respond(fault, stall_s, response, resp_body, sent_body)

    def forward(self, body: bytes, expect: bool) -> tuple[Message, bytes, bool]:
        """Sends the request upstream; the final response head and body, and
        whether the client's body was read (False: refused before it)."""
        with socket.create_connection(self.target, timeout=UPSTREAM_TIMEOUT_S) as up:
            upfile = up.makefile("rb")
            up.sendall(self.head.raw + body)
            response = read_head(upfile)
            sent_body = not expect
            if expect and response is not None and response.start[1] == "100":
                self.conn.sendall(response.raw)
                body = read_body(self.rfile, self.head, until_close=False)
                up.sendall(body)
                response = read_head(upfile)
                sent_body = True
            # Werkzeug sends a second 100 Continue when the application reads
            # the body; the client has had its one: skip the rest.
            while response is not None and response.start[1].startswith("1"):
                response = read_head(upfile)
            if response is None:
                raise ConnectionError("the target closed without a response")
            status = int(response.start[1])
            resp_body = b""
            if response_has_body(self.method, status):
                resp_body = read_body(upfile, response, until_close=True)
            self.entry.update(status=status, bytes_in=len(body))
            return response, resp_body, sent_body

    def respond(self, fault, stall_s: float, response: Message, body: bytes, sent_body: bool) -> bool:
        self.entry["bytes_out"] = len(body)
        self.state.record(self.entry)
        if fault == "lose_response":
            self.state.count(lose_response=1)
            reset(self.conn)
            return False
        if fault == "reset":  # a GET, mid-body
            self.state.count(reset=1, reset_mid_body=1)
            self.conn.sendall(response.raw + body[: len(body) // 2])
            reset(self.conn)
            return False
        if fault == "corrupt":
            body = self.corrupted(response, body)
        if fault == "stall":
            self.state.count(stall=1)
            self.dribble(response.raw, body, stall_s)
        else:
            self.conn.sendall(response.raw + body)
        self.state.count(bytes_out=len(body))
        framed = response.header("content-length") or "chunked" in response.header("transfer-encoding")
        has_body = response_has_body(self.method, int(response.start[1]))
        keep = sent_body and not (response.wants_close() or self.head.wants_close())
        return keep and (framed or not has_body)

    def corrupted(self, response: Message, body: bytes) -> bytes:
        """The body with its middle byte flipped, for a 2xx GET whose body
        is framed by Content-Length (chunked framing would break)."""
        status = int(response.start[1])
        if self.method != "GET" or not (200 <= status < 300) or not body or not response.header("content-length"):
            self.state.count(corrupt_skipped=1)
            return body
        self.state.count(corrupt=1)
        at = len(body) // 2
        return body[:at] + bytes([body[at] ^ 0xFF]) + body[at + 1 :]

    def dribble(self, head: bytes, body: bytes, seconds: float) -> None:
        if not body:
            time.sleep(seconds)
            self.conn.sendall(head)
            return
        self.conn.sendall(head)
        pieces = 8
        step = max(1, -(-len(body) // pieces))
        for at in range(0, len(body), step):
            time.sleep(seconds / pieces)
            self.conn.sendall(body[at : at + step])


def serve_connection(state: ProxyState, target: tuple[str, int], conn: socket.socket) -> None:
    rfile = conn.makefile("rb")
    try:
        while True:
            head = read_head(rfile)
            if head is None:
                break
            if head.start[1].startswith("/__proxy/"):
                body = read_body(rfile, head, until_close=False)
                conn.sendall(control(state, head, body))
                continue
            if not Exchange(state, target, conn, rfile, head).run():
                break
    except (OSError, ConnectionError, ValueError, IndexError):
        pass  # the client went away or sent garbage: end this connection only
    finally:
        try:
            conn.close()
        except OSError:
            pass


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", required=True, help="HOST:PORT of the S3 server")
    p.add_argument("--listen-port", type=int, default=0, help="0: pick a free one (printed first on stdout)")
    p.add_argument("--fail", type=float, default=0.0, help="share of requests answered 503 SlowDown")
    p.add_argument("--reset", type=float, default=0.0, help="share of requests whose connection is reset")
    p.add_argument("--stall", type=float, default=0.0, help="share of responses dribbled over --stall-seconds")
    p.add_argument("--lose-response", type=float, default=0.0, help="share forwarded, then reset before the response")
    p.add_argument("--corrupt", type=float, default=0.0, help="share of GET bodies with one byte flipped")
    p.add_argument("--stall-seconds", type=float, default=2.0)
    p.add_argument("--hold", type=float, default=0.0, help="share of requests held for --hold-seconds, then forwarded")
    p.add_argument("--hold-seconds", type=float, default=10.0)
    p.add_argument("--methods", default="", help="faults only for these methods (comma-separated; default: all)")
    p.add_argument("--path-contains", default="", help="faults only for paths containing this")
    p.add_argument("--latency-seconds", type=float, default=0.0, help="delay before forwarding each request")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log", help="append one JSON line per request to this file")
    a = p.parse_args()
    host, _, port = a.target.rpartition(":")
    target = (host or "127.0.0.1", int(port))
    rates = {"fail": a.fail, "reset": a.reset, "stall": a.stall, "lose_response": a.lose_response, "corrupt": a.corrupt,
             "hold": a.hold, "hold_seconds": a.hold_seconds,
             "fail_next": 0, "corrupt_next": 0, "stall_seconds": a.stall_seconds,
             "latency_seconds": a.latency_seconds, "methods": a.methods, "path_contains": a.path_contains}
    state = ProxyState({k: ("" if k in TARGETS else 0 if k in COUNTS else 0.0) for k in rates}, a.seed, a.log)
    try:
        state.configure(rates)
    except ValueError as e:
        sys.exit(f"fault_proxy: {e}")
    listener = socket.create_server(("127.0.0.1", a.listen_port), backlog=256)
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=serve_connection, args=(state, target, conn), daemon=True).start()


if __name__ == "__main__":
    main()
