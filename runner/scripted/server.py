"""The scripted model: a loopback Messages API server that plays registered policies, one rep per route.

The runner registers each rep under a random token and points the client at
`http://127.0.0.1:PORT/r/<token>`; the client keeps that prefix in front of `/v1/messages`.
Requests without tools are the client's side requests (titles etc.) and get a short text.
Faults (HTTP errors, dropped or stalled streams) can be injected per rep for hardening tests.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

from runner.scripted import policies
from runner.scripted.policies import Final, Observation, RepContext, ToolCall
from runner.scripted.sse import stream_message


@dataclass
class Fault:
    """An injected API fault. `turn` counts the model's turns (0 = first); None = every turn.

    status: answer the turn's request with HTTP `status` (and `retry-after` if given);
    drop: close the connection after `at_frame` SSE frames (default: half way through the reply);
    stall: stop sending after `at_frame` frames and keep the connection open for `stall_seconds`;
    slow: pause `stall_seconds` after `at_frame` frames, then finish the reply normally (a slow
    model: keeps reps in flight long enough for kill tests to land mid-rep).
    Each fault hits `times` requests of its turn; then the turn is served normally."""

    kind: Literal["status", "drop", "stall", "slow"]
    turn: int | None = 0
    status: int = 529
    times: int = 1  # how many requests it hits (then the turn is served normally)
    retry_after: float | None = None
    stall_seconds: float = 600.0
    at_frame: int | None = None  # drop/stall after this many SSE frames (None: half way through)
    attempts: int | None = None  # only the rep's first N attempts meet it (None: every attempt)
    hits: int = 0


@dataclass
class _Rep:
    ctx: RepContext
    faults: list[Fault] = field(default_factory=list)
    requests: int = 0
    faults_served: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    # set when the rep is unregistered or the server stops, so a stalled stream ends with it
    released: threading.Event = field(default_factory=threading.Event)


_CWD = re.compile(r"(?:Primary working directory|Working directory):\s*(\S+)")


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    return [
        b.get("text", "") for b in content or [] if isinstance(b, dict) and isinstance(b.get("text"), str)
    ]


def observe(body: dict[str, Any]) -> Observation:
    """The SessionStart note and cwd, as they reach the model in the request.

    Client versions differ in where the hook's additionalContext goes: a `<system-reminder>` in
    the first user message, or a mid-conversation `system` message; both are searched, up to the
    model's first turn."""
    obs = Observation()
    for msg in body.get("messages") or []:
        if msg.get("role") == "assistant":
            break
        for text in _texts(msg.get("content")):
            if "[os-adr]" in text and obs.hook_note is None:
                note = text[text.index("[os-adr]") :]
                obs.hook_note = note.split("</system-reminder>")[0].split("\n\n")[0].strip()
    system = body.get("system")
    m = _CWD.search(" ".join(_texts(system)))
    obs.cwd = m.group(1) if m else None
    return obs


