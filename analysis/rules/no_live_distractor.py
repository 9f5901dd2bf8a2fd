"""R2: a superseded distractor ADR (0001) must not be cited as if it were live.

Each citation of the distractor in the agent's text (not fenced code, but quotes included: quoting
0001 still cites it; see `prose.cites` for what is not a citation) is read in its clause (split at `;` and at "but",
"however", "although", "while", ...; brackets and dashes stay inside). It is LIVE unless a
marker ties it to being out of force, and no live assertion overrides that:
- out of force: an attribute right before it ("the superseded/old/former/previous ADR-0001"),
  an apposition right after ("ADR-0001 (superseded)", "ADR-0001 — superseded by 0003"), a
  predicate ("ADR-0001 was superseded", "is obsolete", "no longer applies", "does not apply",
  "is not in force"), the object of a superseding verb ("0003 supersedes/replaced 0001", "I
  ignored 0001"), a negation right before it ("governed by 0003, not 0001"), a past framing
  ("previously / originally / historically, 0001 ...");
- a marker that is negated does not count: "0001 is not superseded", "has not been replaced";
- a live assertion about it wins: "0001 is still in force", "(superseded) still applies",
  "remains valid", "governs"; so does the wrong direction "0001 supersedes 0003" and
  "0003 was superseded by 0001";
- a qualifier word that is not about the ADR excuses nothing ("the good old days");
- a question is no excuse: "Is ADR-0001 still in force?" cites it without marking it superseded.
NULL for scenarios without distractors. Cases: cases/no_live_distractor.yaml.
"""

from __future__ import annotations

import re
from functools import lru_cache

import duckdb
import polars as pl

from . import prose
from .rows import Row, result, run_texts

_OUT = (
    r"superseded|obsolete|deprecated|outdated|replaced|retired|overridden|overruled|rescinded|revoked|"
    r"withdrawn|historical|defunct|stale|void|inactive|irrelevant|moot|inapplicable|not applicable|"
    r"not relevant|no longer\b"
)
_ATTRIBUTE = re.compile(
    r"\b(?:superseded|obsolete|deprecated|outdated|old|older|former|previous|earlier|original|prior|legacy|"
    r"retired|withdrawn|replaced|overridden|defunct|stale|historical|rescinded|revoked)\s+"
    r"(?:(?:adr|decision|record|retry|interval)\s*)?[\s#-]*$",
    re.I,
)
_APPOSITION = re.compile(
    r"^\s*(?:[(\[—–,:→-]|->|=>)+\s*(?:status:?\s*)?(?:now\s+|since\s+)?(?:" + _OUT + r")",
    re.I,
)
_PREDICATE = re.compile(
    r"^[^;]{0,60}?\b(?:is|was|were|are|has been|have been|had been|been|got|now|'s|became|becomes)\s+"
    r"(?:\w+\s+){0,2}?(?P<q>" + _OUT + r"|(?:original|previous|earlier|former|old|older|first|prior)\b)",
    re.I,
)
_NO_LONGER = re.compile(r"^\W*(?:\w+\W+){0,3}?(?P<q>no longer)\b", re.I)
_OBJECT_OF = re.compile(
    r"\b(?:supersedes|superseded|supersede|superseding|replaces|replaced|replace|replacing|overrides|"
    r"overrode|override|overrules|overruled|obsoletes|obsoleted|deprecates|deprecated|retires|retired|"
    r"rescinds|rescinded|revokes|revoked|ignored|ignore|ignoring|disregarded|disregard|set aside)\s+"
    r"(?:the\s+)?(?:(?!by\b)\w+\s+)?(?:adr|decision|record)?[\s#-]*$",
    re.I,
)
_NOT_BEFORE = re.compile(
    r"\b(?:not|never|rather than|instead of|unlike|over)\s+(?:\w+\s+){0,1}?(?:adr\s*)?[#-]?$", re.I
)
_PAST_FRAMING = re.compile(
    r"\b(?:previously|originally|historically|formerly|used to|at first|back then|in the past|until)\b", re.I
)
_LIVE = re.compile(
    r"\b(?:still|remains?|stays?|continues? to)\s+(?:\w+\s+)?(?:in force|appl(?:y|ies)|valid|active|current|"
    r"govern|governs|holds?|stands?|binding|in effect|relevant|the rule|authoritative)"
    r"|\b(?:is|are)\s+(?:\w+\s+)?(?:in force|current|in effect|active|live|authoritative|binding|"
    r"the governing|the current|the active|valid)\b"
    r"|\b(?:governs|applies|apply|takes precedence|prevails)\b",
    re.I,
)
_SUPERSEDES_ACTIVE = re.compile(
    r"^\s+(?:supersedes|superseded|replaces|replaced|overrides|overrode)\s+(?:the\s+)?(?:adr|decision|record|#?\d)",
    re.I,
)


