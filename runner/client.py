"""Starting the client for one rep and capturing its stdout line by line, with a timeout and early stop.

The client runs in its own process group so that a timeout, an early stop or Ctrl-C ends it and
everything it started (its Bash tool's children, bwrap) at once. It also gets SIGKILL when the
thread that started it dies (PR_SET_PDEATHSIG), so a recorder killed with SIGKILL leaves no client
behind even unconfined (bwrap's --die-with-parent covers the confined case a second time).
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evalb.transcript import TranscriptSummary, decode_line, line_text, loads

STDERR_LIMIT = 64 * 1024
HOPELESS_STATUSES = {401, 403}
#: Said in the detail of a rep stopped for a status no retry can get past; the grid does not retry it.
NO_RETRY = "retrying cannot help"
#: The pinned client's own limits (2.1.197: `--max-turns` is accepted though not in `--help`;
#: `--max-budget-usd` is listed) and the `result` subtype it ends a session with when one is hit.
LIMIT_SUBTYPES = {"error_max_turns": "turn_limit", "error_max_budget_usd": "budget_limit"}
_PR_SET_PDEATHSIG = 1


def limit_args(max_turns: int | None, max_budget_usd: float | None) -> list[str]:
    """The client's own per-rep limits as command-line options (none when unset)."""
    args: list[str] = []
    if max_turns is not None:
        args += ["--max-turns", str(max_turns)]
    if max_budget_usd is not None:
        args += ["--max-budget-usd", f"{max_budget_usd:g}"]
    return args


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class SessionResult:
    """How a client session ended, and what the recorder saw of it."""

    started_at: dt.datetime
    ended_at: dt.datetime
    exit_code: int | None
    outcome: str
    detail: str
    stderr: str
    summary: TranscriptSummary = field(default_factory=TranscriptSummary)

    @property
    def duration_ms(self) -> int:
        return int((self.ended_at - self.started_at).total_seconds() * 1000)


def _kill_group(proc: subprocess.Popen[bytes], grace: float = 2.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            # the leader is gone; make sure no child of the group survives it
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            return
        except subprocess.TimeoutExpired:
            continue


def run_session(
    cmd: list[str],
    *,
    env: dict[str, str],
    cwd: Path,
    on_line: Callable[[str, str | None], None],
    timeout: float,
    max_api_retries: int = 6,
    stop: threading.Event | None = None,
    preexec: Callable[[], None] | None = None,
) -> SessionResult:
    """Run the client to its end (or stop it), feeding each stdout line to `on_line(raw,
    raw_encoding)` as it arrives (split on b"\\n" only; see `evalb.transcript.decode_line`).

    `stop` (set on Ctrl-C by the grid) ends the session at once; it is then `interrupted`, with the
    stop's `reason` if it has one (see `runner.grid.StopEvent`).
    `preexec` runs in the child before exec (the rep's limits: runner.limits)."""
    summary = TranscriptSummary()
    stop_reason: list[str] = []
    started = dt.datetime.now(dt.UTC)
    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_die_with_parent
        if preexec is None
        else lambda: [f() for f in (_die_with_parent, preexec)],
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr_chunks: list[bytes] = []
    failures: list[BaseException] = []  # raised by on_line (e.g. the journal's disk is full)

    def read_stderr() -> None:
        assert proc.stderr is not None
        size = 0
        for chunk in iter(lambda: proc.stderr.read(4096), b""):  # type: ignore[union-attr]
            if size < STDERR_LIMIT:
                stderr_chunks.append(chunk[: STDERR_LIMIT - size])
                size += len(chunk)

    def read_stdout() -> None:
        assert proc.stdout is not None
        # a binary pipe's lines end at b"\n" only: NEL, U+2028 and the like stay inside the line
        for data in proc.stdout:
            raw, encoding = decode_line(data.removesuffix(b"\n"))
            line = line_text(raw, encoding)
            if not line.strip():
                continue
            try:
                on_line(raw, encoding)
            except BaseException as e:  # a line that cannot be kept ends the session: no silent gap
                failures.append(e)
                _kill_group(proc)
                return
            summary.feed(line)
            reason = _hopeless(line, summary, max_api_retries)
            if reason and not stop_reason:
                stop_reason.append(reason)
                _kill_group(proc)

    threads = [
        threading.Thread(target=read_stdout, daemon=True),
        threading.Thread(target=read_stderr, daemon=True),
    ]
    for t in threads:
        t.start()
    timed_out = interrupted = False
    deadline = time.monotonic() + timeout
    try:
        # poll rather than one long wait, so that a stop request ends the session within ~0.1 s
        while proc.poll() is None:
            if stop is not None and stop.is_set():
                interrupted = True
                _kill_group(proc, grace=1.0)
                break
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                _kill_group(proc)
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=min(0.1, left))
    except BaseException:
        _kill_group(proc)
        for t in threads:
            t.join(timeout=5)
        raise
    for t in threads:
        t.join(timeout=10)
    if failures:
        raise failures[0]
    ended = dt.datetime.now(dt.UTC)
    stderr = b"".join(stderr_chunks).decode("utf-8", errors="replace")
    if interrupted:
        why = getattr(stop, "reason", None) or "Ctrl-C"
        outcome, detail = "interrupted", f"the recorder was stopped ({why}) during the rep; lines kept"
    else:
        outcome, detail = classify(
            proc.returncode, summary, timed_out=timed_out, timeout=timeout, stop=stop_reason
        )
    return SessionResult(started, ended, proc.returncode, outcome, detail, stderr, summary)


