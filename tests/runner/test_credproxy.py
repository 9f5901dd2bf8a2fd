"""The loopback credential proxy, against a real upstream HTTP server on loopback; the route choice;
the per-rep limit options."""

from __future__ import annotations

import http.client
import json
import re
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO, ClassVar

import pytest

from evalb import paths
from evalb.errors import ClientError, UsageError
from runner.confine import visible_paths
from runner.credproxy import DUMMY_KEY, CredentialProxy
from runner.environment import DEFAULT_API, client_env, proxy_route
from runner.limits import parse_size


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: ClassVar[list[dict[str, str]]] = []

    def log_message(self, *a: object) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        Upstream.seen.append({"path": self.path, **{k.lower(): v for k, v in self.headers.items()}})
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for part in (b"event: a\n\n", body, b"event: z\n\n"):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def upstream() -> Iterator[str]:
    Upstream.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/r/abc"
    srv.shutdown()
    srv.server_close()


def _post(url: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("POST", path, body=b'{"hello": 1}', headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def test_proxy_swaps_the_key_and_streams_the_reply(upstream: str) -> None:
    with CredentialProxy(upstream, {"x-api-key": "real-key"}) as proxy:
        for _ in range(2):
            status, body = _post(
                proxy.url, "/v1/messages?beta=true", {"x-api-key": DUMMY_KEY, "authorization": "Bearer x"}
            )
            assert status == 200 and body == b'event: a\n\n{"hello": 1}event: z\n\n'
        assert proxy.requests == 2
    assert [s["path"] for s in Upstream.seen] == ["/r/abc/v1/messages?beta=true"] * 2
    for s in Upstream.seen:
        assert s["x-api-key"] == "real-key" and "authorization" not in s
        assert s["host"] == upstream.split("/")[2] and s["connection"] == "close"


def test_proxy_forwards_only_the_api(upstream: str) -> None:
    with CredentialProxy(upstream, {"x-api-key": "real-key"}) as proxy:
        status, body = _post(proxy.url, "/api/oauth/profile", {})
        assert status == 403 and b"forwards only /v1/" in body
        assert proxy.refused == 1
    assert Upstream.seen == []


def test_unreachable_upstream_is_a_502() -> None:
    with CredentialProxy("http://127.0.0.1:9", {"x-api-key": "k"}) as proxy:
        status, body = _post(proxy.url, "/v1/messages", {})
    assert status == 502 and "cannot reach the API" in json.loads(body)["error"]["message"]


def test_route_per_credential_kind() -> None:
    assert proxy_route(None, {"ANTHROPIC_API_KEY": "sk"}) == (
        DEFAULT_API,
        {"x-api-key": "sk"},
        "ANTHROPIC_API_KEY",
    )
    assert proxy_route(None, {"CLAUDE_CODE_OAUTH_TOKEN": "o", "ANTHROPIC_BASE_URL": "https://gw"}) == (
        "https://gw",
        {"authorization": "Bearer o"},
        "CLAUDE_CODE_OAUTH_TOKEN",
    )
    assert proxy_route(None, {"CLAUDE_CODE_USE_BEDROCK": "1", "AWS_REGION": "x"}) is None
    with pytest.raises(ClientError, match="no credentials"):
        proxy_route(None, {})
    env, note = client_env(
        Path("/h"),
        base_url=None,
        source={"ANTHROPIC_API_KEY": "sk-real"},
        proxy=("http://127.0.0.1:1", "ANTHROPIC_API_KEY"),
    )
    assert env["ANTHROPIC_API_KEY"] == DUMMY_KEY and "sk-real" not in json.dumps(env)
    assert "credential proxy" in note


def test_checkout_toolchains_are_never_bound(tmp_path: Path) -> None:
    """A PATH entry inside the checkout (its .venv/bin) or holding it is not made visible."""
    repo = paths.REPO_ROOT.resolve()
    outside = tmp_path / "opt" / "tool" / "bin"
    outside.mkdir(parents=True)
    path_env = f"{repo}/.venv/bin:{repo}:/usr/bin:{outside}"
    got = visible_paths([], path_env, Path("/nonexistent-home"), hidden=[repo])
    assert got == [outside.parent]


def test_home_toolchains_bind_their_top_entry_but_never_local_share(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for d in (".pyenv/shims", ".local/bin", ".local/lib/python3.11", ".local/share/keyrings"):
        (home / d).mkdir(parents=True)
    got = visible_paths([], f"{home}/.pyenv/shims:{home}/.local/bin", home)
    assert sorted(got) == sorted([home / ".pyenv", home / ".local/bin", home / ".local/lib"])


def test_sizes() -> None:
    assert parse_size("4G", "x") == 4 << 30 and parse_size("512m", "x") == 512 << 20
    assert parse_size("none", "x") is None and parse_size("100KiB", "x") == 100 << 10
    with pytest.raises(UsageError, match="not a size"):
        parse_size("lots", "--mem-limit")


def test_proxy_speaks_tls_to_the_upstream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real API is https: the proxy verifies the upstream's certificate (here a self-signed one
    made trusted through SSL_CERT_FILE) and relays the reply."""
    import ssl
    import subprocess

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    Upstream.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with CredentialProxy(f"https://127.0.0.1:{srv.server_address[1]}", {"x-api-key": "tls-key"}) as proxy:
            status, body = _post(proxy.url, "/v1/messages", {"x-api-key": DUMMY_KEY})
    finally:
        srv.shutdown()
        srv.server_close()
    assert status == 200 and b'{"hello": 1}' in body
    assert Upstream.seen[0]["x-api-key"] == "tls-key" and Upstream.seen[0]["path"] == "/v1/messages"


# -- framing and keep-alive: replies split anyhow, several requests on one connection -----------------
SSE = b"event: message_start\ndata: {}\n\nevent: message_stop\ndata: {}\n\n"
REPLIES = {  # the reply head and body pieces, each written on its own (split across the framing)
    "close-delimited": [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r", b"\n",
                        SSE[:7], SSE[7:40], SSE[40:]],
    "content-length": [b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n" % len(SSE), b"\r\n" + SSE[:3], SSE[3:]],
    "chunked": [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n%x" % 20, b"\r\n" + SSE[:20] + b"\r",
                b"\n%x\r\n%s\r\n0\r\n" % (len(SSE) - 20, SSE[20:]), b"x-trailer: 1\r\n", b"\r\n"],
}  # fmt: skip


class RawUpstream(socketserver.BaseRequestHandler):
    """Reads one request, answers with REPLIES[kind] piece by piece, then closes (as asked)."""

    kind = "close-delimited"
    heads: ClassVar[list[bytes]] = []

    def handle(self) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self.request.recv(65536)
        head, _, body = buf.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))  # type: ignore[union-attr]
        while len(body) < length:
            body += self.request.recv(65536)
        RawUpstream.heads.append(head + b"\r\n\r\n" + body)
        for piece in REPLIES[self.kind]:
            self.request.sendall(piece)
            time.sleep(0.005)


@pytest.fixture
def raw_upstream() -> Iterator[str]:
    RawUpstream.heads = []
    srv = socketserver.ThreadingTCPServer(("127.0.0.1", 0), RawUpstream)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/r/x"
    srv.shutdown()
    srv.server_close()


def _read_reply(f: BinaryIO) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 reply from a stream; its body must end by its framing (never by a close)."""
    status = int(f.readline().split()[1])
    headers: dict[str, str] = {}
    while (line := f.readline()) not in (b"\r\n", b""):
        name, _, value = line.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, f.read(int(headers["content-length"]))
    assert headers.get("transfer-encoding") == "chunked", f"a reply that ends only with a close: {headers}"
    body = b""
    while size := int(f.readline().split(b";")[0], 16):
        body += f.read(size)
        assert f.read(2) == b"\r\n"
    while f.readline() not in (b"\r\n", b""):  # trailers
        pass
    return status, headers, body


def _request(n: int) -> bytes:
    body = b'{"n": %d}' % n
    return b"POST /v1/messages HTTP/1.1\r\nhost: x\r\nx-api-key: dummy\r\ncontent-length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


@pytest.mark.parametrize("kind", sorted(REPLIES))
@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_replies_are_framed_and_the_connection_kept_for_the_next_request(
    raw_upstream: str, kind: str, transport: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The root cause of the flaky `--network api-only` rep: the proxy ended every reply by closing
    the client's connection, and the client (Bun) over a unix socket may lose a reply's tail when the
    close comes with it. Now each reply ends by its framing (a close-delimited one re-framed as
    chunked), no `connection: close` is added, and the connection serves the next requests, even
    pipelined ones (several in one write); the reply pieces split the head and the chunk lines."""
    monkeypatch.setattr(RawUpstream, "kind", kind)
    unix = str(tmp_path / "p.sock") if transport == "unix" else None
    with CredentialProxy(raw_upstream, {"x-api-key": "real"}, unix_path=unix) as proxy:
        if unix:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(unix)
        else:
            sock = socket.create_connection(("127.0.0.1", int(proxy.url.rsplit(":", 1)[1])))
        with sock, sock.makefile("rb") as f:
            sock.settimeout(10)
            sock.sendall(_request(1))
            replies = [_read_reply(f)]
            sock.sendall(_request(2) + _request(3))  # two in one write, on the same connection
            replies += [_read_reply(f), _read_reply(f)]
            for status, headers, body in replies:
                assert status == 200 and body == SSE and "connection" not in headers
            sock.settimeout(0.2)  # still open: no end of stream after the last reply
            with pytest.raises(TimeoutError):
                sock.recv(1)
        assert proxy.requests == 3
    assert [h.endswith(b'{"n": %d}' % n) for n, h in enumerate(RawUpstream.heads, 1)] == [True] * 3
    assert all(b"x-api-key: real" in h and b"dummy" not in h for h in RawUpstream.heads)


def test_a_cut_reply_is_never_complete(raw_upstream: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An upstream that closes inside a content-length body: the client's connection breaks too."""
    monkeypatch.setitem(REPLIES, "cut", REPLIES["content-length"][:2])
    monkeypatch.setattr(RawUpstream, "kind", "cut")
    with CredentialProxy(raw_upstream, {"x-api-key": "real"}) as proxy:
        conn = http.client.HTTPConnection("127.0.0.1", int(proxy.url.rsplit(":", 1)[1]), timeout=10)
        conn.request("POST", "/v1/messages", body=b"{}")
        resp = conn.getresponse()
        with pytest.raises((http.client.IncompleteRead, ConnectionError)):
            resp.read()


def test_concurrent_keep_alive_clients(upstream: str) -> None:
    """Eight clients at once, each sending five requests on its own kept-alive connection."""
    errors: list[BaseException] = []

    def client(k: int) -> None:
        try:
            host, port = proxy.url.removeprefix("http://").split(":")
            conn = http.client.HTTPConnection(host, int(port), timeout=20)
            for i in range(5):
                body = b'{"c": %d, "i": %d}' % (k, i)
                conn.request("POST", "/v1/messages", body=body, headers={"x-api-key": DUMMY_KEY})
                first = conn.sock
                resp = conn.getresponse()
                assert resp.status == 200 and resp.read() == b"event: a\n\n" + body + b"event: z\n\n"
                assert conn.sock is first  # the same connection throughout
        except BaseException as e:
            errors.append(e)

    with CredentialProxy(upstream, {"x-api-key": "real-key"}) as proxy:
        threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == [] and proxy.requests == 40
    assert len(Upstream.seen) == 40
