"""The loopback credential proxy, against a real upstream HTTP server on loopback; the route choice;
the per-rep limit options."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

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