def _attached_id(text: str, pos: int, mentions: list[tuple[int, int, str]]) -> int | None:
    """Index of the mention a cue at `pos` is about: the nearest one before it with no comma or
    bracket in between, else the clause's first mention."""
    before = [k for k, (_, b, _) in enumerate(mentions) if b <= pos]
    for k in reversed(before):
        if not re.search(r"[,()\[\]]", text[mentions[k][1] : pos]):
            return k
    return 0 if before else None


def _live_asserted(text: str, k: int, mentions: list[tuple[int, int, str]]) -> bool:
    """An unnegated live assertion in the clause is about mention k."""
    for m in _LIVE.finditer(text):
        # "0001 no longer applies" negates the live word: that is a marker, handled in _dead.
        if (
            not prose.negated(text, m.start(), 3)
            and _attached_id(text, m.start(), mentions) == k
            and not re.search(r"\bno longer\s+$", text[: m.start()], re.I)
        ):
            return True
    return False


def _dead(text: str, k: int, mentions: list[tuple[int, int, str]]) -> bool:
    """A marker in the clause ties mention k to being out of force (and is not negated)."""
    a, b, _ = mentions[k]
    nxt = mentions[k + 1][0] if k + 1 < len(mentions) else len(text)
    before, after = text[:a], text[b:nxt]
    if _SUPERSEDES_ACTIVE.match(after):
        return False  # "ADR-0001 supersedes ADR-0003": it is the live one in this sentence
    if (m := _ATTRIBUTE.search(before)) and not prose.negated(before, m.start(), 2):
        return True
    if _APPOSITION.match(after) or _OBJECT_OF.search(before) or _NOT_BEFORE.search(before):
        return True
    for pat in (_PREDICATE, _NO_LONGER):
        if (m := pat.match(after)) and not prose.negated(after, m.start("q"), 3):
            return True
    if re.match(
        r"^\W*(?:\w+\s+){0,2}?(?:does|do|did|is|are|was)\s*(?:not|n't)\s+(?:\w+\s+)?(?:appl|govern|in force|current|valid|relevant)",
        after,
        re.I,
    ):
        return True
    return bool(_PAST_FRAMING.search(before)) and not prose.negated(before, len(before))


@lru_cache(maxsize=8192)
def live_citations(text: str, distractor: str) -> tuple[str, ...]:
    """The clauses of one message that cite `distractor` as if it were live."""
    if (distractor.lstrip("0") or "0") not in text:
        return ()  # cheap pre-filter
    out = []
    for clause in prose.analyse(text).coarse:
        # Quotes are NOT masked here: quoting the distractor ("Per “ADR-0001: …”, I kept 30 s") is
        # still citing it, and a false PASS is the worse error.
        t = clause.text
        mentions = prose.adr_mentions(t)
        for k, (_, _, adr_id) in enumerate(mentions):
            if adr_id != distractor:
                continue
            if _live_asserted(t, k, mentions) or not _dead(t, k, mentions):
                out.append(clause.text)
                break
    return tuple(out)


def rule(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    rows: list[Row] = []
    for run in run_texts(con):
        if not run.distractors:
            continue
        ev: list[int] = []
        ids: list[str] = []
        for seq, text in run.messages:
            live = [d for d in run.distractors if live_citations(text, d)]
            if live:
                ev.append(seq)
                ids.extend(d for d in live if d not in ids)
        reason = f"cited superseded {','.join(ids)} as live (seq {ev[0]})" if ev else None
        rows.append((run.run_id, not ev, ev, reason))
    return result(rows)
