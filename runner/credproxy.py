"""A loopback credential proxy: the client holds a dummy key, the proxy adds the real one.

One proxy per rep listens on 127.0.0.1 (a free port). The client gets `ANTHROPIC_BASE_URL` = the
proxy and a dummy key, so nothing the agent's tools can read (its environment, /proc, its HOME)
holds the credential. Each request's head is rewritten: the client's `x-api-key` /
`authorization` are dropped, the real header is added, the path is put under the upstream base
URL (which may carry a path, e.g. the scripted model's per-rep one), and `Connection: close` is
asked for, so every request on a connection passes through here (one request per connection).
The response is relayed byte for byte as it arrives (a streamed reply stays streamed; a cut
upstream connection is cut downstream too). A request must carry a content-length (the client's do).

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
_DROP = {"x-api-key", "authorization", "host", "connection", "proxy-connection", "keep-alive"}
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
        if self.unix_path:
            with contextlib.suppress(OSError):
                os.unlink(self.unix_path)

    def __enter__(self) -> CredentialProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- one connection: one request ------------------------------------------------------------------
    def _handle(self, client: socket.socket) -> None:
        head, rest = _read_head(client)
        if head is None:
            return
        lines = head.decode("latin-1").split("\r\n")
        try:
            method, target, version = lines[0].split(" ", 2)
        except ValueError:
            return _answer(client, 400, "bad request line")
        if not target.startswith(ALLOWED_PREFIX):
            self.refused += 1
            return _answer(client, 403, f"the evalb credential proxy forwards only {ALLOWED_PREFIX}*")
        out = [f"{method} {self.base_path}{target} {version}", f"Host: {self._host_header()}"]
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "transfer-encoding":
                return _answer(client, 411, "the evalb credential proxy needs a content-length")
            if name == "content-length":
                length = int(value.strip() or 0)
            if line and name not in _DROP:
                out.append(line)
        # the whole body first: then only the reply flows (a TLS socket is used one way at a time)
        while len(rest) < length:
            chunk = client.recv(min(65536, length - len(rest)))
            if not chunk:
                return
            rest += chunk
        out += [f"{k}: {v}" for k, v in self.headers.items()] + ["Connection: close"]
        try:
            upstream = self._connect()
        except OSError as e:
            return _answer(client, 502, f"the evalb credential proxy cannot reach the API: {e}")
        self.requests += 1
        with upstream:
            upstream.sendall(("\r\n".join(out) + "\r\n\r\n").encode("latin-1") + rest)
            _relay(client, upstream, chunk_close_delimited=self.unix_path is not None)

    def _host_header(self) -> str:
        default = 443 if self.scheme == "https" else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"

    def _connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=30)
        sock.settimeout(None)
        if self.scheme == "https":
            return ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        return sock


def _read_head(sock: socket.socket) -> tuple[bytes | None, bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk or len(buf) > _MAX_HEAD:
            return None, b""
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head, rest


def _answer(sock: socket.socket, status: int, message: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": "proxy_error", "message": message}}).encode()
    head = f"HTTP/1.1 {status} evalb\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        sock.sendall(head.encode() + body)


def _relay(client: socket.socket, upstream: socket.socket, chunk_close_delimited: bool = False) -> None:
    """Copy the response down as it arrives, until the upstream closes.

    `chunk_close_delimited`: a reply whose body ends only with the connection (no content-length,
    not chunked, as the scripted model's) is re-framed as chunked: over a unix socket the client
    (Bun's fetch) reads such a body as empty. A cut upstream then leaves the chunked body unfinished."""
    framed = False
    try:
        first = upstream.recv(65536)
        if chunk_close_delimited:
            while first and b"\r\n\r\n" not in first and len(first) < _MAX_HEAD:
                more = upstream.recv(65536)
                if not more:
                    break
                first += more
            head, sep, body = first.partition(b"\r\n\r\n")
            names = {ln.split(b":", 1)[0].strip().lower() for ln in head.split(b"\r\n")[1:]}
            if sep and not names & {b"content-length", b"transfer-encoding"}:
                framed = True
                first = head + b"\r\ntransfer-encoding: chunked\r\n\r\n" + (_chunk(body) if body else b"")
        chunk = first
        while chunk:
            client.sendall(chunk)
            chunk = upstream.recv(65536)
            if framed and chunk:
                chunk = _chunk(chunk)
        if framed:
            client.sendall(b"0\r\n\r\n")
    except OSError:
        # the upstream broke: break the client's connection too (RST), never end it cleanly
        with contextlib.suppress(OSError):
            client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        client.shutdown(socket.SHUT_RDWR)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)
