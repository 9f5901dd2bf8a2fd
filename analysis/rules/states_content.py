"""R scenarios with match=content (R3): the decision's content is asserted as what applies.

Every `content_patterns` regex (e.g. UTC and ISO-8601) must occur in an asserted clause somewhere
in the agent's text (across messages is fine). Quoting the decision counts (that is how agents
state it); fenced code does not. A match is not an assertion when it is:
- negated: "not UTC", "without converting to UTC", "UTC is not used";
- reversed: "moved away from UTC", "instead of ISO-8601", "rather than UTC", "replaced UTC with
  local time", "switched from UTC to local time" (but "converted local time to UTC" asserts UTC), or a past state ("were previously UTC", "used to be UTC");
- a question or embedded question: "Should they be UTC?", "I did not check whether they are UTC";
- hedged: "maybe UTC", "probably ISO-8601" — a guess is not the decision retrieved;
- deferred: "UTC/ISO-8601 conversion is left for later", "TODO", "not yet", "out of scope";
- a search, not a statement: "I searched for UTC", "grepped for ISO-8601".
NULL for other scenarios. Cases: cases/states_content.yaml.
"""

from __future__ import annotations

import re
from functools import lru_cache

import duckdb
import polars as pl

from . import prose
from .rows import Row, patterns, result, run_texts

_REVERSAL = re.compile(
    r"\b(?:away from|instead of|rather than|in place of|no longer|stop using|stopped using|drop|dropped|"
    r"dropping|remove|removed|removing|abandon|abandoned|abandoning|replace|replaced|replacing|ditch|ditched)\b"
    r"(?![^\n]*\b(?:to|with|into|by|for)\b)",
    re.I,
)
_PAST_STATE = re.compile(r"\b(?:previously|formerly|originally|used to|until now)\b", re.I)
_CHANGE_FROM = re.compile(
    r"\b(?:switch|switched|change|changed|move|moved|convert|converted|migrate|migrated|went|go|swap|"
    r"swapped|turn|turned)\b[^\n]*\bfrom\b(?![^\n]*\b(?:to|into)\b)",
    re.I,
)
_HEDGE = re.compile(
    r"\b(?:maybe|perhaps|probably|possibly|presumably|might|i guess|guessing|not sure|unsure|assume|"
    r"assuming)\b",
    re.I,
)
_SEARCH = re.compile(
    r"\b(?:search|searched|searching|grep|grepped|grepping|look|looked|looking|scan|scanned)\s+(?:\w+\s+){0,2}?"
    r"(?:for|through)\b|\b(?:the word|the string|keyword)\b",
    re.I,
)
_DEFERRED = re.compile(
    r"\b(?:left for later|for later|todo|to-do|not yet|pending|deferred|out of scope|follow-up)\b", re.I
)
_POST_NEGATION = re.compile(
    r"^\W*(?:\w+\W+)?(?:is|are|was|were|does|do|did|must|should|will|would|can)\s*(?:not|n't)\b", re.I
)


def why_not(clause: prose.Clause, m: re.Match[str]) -> str | None:
    """Why the match is not an assertion of the content, or None when it is one."""
    text, pos = clause.text, m.start()
    before = text[:pos]
    if clause.question or prose.embedded_question(text, pos) or prose.quoted_question(text, pos):
        return "a question"
    if prose.negated(text, pos) or _POST_NEGATION.match(text[m.end() :]):
        return "negated"
    if _REVERSAL.search(before) or _CHANGE_FROM.search(before) or _PAST_STATE.search(before):
        return "reversed"
    if _HEDGE.search(before):
        return "hedged"
    if _DEFERRED.search(text):
        return "deferred"
    if _SEARCH.search(before):
        return "searched for, not stated"
    return None


@lru_cache(maxsize=8192)
def in_message(text: str, pattern: re.Pattern[str]) -> str | None:
    """None when one message asserts `pattern`; else why its first match is no assertion ('' = none)."""
    if not pattern.search(text):
        return ""  # cheap pre-filter: analyse only messages that contain the words at all
    first = ""
    for clause in prose.analyse(text).fine:
        for m in pattern.finditer(clause.text):
            why = why_not(clause, m)
            if why is None:
                return None
            first = first or why
    return first


def asserted(messages: list[tuple[int, str]], pattern: re.Pattern[str]) -> tuple[list[int], str]:
    """(seqs where `pattern` is asserted, why the first rejected match was rejected)."""
    seqs: list[int] = []
    rejected = ""
    for seq, text in messages:
        why = in_message(text, pattern)
        if why is None:
            seqs.append(seq)
        elif why and not rejected:
            rejected = f"{why} at seq {seq}"
    return seqs, rejected


def rule(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    wanted = patterns(con, "content")
    rows: list[Row] = []
    for run in run_texts(con, retrieval_only=False):
        if run.kind != "retrieval" or run.match != "content" or not wanted.get(run.variant):
            rows.append((run.run_id, None, [], None))
            continue
        evidence: set[int] = set()
        missing = []
        for p in sorted(wanted[run.variant], key=lambda p: p.pattern):
            seqs, rejected = asserted(run.messages, p)
            if seqs:
                evidence.add(seqs[0])
            else:
                missing.append(p.pattern + (f" ({rejected})" if rejected else ""))
        ev = sorted(evidence)
        if missing:
            reason = "did not state: " + ", ".join(missing)
        else:
            reason = "stated the decision's content (seq " + ",".join(map(str, ev)) + ")"
        rows.append((run.run_id, not missing, ev, reason))
    return result(rows)
