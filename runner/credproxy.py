"""A loopback credential proxy: the client holds a dummy key, the proxy adds the real one.

One proxy per rep listens on 127.0.0.1 (a free port). The client gets `ANTHROPIC_BASE_URL` = the
proxy and a dummy key, so nothing the agent's tools can read (its environment, /proc, its HOME)
holds the credential. Each request's head is rewritten: the client's `x-api-key` /
`authorization` are dropped, the real header is added, the path is put under the upstream base
URL (which may carry a path, e.g. the scripted model's per-rep one), and `Connection: close` is
asked for (one upstream connection per request). A request must carry a content-length (the
client's do).

The client's connection is kept alive: it carries the client's requests one after another (even
pipelined), and every reply ends by its framing, never by a close. The upstream's framing
(content-length, chunked) is kept; a body that ends only with the upstream connection (the
scripted model's SSE) is re-framed as chunked. The reply is relayed as it arrives (a streamed
reply stays streamed); a cut upstream cuts the client's connection (RST). Ending each reply by
closing was the cause of flaky `--network api-only` reps: over a unix socket the client (Bun)
may lose the tail of a reply when the close comes right after it ("empty or malformed response").

With `unix_path` it listens on that unix socket instead, for a rep confined without a network
(`--network api-only`): the client reaches the API through `ANTHROPIC_UNIX_SOCKET`, honoured by
2.1.197, and nothing else is reachable from inside.

Only `/v1/...` paths are forwarded (the Messages API and its token counter); anything else gets
403. The agent can still reach the model API through the proxy (that is the client's own path),
and the network is otherwise open: see docs/runner.md, "Threat model".
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import socketserver
import ssl
import threading
from urllib.parse import urlsplit

DUMMY_KEY = "evalb-proxy-dummy-key"
ALLOWED_PREFIX = "/v1/"
_DROP = {
    "x-api-key",
    "authorization",
    "host",
    "connection",
    "proxy-connection",
    "keep-alive",
    "expect",
    "upgrade",
    "te",
}
_HOP = {b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding", b"upgrade"}
_MAX_HEAD = 256 * 1024


class CredentialProxy:
    """Forward loopback requests to `upstream` (a base URL) with `headers` (the credential) added."""

    def __init__(self, upstream: str, headers: dict[str, str], unix_path: str | None = None) -> None:
        u = urlsplit(upstream)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"not an http(s) base URL: {upstream!r}")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.base_path = u.path.rstrip("/")
        self.headers = headers
        self.requests = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._clients: set[socket.socket] = set()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._handle(self.request)

        self.unix_path = unix_path
        self.server: socketserver.ThreadingTCPServer | socketserver.ThreadingUnixStreamServer
        if unix_path:  # for a rep without a network: only this socket is bound into it
            self.server = socketserver.ThreadingUnixStreamServer(unix_path, Handler)
        else:
            self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
            self.server.allow_reuse_address = True
            self.server.server_bind()
            self.server.server_activate()
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="evalb-credproxy", daemon=True)

    @property
    def url(self) -> str:
        """The base URL for the client (with a unix socket, the client connects to that instead)."""
        if self.unix_path:
            return "http://localhost"
        return f"http://127.0.0.1:{self.server.server_address[1]}"  # type: ignore[index]

    def start(self) -> CredentialProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with self._lock:  # connections kept alive for a next request: end them
            for sock in self._clients:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
        if self.unix_path:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)

    def __enter__(self) -> CredentialProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one client connection: requests one after another (keep-alive) --------------------------------
    def _handle(self, client: socket.socket) -> None:
        with self._lock:
            self._clients.add(client)
        try:
            reader = _Reader(client)
            while self._one(client, reader):
                pass
        finally:
            with self._lock:
                self._clients.discard(client)

    def _one(self, client: socket.socket, reader: _Reader) -> bool:
        """Serve one request; True if the connection stays open for the next one."""
        try:
            head = reader.head()
        except OSError:
            return False
        if head is None:
            return False
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            return _answer(client, 400, "bad request line", close=True)
        out = [f"{method} {self.base_path}{target} {version}", f"Host: {self._host_header()}"]
        length, close = 0, version != "HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "transfer-encoding":
                return _answer(client, 411, "the evalb credential proxy needs a content-length", close=True)
            if name == "content-length":
                try:
                    length = int(value.strip() or 0)
                except ValueError:
                    return _answer(client, 400, "bad content-length", close=True)
            if name == "connection" and "close" in value.lower():
                close = True
            if line and name not in _DROP:
                out.append(line)
        # the whole body first: then only the reply flows (a TLS socket is used one way at a time)
        try:
            body = reader.exactly(length)
        except OSError:
            return False
        if body is None:
            return False
        if not target.startswith(ALLOWED_PREFIX):
            with self._lock:
                self.refused += 1
            return _answer(client, 403, f"the evalb credential proxy forwards only {ALLOWED_PREFIX}*", close)
        out += [f"{k}: {v}" for k, v in self.headers.items()] + ["Connection: close"]
        try:
            upstream = self._connect()
        except OSError as e:
            return _answer(client, 502, f"the evalb credential proxy cannot reach the API: {e}", close)
        with self._lock:
            self.requests += 1
        with upstream:
            try:
                upstream.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + body)
            except OSError as e:
                return _answer(client, 502, f"the evalb credential proxy lost the API: {e}", close)
            return _relay(client, _Reader(upstream), method == "HEAD", close)

    def _host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=30)
        sock.settimeout(None)
        if self.scheme == "https":
            return ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        return sock


class _Reader:
    """Buffered reads from a socket: a message head, then exactly n bytes, or what comes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b""

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        self.buf += data
        return bool(data)

    def head(self) -> bytes | None:
        """The next head (without its blank line), or None at the end or past _MAX_HEAD."""
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > _MAX_HEAD or not self._fill():
                return None
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        return head

    def line(self) -> bytes | None:
        while b"\r\n" not in self.buf:
            if len(self.buf) > _MAX_HEAD or not self._fill():
                return None
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line

    def exactly(self, n: int) -> bytes | None:
        while len(self.buf) < n:
            if not self._fill():
                return None
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def some(self, limit: int) -> bytes:
        """Up to `limit` bytes, as soon as any are there (b"" at the end)."""
        if not self.buf:
            self._fill()
        data, self.buf = self.buf[:limit], self.buf[limit:]
        return data


