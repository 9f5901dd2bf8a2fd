"""Turning the client's stream-json stdout lines into event rows, tolerant of any line it may write.

Every line becomes at least one row and keeps its raw text; lines that are not a JSON object
(a truncated last line, noise) are flagged `malformed` instead of failing. Fields are read by name
and absent or unknown ones are tolerated, since they change between client versions.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable
from typing import Any

from evalb.schema import EventRecord


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


def parse_line(run_id: str, seq: int, raw: str, received_at: dt.datetime | None = None) -> list[EventRecord]:
    """One stdout line as one or more event rows (one per content block)."""
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
    }
    try:
        obj = json.loads(raw)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        return [EventRecord(**{**base, "malformed": True})]

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
        return [EventRecord(**{**base, "block_index": 0, "block_type": "text", "text": content})]
    if not isinstance(content, list) or not content:
        return [EventRecord(**base)]

    rows = []
    for i, block in enumerate(content):
        row = {**base, "block_index": i}
        if not isinstance(block, dict):
            rows.append(EventRecord(**row))
            continue
        btype = _s(block.get("type"))
        row["block_type"] = btype
        if btype == "tool_use":
            row["tool_name"] = _s(block.get("name"))
            row["tool_use_id"] = _s(block.get("id"))
            row["tool_input"] = json.dumps(block.get("input"), ensure_ascii=False, sort_keys=True)
        elif btype == "tool_result":
            row["tool_use_id"] = _s(block.get("tool_use_id"))
            row["text"] = _result_text(block.get("content"))
            row["is_error"] = block.get("is_error") if isinstance(block.get("is_error"), bool) else None
        elif btype == "text":
            row["text"] = _s(block.get("text"))
        elif btype == "thinking":
            row["text"] = _s(block.get("thinking"))
        rows.append(EventRecord(**row))
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
        # the last well-formed event's type: a client waiting on the API (after a tool result,
        # init or an api_retry) is told apart from one running a tool (after an assistant event)
        self.last_type: str | None = None
        self.n_lines = 0
        self.n_malformed = 0

    def feed(self, raw: str) -> None:
        """Update the summary with one stdout line."""
        if not raw.strip():
            return
        self.n_lines += 1
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            self.n_malformed += 1
            return
        t, st = obj.get("type"), obj.get("subtype")
        self.last_type = t if isinstance(t, str) else None
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
        parsed = json.loads(out)
        return _s(parsed.get("hookSpecificOutput", {}).get("additionalContext")) or out.strip()
    except (ValueError, AttributeError):
        return out.strip()
