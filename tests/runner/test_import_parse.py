"""Line parsing for bulk import: the fast decoder gives exactly what json.loads gives, line by line,
and a line nested too deeply is a malformed line, not a crash."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from evalb.transcript import TranscriptSummary, _clean, loads, parse_bytes, parse_line
from tests.conftest import GOLDEN

LINES = [
    '{"a":1,"a":2}',  # duplicate keys: the last wins
    '{"n":18446744073709551616,"m":-9223372036854775809,"big":123456789012345678901234567890}',
    '{"f":[0.1,1e308,5e-324,2.4703282292062328e-324,-0.0,1E2]}',
    '{"x":1e400}',  # json: inf
    '{"x":NaN,"y":-Infinity}',
    '{"t":"lone \\ud83d surrogate"}',
    '{"t":"pair \\ud83d\\ude00 ok"}',
    '{"t":"nul \\u0000 and \\"quotes\\" and \\\\ and \\/"}',
    ' {"padded":true} \r',
    '\ufeff{"bom":1}',
    '{"ctl":"a\x01b"}',
    '{"t":"a\x85b\u2028c"}',
    "[1,2,3]",
    '"just a string"',
    "null",
    "{not json",
    "",
    '{"a":{"b":{"c":[{"d":null}]}}}',
]


def reference(text: str) -> Any:
    """What `loads` promised before the fast decoder: json.loads, lone surrogates as U+FFFD."""
    return _clean(json.loads(text))


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("text", LINES)
def test_loads_equals_json_loads(text: str) -> None:
    try:
        want = reference(text)
    except ValueError:
        with pytest.raises(ValueError):
            loads(text)
        return
    assert same(loads(text), want)


def test_golden_transcripts_parse_as_json_loads_does() -> None:
    for path in sorted(GOLDEN.glob("*.jsonl")):
        for line in path.read_text().split("\n"):
            if line.strip():
                try:
                    want = reference(line)
                except ValueError:
                    continue
                assert same(loads(line), want), path.name


def test_deep_nesting_is_a_malformed_line() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    rows = parse_line("r", 0, deep)
    assert len(rows) == 1 and rows[0].malformed
    summary = TranscriptSummary()
    summary.feed(deep)
    assert (summary.n_lines, summary.n_malformed) == (1, 1)


def test_parse_bytes_parses_each_line_once_with_the_same_rows() -> None:
    """parse_bytes' rows equal parse_line's for each line, and its summary equals feeding it."""
    data = (
        (GOLDEN / "plugin-skill-read-error.jsonl").read_bytes() + b"\xff junk\n" + LINES[5].encode() + b"\n"
    )
    rows, summary = parse_bytes("r", data)
    want, fed = [], TranscriptSummary()
    seq = 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            raw, enc = line.decode(), None
        except UnicodeDecodeError:
            import base64

            raw, enc = base64.b64encode(line).decode(), "base64"
        want += parse_line("r", seq, raw, None, enc)
        fed.feed(line.decode("utf-8", "replace"))
        seq += 1
    assert [r.model_dump() for r in rows] == [r.model_dump() for r in want]
    assert summary.run_fields() == fed.run_fields()


@pytest.mark.parametrize(
    "tool_input",
    [
        '{"b":1,"a":"é ☃ \\ud83d\\ude00"}',
        '{"n":NaN,"i":Infinity,"big":123456789012345678901234567890}',
        "[]",
        "null",
    ],
)
def test_tool_input_is_json_dumps_of_the_input(tool_input: str) -> None:
    line = (
        '{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t","name":"Bash","input":'
        + tool_input
        + "}]}}"
    )
    (row,) = parse_line("r", 0, line)
    want = json.dumps(json.loads(tool_input), ensure_ascii=False, sort_keys=True)
    assert row.tool_input == want
