"""Turning the client's stream-json stdout lines into event rows, tolerant of any line it may write.

Every line becomes at least one row and keeps its raw text; lines that are not a JSON object
(a truncated last line, noise) are flagged `malformed` instead of failing. Fields are read by name
and absent or unknown ones are tolerated, since they change between client versions.

Lines are split on b"\\n" only, never with `str.splitlines()` (which also splits on NEL U+0085,
U+2028/U+2029 and other characters a client may write raw inside a JSON string). A line that is
valid UTF-8 is kept as its text; one that is not is kept as base64 (`raw_encoding = 'base64'`), so
every byte is archived. The client may write a lone surrogate escape (`\\ud83d`) when it cuts a
long line of emoji: `raw` keeps the escape as written, parsed text fields get U+FFFD instead
(Parquet, like UTF-8, cannot hold a lone surrogate).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
from collections.abc import Iterable
from typing import Any

import msgspec

from evalb.schema import EventRecord

#: `raw_encoding` of a line that is not valid UTF-8: `raw` holds its bytes in base64.
BASE64 = "base64"
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_DECODE = msgspec.json.Decoder().decode
#: json.dumps(v, ensure_ascii=False, sort_keys=True), without building an encoder per call
_tool_input = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a byte stream, split on b"\\n" only (no other byte or character ends a line)."""
    lines = data.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    return lines


def decode_line(line: bytes) -> tuple[str, str | None]:
    """(raw, raw_encoding) of one line: its text when it is valid UTF-8, else base64 of its bytes."""
    try:
        return line.decode("utf-8"), None
    except UnicodeDecodeError:
        return base64.b64encode(line).decode("ascii"), BASE64


def line_text(raw: str, raw_encoding: str | None = None) -> str:
    """The text to parse of a kept line (a base64 line's bytes decoded with U+FFFD for bad ones)."""
    if raw_encoding == BASE64:
        return base64.b64decode(raw).decode("utf-8", errors="replace")
    return raw