def _hopeless(line: str, summary: TranscriptSummary, max_api_retries: int) -> str | None:
    """A reason to stop the client early: it keeps retrying an API error it cannot get past.

    The client retries even a 401 for minutes, with growing delays; its `api_retry` lines say so
    at once. Before or after the model has spoken alike: the rep cannot end well either way."""
    if '"api_retry"' not in line:
        return None
    try:
        obj = loads(line)
    except ValueError:
        return None
    status = obj.get("error_status")
    where = _where(summary)
    if status in HOPELESS_STATUSES:
        return f"API answered {status} ({obj.get('error') or 'error'}) {where}; {NO_RETRY}"
    if summary.api_retries > max_api_retries:
        last = f"{status} {obj.get('error') or ''}".strip()
        return f"{summary.api_retries} API retries {where} (last: {last})"
    return None


def _where(summary: TranscriptSummary) -> str:
    return "after the model had spoken" if summary.reached_model else "before the model's first turn"


def classify(
    exit_code: int | None, summary: TranscriptSummary, *, timed_out: bool, timeout: float, stop: list[str]
) -> tuple[str, str]:
    """(outcome, detail) for a finished session; never blames the model for the client's faults."""
    if stop:
        return "client_error", stop[0]
    if timed_out:
        if summary.reached_model and summary.waiting_on == "tool":
            # the agent's tool (a long Bash command, a sub-agent) was still running: the agent was
            # working when time ran out, so the rep is scored as it stands
            return "timeout", f"no end after {timeout:g}s (the agent's tool was still running)"
        if summary.reached_model:
            # the client was waiting for the API (a tool result sent, a retry) or the model's reply
            # had stopped coming half way: a stalled API, not an agent that would not stop
            return (
                "client_error",
                f"no end after {timeout:g}s: the API stalled (no reply to the last request)",
            )
        return "timeout", f"no end after {timeout:g}s ({_where(summary)})"
    result = summary.result
    if result is not None and str(result.get("subtype")) in LIMIT_SUBTYPES:
        # the client stopped the session at a limit we passed it (--max-turns, --max-budget-usd)
        cost = result.get("total_cost_usd")
        spent = f", ${cost:.4f} spent" if isinstance(cost, int | float) else ""
        return (
            LIMIT_SUBTYPES[str(result["subtype"])],
            f"result {result['subtype']} after {result.get('num_turns')} turns{spent}",
        )
    if result is not None:
        if "stop_reason" in result and result["stop_reason"] is None and not result.get("is_error"):
            # the client takes a stream that ended without message_delta/message_stop for a full
            # reply (seen in 2.1.197): the model was cut off, by the connection, not by itself
            return (
                "client_error",
                "the API stream ended before the last message was complete (stop_reason null)",
            )
        if result.get("is_error") and not summary.reached_model:
            status = result.get("api_error_status")
            said = " ".join(str(result.get("result") or "").split())[:160]
            return (
                "client_error",
                f"the client ended with an error before the model's first turn (status {status}): {said}",
            )
        if result.get("is_error") or str(result.get("subtype", "")).startswith("error"):
            return "client_error", f"result {result.get('subtype')}: {str(result.get('result') or '')[:200]}"
        if exit_code == 0:
            return "completed", f"result {result.get('subtype')} after {result.get('num_turns')} turns"
    if exit_code is not None and exit_code < 0:
        return "crashed", f"the client was killed by signal {-exit_code}"
    if summary.api_retries:
        return (
            "client_error",
            f"the client gave up after {summary.api_retries} API retries ({_where(summary)})",
        )
    return "crashed", f"the client exited {exit_code} without a result event"