class _Cut(Exception):
    """The upstream ended before its reply did."""


def _answer(sock: socket.socket, status: int, message: str, close: bool = False) -> bool:
    body = json.dumps({"type": "error", "error": {"type": "proxy_error", "message": message}}).encode()
    head = f"HTTP/1.1 {status} evalb\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
    head += "connection: close\r\n\r\n" if close else "\r\n"
    try:
        sock.sendall(head.encode() + body)
    except OSError:
        return False
    return not close


def _relay(client: socket.socket, upstream: _Reader, head_only: bool, close: bool) -> bool:
    """Copy the reply down as it arrives, framed so that its end never depends on a close.

    An upstream error, or an end inside a content-length or chunked body, cuts the client's
    connection (RST); a re-framed body ends where the upstream connection does (a cut there reads as
    a short reply, as it would without the proxy). True: the connection stays open."""
    try:
        while True:
            raw = upstream.head()
            if raw is None:  # nothing sent down yet: say so
                return _answer(client, 502, "the API closed the connection without a reply", close)
            lines = raw.split(b"\r\n")
            status = int(lines[0].split(b" ", 2)[1])
            if status >= 200:  # an interim 1xx reply is not the client's (no Expect is forwarded)
                break
        headers = [ln for ln in lines[1:] if ln]
        names = {ln.split(b":", 1)[0].strip().lower(): ln.split(b":", 1)[1].strip() for ln in headers}
        out = [lines[0]] + [ln for ln in headers if ln.split(b":", 1)[0].strip().lower() not in _HOP]
        if head_only or status in (204, 304):
            mode = "none"
        elif names.get(b"transfer-encoding", b"").lower().endswith(b"chunked"):
            mode = "chunked"
            out.append(b"transfer-encoding: " + names[b"transfer-encoding"])
        elif b"transfer-encoding" in names:  # coded, then ended by the close: chunked on top
            mode = "reframe"
            out.append(b"transfer-encoding: " + names[b"transfer-encoding"] + b", chunked")
        elif b"content-length" in names:
            mode = "length"
        else:
            mode = "reframe"
            out.append(b"transfer-encoding: chunked")
        if close:
            out.append(b"connection: close")
        client.sendall(b"\r\n".join(out) + b"\r\n\r\n")
        if mode == "length":
            _copy_length(client, upstream, int(names[b"content-length"]))
        elif mode == "chunked":
            _copy_chunked(client, upstream)
        elif mode == "reframe":
            while data := upstream.some(65536):
                client.sendall(b"%x\r\n%s\r\n" % (len(data), data))
            client.sendall(b"0\r\n\r\n")
    except (OSError, ValueError, IndexError, _Cut):
        # the upstream broke (or the client went away): break the client's connection (RST)
        with contextlib.suppress(OSError):
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        close = True
    if close:
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_RDWR)
    return not close


def _copy_length(client: socket.socket, upstream: _Reader, n: int) -> None:
    while n > 0:
        data = upstream.some(min(n, 65536))
        if not data:
            raise _Cut
        client.sendall(data)
        n -= len(data)


def _copy_chunked(client: socket.socket, upstream: _Reader) -> None:
    while True:
        line = upstream.line()
        if line is None:
            raise _Cut
        size = int(line.split(b";", 1)[0].strip(), 16)
        client.sendall(line + b"\r\n")
        if size == 0:
            break
        _copy_length(client, upstream, size + 2)  # the data and its CRLF
    while True:  # trailers, up to the blank line
        line = upstream.line()
        if line is None:
            raise _Cut
        client.sendall(line + b"\r\n")
        if not line:
            return