def _clean(v: Any) -> Any:
    if isinstance(v, str):
        return _SURROGATE.sub("\ufffd", v)
    if isinstance(v, dict):
        return {_clean(k): _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def loads(text: str) -> Any:
    """json.loads, with every lone surrogate in the result's strings replaced by U+FFFD; a line
    nested too deeply to parse is a ValueError like any other text that is not JSON.

    msgspec decodes first (~2x faster; where it succeeds its result equals json.loads', big
    integers included); whatever it refuses (lone surrogate escapes, NaN, 1e400, ...) goes to
    json.loads, so the result is always json.loads'."""
    try:
        return _DECODE(text)
    except (msgspec.DecodeError, RecursionError, UnicodeError, ValueError):
        pass
    try:
        obj = json.loads(text)
        return _clean(obj) if _SURROGATE_ESCAPE.search(text) else obj
    except RecursionError as e:
        raise ValueError("JSON nested too deeply") from e


def _parsed(text: str) -> Any:
    """`loads(text)`, or None when the text is not JSON."""
    try:
        return loads(text)
    except ValueError:
        return None


def _s(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _result_text(content: Any) -> str | None:
    """Flatten a tool_result's content (a string or a list of blocks) to text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(parts)
    return None


def parse_line(
    run_id: str,
    seq: int,
    raw: str,
    received_at: dt.datetime | None = None,
    raw_encoding: str | None = None,
) -> list[EventRecord]:
    """One stdout line as one or more event rows (one per content block); `raw` and `raw_encoding`
    as `decode_line` gives them."""
    obj = _parsed(line_text(raw, raw_encoding))
    return [EventRecord(**r) for r in line_rows(run_id, seq, raw, obj, received_at, raw_encoding)]


def line_rows(
    run_id: str,
    seq: int,
    raw: str,
    obj: Any,
    received_at: dt.datetime | None = None,
    raw_encoding: str | None = None,
) -> list[dict[str, Any]]:
    """`parse_line`'s rows as plain dicts (the events table's columns), from the line already
    parsed (`obj`: what `loads` gave, None if it raised): bulk import builds its frames from these
    without validating each row again."""
    base: dict[str, Any] = {
        "run_id": run_id,
        "seq": seq,
        "block_index": None,
        "type": None,
        "subtype": None,
        "message_id": None,
        "role": None,
        "block_type": None,
        "tool_name": None,
        "tool_use_id": None,
        "tool_input": None,
        "text": None,
        "is_error": None,
        "parent_tool_use_id": None,
        "is_synthetic": None,
        "malformed": False,
        "received_at": received_at,
        "raw": raw,
        "raw_encoding": raw_encoding,
    }
    if not isinstance(obj, dict):
        base["malformed"] = True
        return [base]

    base["type"] = _s(obj.get("type"))
    base["subtype"] = _s(obj.get("subtype"))
    base["parent_tool_use_id"] = _s(obj.get("parent_tool_use_id"))
    if isinstance(obj.get("isSynthetic"), bool):
        base["is_synthetic"] = obj["isSynthetic"]
    raw_message = obj.get("message")
    message: dict[str, Any] = raw_message if isinstance(raw_message, dict) else {}
    base["message_id"] = _s(message.get("id"))
    base["role"] = _s(message.get("role"))

    if base["type"] == "result":
        base["text"] = _s(obj.get("result"))
        base["is_error"] = obj.get("is_error") if isinstance(obj.get("is_error"), bool) else None
    elif base["type"] == "system" and base["subtype"] == "hook_response":
        base["text"] = _s(obj.get("output")) or _s(obj.get("stdout"))

    content = message.get("content")
    if isinstance(content, str):
        return [{**base, "block_index": 0, "block_type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        return [base]

    rows = []
    for i, block in enumerate(content):
        row = {**base, "block_index": i}
        if not isinstance(block, dict):
            rows.append(row)
            continue
        btype = _s(block.get("type"))
        row["block_type"] = btype
        if btype == "tool_use":
            row["tool_name"] = _s(block.get("name"))
            row["tool_use_id"] = _s(block.get("id"))
            row["tool_input"] = _tool_input(block.get("input"))
        elif btype == "tool_result":
            row["tool_use_id"] = _s(block.get("tool_use_id"))
            row["text"] = _result_text(block.get("content"))
            row["is_error"] = block.get("is_error") if isinstance(block.get("is_error"), bool) else None
        elif btype == "text":
            row["text"] = _s(block.get("text"))
        elif btype == "thinking":
            row["text"] = _s(block.get("thinking"))
        rows.append(row)
    return rows


def parse_lines(run_id: str, lines: Iterable[str]) -> list[EventRecord]:
    """All lines of a transcript (without trailing newlines) as event rows; blank lines are skipped."""
    out: list[EventRecord] = []
    seq = 0
    for line in lines:
        if not line.strip():
            continue
        out.extend(parse_line(run_id, seq, line))
        seq += 1
    return out


def parse_bytes(run_id: str, data: bytes) -> tuple[list[EventRecord], TranscriptSummary]:
    """A whole transcript's bytes as event rows and their summary (lines split on b"\\n" only)."""
    rows, summary = parse_rows(run_id, data)
    return [EventRecord(**r) for r in rows], summary


def parse_rows(run_id: str, data: bytes) -> tuple[list[dict[str, Any]], TranscriptSummary]:
    """`parse_bytes` with the rows as plain dicts (`line_rows`); each line is parsed once, for
    its rows and the summary both."""
    out: list[dict[str, Any]] = []
    summary = TranscriptSummary()
    seq = 0
    for line in split_lines(data):
        raw, enc = decode_line(line)
        text = line_text(raw, enc)
        if not text.strip():
            continue
        obj = _parsed(text)
        summary.feed_parsed(obj)
        out.extend(line_rows(run_id, seq, raw, obj, None, enc))
        seq += 1
    return out, summary


class TranscriptSummary:
    """What the recorder must know of a transcript: hook seen, model id, outcome facts, usage."""

    def __init__(self) -> None:
        self.hook_seen = False
        self.hook_note: str | None = None
        self.model_id: str | None = None
        self.client_version: str | None = None
        self.session_id: str | None = None
        self.reached_model = False
        self.result: dict[str, Any] | None = None
        self.api_retries = 0
        self.last_api_error: dict[str, Any] | None = None
        # what the client was doing after the last well-formed event, for a timeout's outcome:
        # "api" = waiting for the API (after a tool result, an api_retry or an API error the
        # client wrote itself), "model" = the model's reply still streaming (after a text or
        # thinking block of it), "tool" = the agent's tool running (after the model's tool_use;
        # the client's system lines while it runs, e.g. task_started, change nothing)
        self.waiting_on: str | None = None
        self.n_lines = 0
        self.n_malformed = 0

    def feed(self, raw: str) -> None:
        """Update the summary with one stdout line."""
        if raw.strip():
            self.feed_parsed(_parsed(raw))

    def feed_parsed(self, obj: Any) -> None:
        """`feed` of a non-blank line already parsed (`loads`; None if it was not JSON)."""
        self.n_lines += 1
        if not isinstance(obj, dict):
            self.n_malformed += 1
            return
        t, st = obj.get("type"), obj.get("subtype")
        self.waiting_on = _waiting_on(obj, self.waiting_on)
        if t == "system" and st == "hook_response" and obj.get("hook_event") == "SessionStart":
            self.hook_seen = True
            self.hook_note = self.hook_note or _hook_context(obj)
        elif t == "system" and st == "init":
            self.model_id = self.model_id or _s(obj.get("model"))
            self.client_version = self.client_version or _s(obj.get("claude_code_version"))
            self.session_id = self.session_id or _s(obj.get("session_id"))
        elif t == "system" and st == "api_retry":
            self.api_retries += 1
            self.last_api_error = obj
        elif t == "assistant" and not made_by_client(obj):
            self.reached_model = True
        elif t == "result":
            self.result = obj

    @property
    def usage(self) -> dict[str, Any]:
        u = (self.result or {}).get("usage")
        return u if isinstance(u, dict) else {}

    def run_fields(self) -> dict[str, Any]:
        """The runs-table fields a transcript alone decides (hook, model, result, usage, counts):
        one mapping shared by the recorder, the importer and the self-test's fabricator."""
        result, usage = self.result or {}, self.usage
        cost = result.get("total_cost_usd")
        return {
            "reached_model": self.reached_model,
            "hook_seen": self.hook_seen,
            "hook_note": self.hook_note,
            "model_id": self.model_id,
            "client_version": self.client_version,
            "session_id": self.session_id,
            "result_subtype": _s(result.get("subtype")),
            "num_turns": _int(result.get("num_turns")),
            "cost_usd": float(cost) if isinstance(cost, int | float) and not isinstance(cost, bool) else None,
            "input_tokens": _int(usage.get("input_tokens")),
            "output_tokens": _int(usage.get("output_tokens")),
            "cache_read_tokens": _int(usage.get("cache_read_input_tokens")),
            "cache_creation_tokens": _int(usage.get("cache_creation_input_tokens")),
            "api_retries": self.api_retries,
            "n_lines": self.n_lines,
            "n_malformed": self.n_malformed,
        }


def _waiting_on(obj: dict[str, Any], before: str | None) -> str | None:
    t, st = obj.get("type"), obj.get("subtype")
    if t == "user" or (t == "system" and st == "api_retry"):
        return "api"
    if t == "assistant":
        if made_by_client(obj):
            return "api"
        msg = obj.get("message")
        content = msg.get("content") if isinstance(msg, dict) else None
        blocks = content if isinstance(content, list) else []
        uses = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks)
        return "tool" if uses else "model"
    return before  # system lines (hooks, task_* progress while a tool runs) change nothing


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def made_by_client(obj: dict[str, Any]) -> bool:
    """An assistant event the client made up itself (e.g. "API Error: ..."), not the model's turn."""
    msg = obj.get("message")
    return isinstance(msg, dict) and msg.get("model") == "<synthetic>"


def _hook_context(obj: dict[str, Any]) -> str | None:
    out = _s(obj.get("output")) or _s(obj.get("stdout"))
    if not out:
        return None
    try:
        parsed = loads(out)
        return _s(parsed.get("hookSpecificOutput", {}).get("additionalContext")) or out.strip()
    except (ValueError, AttributeError):
        return out.strip()
