"""Encoding one assistant message as the Messages API's streaming Server-Sent Events."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def stream_message(
    message_id: str, model: str, blocks: list[dict[str, Any]], *, input_tokens: int, chunk: int = 40
) -> Iterator[bytes]:
    """Yield the SSE frames the client expects for a message made of `blocks` (text / tool_use)."""
    yield _event(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": input_tokens, "output_tokens": 1},
            },
        },
    )
    out_tokens = 0
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            yield _event(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}},
            )
            text = block["text"]
            out_tokens += max(1, len(text) // 4)
            for j in range(0, len(text), chunk):
                yield _event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "text_delta", "text": text[j : j + chunk]},
                    },
                )
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            yield _event(
                "content_block_start", {"type": "content_block_start", "index": i, "content_block": start}
            )
            payload = json.dumps(block["input"])
            out_tokens += max(1, len(payload) // 4)
            for j in range(0, len(payload), chunk):
                yield _event(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": payload[j : j + chunk]},
                    },
                )
        yield _event("content_block_stop", {"type": "content_block_stop", "index": i})
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": out_tokens},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})