def history(body: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(tool_use block, result text) pairs of the conversation so far, in order."""
    results: dict[str, str] = {}
    calls: list[dict[str, Any]] = []
    for msg in body.get("messages") or []:
        content = msg.get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            if msg.get("role") == "assistant" and block.get("type") == "tool_use":
                calls.append(block)
            elif block.get("type") == "tool_result":
                c = block.get("content")
                if isinstance(c, list):
                    c = "\n".join(x.get("text", "") for x in c if isinstance(x, dict))
                results[block.get("tool_use_id", "")] = c if isinstance(c, str) else ""
    return [(c, results.get(c.get("id", ""), "")) for c in calls]


def next_action(ctx: RepContext, body: dict[str, Any]) -> ToolCall | Final:
    """Replay the policy over the conversation so far and return its next action."""
    obs = observe(body)
    program = policies.POLICIES[ctx.policy](ctx, obs)
    action = next(program)
    for _call, result in history(body):
        try:
            action = program.send(result)
        except StopIteration:
            return Final("(the scripted policy has nothing more to do)")
    return action


class ModelServer:
    """Run the scripted model on a free loopback port in a background thread."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._reps: dict[str, _Rep] = {}
        self._lock = threading.Lock()
        server = self

        class Handler(_Handler):
            owner = server

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="scripted-model", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> ModelServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        with self._lock:
            for rep in self._reps.values():
                rep.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def register(self, ctx: RepContext, faults: list[Fault] | None = None) -> str:
        """Register a rep; returns the base URL to give the client as ANTHROPIC_BASE_URL."""
        token = secrets.token_hex(8)
        with self._lock:
            self._reps[token] = _Rep(ctx, list(faults or []))
        return f"http://127.0.0.1:{self.port}/r/{token}"

    def unregister(self, base_url: str) -> int:
        """Forget a rep (ending any stream stalled for it); returns how many faults it was served."""
        with self._lock:
            rep = self._reps.pop(base_url.rsplit("/", 1)[-1], None)
        if rep is None:
            return 0
        rep.released.set()
        return rep.faults_served

    def rep(self, token: str) -> _Rep | None:
        with self._lock:
            return self._reps.get(token)


class _Handler(BaseHTTPRequestHandler):
    owner: ModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _json(self, status: int, obj: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, kind: str, message: str, headers: dict[str, str] | None = None) -> None:
        self._json(status, {"type": "error", "error": {"type": kind, "message": message}}, headers)

    def do_POST(self) -> None:
        m = re.match(r"^/r/([0-9a-f]+)(/v1/messages(?:/count_tokens)?)", self.path)
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b"{}"
        rep = self.owner.rep(m.group(1)) if m else None
        if not m or rep is None:
            self._error(404, "not_found_error", f"no scripted rep at {self.path}")
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self._error(400, "invalid_request_error", "request body is not JSON")
            return
        if m.group(2).endswith("count_tokens"):
            self._json(200, {"input_tokens": max(1, len(raw) // 4)})
            return
        with rep.lock:
            rep.requests += 1
        model = str(body.get("model") or "scripted")
        if rep.ctx.kind == "judge" or not body.get("tools"):
            self._stream(model, [{"type": "text", "text": self._side_answer(rep, body)}], len(raw))
            return
        turn = sum(1 for msg in body.get("messages") or [] if msg.get("role") == "assistant")
        fault = self._fault_for(rep, turn)
        if fault and fault.kind == "status":
            headers = {"retry-after": str(fault.retry_after)} if fault.retry_after is not None else None
            kinds = {401: "authentication_error", 429: "rate_limit_error", 529: "overloaded_error"}
            self._error(fault.status, kinds.get(fault.status, "api_error"), "injected fault", headers)
            return
        try:
            action = next_action(rep.ctx, body)
        except Exception as e:  # a policy bug must not hang the client: answer, and say so
            self._error(500, "api_error", f"scripted policy failed: {type(e).__name__}: {e}")
            return
        blocks: list[dict[str, Any]] = []
        if isinstance(action, ToolCall):
            if action.preface:
                blocks.append({"type": "text", "text": action.preface})
            blocks.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{secrets.token_hex(8)}",
                    "name": action.name,
                    "input": action.input,
                }
            )
        else:
            blocks.append({"type": "text", "text": action.text})
        self._stream(model, blocks, len(raw), fault=fault, released=rep.released)

    def _side_answer(self, rep: _Rep, body: dict[str, Any]) -> str:
        if rep.ctx.kind == "judge":
            user_text = [
                t
                for m in body.get("messages") or []
                if m.get("role") == "user"
                for t in _texts(m.get("content"))
            ]
            return policies.judge_verdict("\n".join(user_text))
        return "evalb session"

    def _fault_for(self, rep: _Rep, turn: int) -> Fault | None:
        with rep.lock:
            for f in rep.faults:
                if (f.turn is None or f.turn == turn) and f.hits < f.times:
                    f.hits += 1
                    rep.faults_served += 1
                    return f
        return None

    def _stream(
        self,
        model: str,
        blocks: list[dict[str, Any]],
        req_bytes: int,
        fault: Fault | None = None,
        released: threading.Event | None = None,
    ) -> None:
        msg_id = f"msg_{secrets.token_hex(10)}"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        frames = list(stream_message(msg_id, model, blocks, input_tokens=max(1, req_bytes // 4)))
        try:
            for i, frame in enumerate(frames):
                cut = len(frames) // 2 if fault is None or fault.at_frame is None else fault.at_frame
                if fault and i == min(cut, len(frames) - 1):
                    if fault.kind == "drop":
                        self.wfile.flush()
                        self.connection.shutdown(2)
                        return
                    if fault.kind == "stall":
                        self.wfile.flush()
                        (released or threading.Event()).wait(fault.stall_seconds)
                        return
                    if fault.kind == "slow":
                        self.wfile.flush()
                        (released or threading.Event()).wait(fault.stall_seconds)
                self.wfile.write(frame)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            return


FAULT_KINDS = ("status", "drop", "stall", "slow")


def parse_fault(spec: str) -> Fault:
    """`KIND[:key=value,...]`, e.g. `status:status=529,turn=0,times=2`, `drop:turn=1`, `stall:turn=1`.

    Keys: turn (int, or `any`), status, times, retry_after, stall_seconds, at_frame, attempts."""
    from evalb.errors import UsageError

    kind, _, rest = spec.partition(":")
    if kind not in FAULT_KINDS:
        raise UsageError(f"unknown fault kind {kind!r} in {spec!r}", hint=f"one of: {', '.join(FAULT_KINDS)}")
    fields: dict[str, Any] = {}
    conv: dict[str, Any] = {
        "turn": lambda v: None if v == "any" else int(v),
        "status": int,
        "times": int,
        "retry_after": float,
        "stall_seconds": float,
        "at_frame": int,
        "attempts": int,
    }
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        if key not in conv:
            raise UsageError(f"unknown fault key {key!r} in {spec!r}", hint=f"known: {', '.join(conv)}")
        try:
            fields[key] = conv[key](value)
        except ValueError as e:
            raise UsageError(f"fault key {key} in {spec!r} needs a number, got {value!r}") from e
    return Fault(kind=kind, **fields)  # type: ignore[arg-type]
