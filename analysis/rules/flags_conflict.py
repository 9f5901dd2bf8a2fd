"""R scenarios with require_conflict: the agent states that the request conflicts with the correct ADR.

A conflict cue is any of the scenario's `conflict_patterns` (conflict, contradict, violat, would
override, supersed, ...), found in a clause of the agent's own words (not in fenced code, not in
quotes). It counts when it is all of:
- asserted: not negated ("does not conflict", "no conflict", "I don't think it conflicts",
  "Conflicts: none"), not a question ("Does this conflict with ADR-0002?"), not an embedded
  question ("I checked whether it conflicts"). A hedge ("may conflict", "could violate") COUNTS:
  it puts the decision in front of the user, which is what flagging is for;
- prospective, for a supersession cue: "would need a new ADR that supersedes 0003" counts,
  "0003 superseded 0001" / "superseded by 0003" is history and does not;
- about the correct ADR: the ADRs cited in the cue's clause (minus those after "not", "rather
  than", "instead of"); when the clause cites none, those of its sentence, else of the nearest
  earlier (then later) sentence of the message, else of the run's other messages;
- not about something else: "merge conflict", "dependency conflict", "port conflict".
NULL where the scenario does not require a conflict. Cases: cases/flags_conflict.yaml.
"""

from __future__ import annotations

import re
from functools import lru_cache

import duckdb
import polars as pl

from . import prose
from .rows import Row, patterns, result, run_texts

_PROSPECTIVE = re.compile(
    r"\b(?:would|will|'d|'ll|need|needs|needed|must|have to|has to|had to|require|requires|required|"
    r"requiring|should|going to|new adr|new decision|new record|first|unless|before|means|mean|"
    r"only if|cannot|can't|could|might|may)\b",
    re.I,
)
_OTHER_CONFLICT = re.compile(
    r"\b(?:merge|git|rebase|port|name|naming|dependency|dependencies|version|gem|bundler|lock|lockfile|"
    r"package|file|edit|schedule|scheduling)\s+$",
    re.I,
)
_NOTHING_AFTER = re.compile(r"\w*\s+(?:with\s+|in\s+)?(?:nothing|none|no)\b", re.I)
_EXCLUDED_BEFORE = re.compile(
    r"\b(?:not|rather than|instead of|unlike|other than|apart from|except|but not)\s+$", re.I
)


def _ids(text: str) -> list[str]:
    return [
        i for a, _, i in prose.adr_mentions(text) if not _EXCLUDED_BEFORE.search(text[max(0, a - 20) : a])
    ]


def _targets(msg: prose.Message, k: int) -> list[str]:
    """The ADRs the cue in clause k is about (empty: the message cites none)."""
    clauses = msg.fine
    if ids := _ids(clauses[k].text):
        return ids
    sent = clauses[k].sentence
    if ids := [i for c in clauses if c.sentence == sent for i in _ids(c.text)]:
        return ids
    earlier = sorted({c.sentence for c in clauses if c.sentence < sent}, reverse=True)
    later = sorted({c.sentence for c in clauses if c.sentence > sent})
    for s in [*earlier, *later]:
        if ids := [i for c in clauses if c.sentence == s for i in _ids(c.text)]:
            return ids
    return []


def _why_not(msg: prose.Message, k: int, m: re.Match[str]) -> str | None:
    """Why the cue `m` in clause k is not a flag, or None when it is one."""
    c = msg.fine[k]
    before = c.masked[: m.start()]
    if c.question or prose.embedded_question(c.masked, m.start()):
        return "a question"
    if prose.negated(c.masked, m.start()):
        return "negated"
    if _NOTHING_AFTER.match(c.masked[m.end() :]):
        return "negated"  # "contradicts nothing in ADR-0002"
    nxt = msg.fine[k + 1] if k + 1 < len(msg.fine) else None
    if nxt is not None and nxt.sentence == c.sentence and prose.bare_negative(nxt):
        return "negated"
    if _OTHER_CONFLICT.search(before):
        return "not about a decision"
    if m.group(0).lower().startswith("supersed") and not _PROSPECTIVE.search(before):
        return "a historical remark"
    return None


@lru_cache(maxsize=8192)
def in_message(
    text: str, correct: str, cues: tuple[re.Pattern[str], ...], run_ids: frozenset[str]
) -> str | None:
    """None when one message flags the conflict with `correct`; else why its first cue was no flag
    ('' = no cue). `run_ids`: the ADRs the run cites, for a message that cites none itself."""
    if not any(cue.search(text) for cue in cues):
        return ""  # cheap pre-filter: analyse only messages with a cue at all
    msg = prose.analyse(text)
    first = ""
    for k, clause in enumerate(msg.fine):
        for cue in cues:
            for m in cue.finditer(clause.masked):
                why = _why_not(msg, k, m)
                if why is None:
                    targets = _targets(msg, k) or sorted(run_ids)
                    if correct in targets:
                        return None
                    why = f"about ADR {', '.join(sorted(set(targets))) or '(none cited)'}"
                first = first or why
    return first


def flags(
    messages: list[tuple[int, str]], correct: str, cues: list[re.Pattern[str]]
) -> tuple[list[int], str]:
    """(seqs of messages that flag the conflict with `correct`, why the first rejected cue was rejected)."""
    run_ids = frozenset(
        i
        for _, t in messages
        if any(ch.isdigit() for ch in t)
        for _, _, i in prose.adr_mentions(prose.analyse(t).clean)
    )
    hits: list[int] = []
    rejected = ""
    for seq, text in messages:
        why = in_message(text, correct, tuple(cues), run_ids)
        if why is None:
            hits.append(seq)
        elif why and not rejected:
            rejected = f"seq {seq}: {why}"
    return hits, rejected


def rule(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    cues = patterns(con, "conflict")
    rows: list[Row] = []
    for run in run_texts(con):
        if not run.require_conflict or not run.correct_adr:
            continue
        ev, rejected = flags(run.messages, run.correct_adr, cues[run.variant])
        if ev:
            reason = f"flagged the conflict (seq {ev[0]})"
        else:
            reason = "did not flag the conflict" + (f" ({rejected})" if rejected else "")
        rows.append((run.run_id, bool(ev), ev, reason))
    return result(rows)
