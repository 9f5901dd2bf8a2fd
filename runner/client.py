"""Starting the client for one rep and capturing its stdout line by line, with a timeout and early stop.

The client runs in its own process group so that a timeout, an early stop or Ctrl-C ends it and
everything it started (its Bash tool's children, bwrap) at once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from evalb.transcript import TranscriptSummary

STDERR_LIMIT = 64 * 1024
HOPELESS_STATUSES = {401, 403}


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
    on_line: Callable[[str], None],
    timeout: float,
    max_api_retries: int = 6,
) -> SessionResult:
    """Run the client to its end (or stop it), feeding each stdout line to `on_line` as it arrives."""
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
    )
    assert proc.stdout is not None and proc.stderr is not None
    stderr_chunks: list[bytes] = []

    def read_stderr() -> None:
        assert proc.stderr is not None
        size = 0
        for chunk in iter(lambda: proc.stderr.read(4096), b""):  # type: ignore[union-attr]
            if size < STDERR_LIMIT:
                stderr_chunks.append(chunk[: STDERR_LIMIT - size])
                size += len(chunk)

    def read_stdout() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if not line.strip():
                continue
            on_line(line)
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
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
    except BaseException:
        _kill_group(proc)
        for t in threads:
            t.join(timeout=5)
        raise
    for t in threads:
        t.join(timeout=10)
    ended = dt.datetime.now(dt.UTC)
    stderr = b"".join(stderr_chunks).decode("utf-8", errors="replace")
    outcome, detail = classify(
        proc.returncode, summary, timed_out=timed_out, timeout=timeout, stop=stop_reason
    )
    return SessionResult(started, ended, proc.returncode, outcome, detail, stderr, summary)


def _hopeless(line: str, summary: TranscriptSummary, max_api_retries: int) -> str | None:
    """A reason to stop the client early: it keeps retrying an API error it cannot get past."""
    if '"api_retry"' not in line or summary.reached_model:
        return None
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    status = obj.get("error_status")
    if status in HOPELESS_STATUSES:
        return f"API answered {status} ({obj.get('error') or 'error'}); retrying cannot help"
    if summary.api_retries >= max_api_retries:
        return f"{summary.api_retries} API retries before the model's first turn (last: {status} {obj.get('error') or ''})".strip()
    return None


def classify(
    exit_code: int | None, summary: TranscriptSummary, *, timed_out: bool, timeout: float, stop: list[str]
) -> tuple[str, str]:
    """(outcome, detail) for a finished session; never blames the model for the client's faults."""
    if stop:
        return "client_error", stop[0]
    if timed_out:
        where = "after the model had spoken" if summary.reached_model else "before the model's first turn"
        return "timeout", f"no end after {timeout:g}s ({where})"
    result = summary.result
    if result is not None:
        if result.get("is_error") and not summary.reached_model:
            status = result.get("api_error_status")
            return (
                "client_error",
                f"the client ended with an error before the model's first turn (status {status})",
            )
        if result.get("is_error") or str(result.get("subtype", "")).startswith("error"):
            return "client_error", f"result {result.get('subtype')}: {str(result.get('result') or '')[:200]}"
        if exit_code == 0:
            return "completed", f"result {result.get('subtype')} after {result.get('num_turns')} turns"
    if exit_code is not None and exit_code < 0:
        return "crashed", f"the client was killed by signal {-exit_code}"
    if summary.api_retries:
        when = "after the model had spoken" if summary.reached_model else "before the model's first turn"
        return "client_error", f"the client gave up after {summary.api_retries} API retries ({when})"
    return "crashed", f"the client exited {exit_code} without a result event"
