"""Prose analysis for the axis (b) rules: what an agent's message asserts, clause by clause.

Deterministic and small on purpose (no model, no NLP library): a message is cleaned (fenced code
removed, URLs reduced to the ADR path they name, if any), split into sentences (`.`/`!`/`?`
before whitespace, `。！？`, newlines) and each sentence into clauses, then cues are read with
NegEx-style scope: a negation trigger ("not", "n't", "no", "never", "without", ...) negates a cue
that follows it within `WINDOW` words in the same clause; clause boundaries (`,;:`, dashes,
brackets, "but", "however", "although", "which", ...) end the scope; pseudo-negations ("not
only", "no doubt") are not triggers. Quoted spans ("…", “…”, «…», „…“, 「…」, `>` lines) are
reported speech: their cue words are not the agent's assertion. See docs/scoring.md, Axis (b).

Everything here is a pure function of the text; `analyse` is cached per distinct message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

#: How many words before a cue a negation trigger may stand and still negate it.
WINDOW = 6

_FENCE = re.compile(r"^[ \t]*(```|~~~)[^\n]*\n.*?(?:^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
_URL = re.compile(r"(?:https?://|www\.)[^\s<>()\[\]\"']+", re.I)
_ADR_PATH = re.compile(r"docs/adr/\d{4}-[\w.-]*", re.I)
_QUOTES = re.compile(
    r"\"[^\"\n]{0,400}\"|“[^”\n]{0,400}”|«[^»\n]{0,400}»|„[^“”\n]{0,400}[“”]|「[^」\n]{0,400}」|『[^』\n]{0,400}』"
)
_BLOCKQUOTE = re.compile(r"^[ \t]*>[^\n]*", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”»)]*\s+|(?<=[。！？])\s*|\n+")
#: Fine clause boundaries (conflict, content): punctuation and linking words.
_FINE = re.compile(
    r"[,;:()\[\]—–、，；：]|\s-\s"
    r"|\s(?=(?:but|however|although|though|whereas|while|yet|which|because|since|so|unless|except|instead)\b)",
    re.I,
)
#: Coarse clause boundaries (distractor): semicolons and contrastive or relative links only, so
#: "ADR-0001 (superseded)" and "ADR-0001 — superseded by 0003" stay one clause.
_COARSE = re.compile(
    r"[;；]|\s(?=(?:but|however|although|though|whereas|while|yet|because|since)\b)|,\s(?=(?:and|so)\b)",
    re.I,
)
_WORD = re.compile(r"[\w'’-]+")

NEGATION = re.compile(
    r"^(?:not|no|never|without|nothing|none|neither|nor|nobody|cannot|hardly|barely|nope|"
    r"\w+n't|\w+n’t|lack|lacks|absent|free)$",
    re.I,
)
PSEUDO_NEGATION = re.compile(
    r"\b(?:not only|not just|not merely|not simply|no doubt|nothing but|without doubt|without question|"
    r"not to mention|no matter|cannot but|can't help)\b",
    re.I,
)
_QUESTION_START = re.compile(
    r"^\W*(?:does|do|did|is|are|was|were|would|could|should|will|can|shall|may|might|must|has|have|had|"
    r"am|whether|how|what|why|which|who|where|when)\b",
    re.I,
)
_EMBEDDED_QUESTION = re.compile(
    r"\bwhether\b|\b(?:check|checked|checking|see|verify|verified|know|wonder|wondered|ask|asked|unsure|"
    r"sure|determine|confirm|find out)\s+if\b",
    re.I,
)
_BARE_NEGATIVE = re.compile(r"^\W*(?:none|no|nope|not really|not at all|n/a|nothing)\W*$", re.I)


@dataclass(frozen=True)
class Clause:
    """One clause: its text (`masked` has quoted spans blanked) and where it sits."""

    text: str
    masked: str
    sentence: int
    index: int
    question: bool


@dataclass(frozen=True)
class Message:
    """A cleaned message split into sentences and clauses at two granularities."""

    clean: str
    fine: tuple[Clause, ...]
    coarse: tuple[Clause, ...]


def _keep_adr_path(m: re.Match[str]) -> str:
    path = _ADR_PATH.search(m.group(0))
    return f" {path.group(0)} " if path else " "


def _mask(m: re.Match[str]) -> str:
    # Not blanks: a separator regex would swallow them together with the quote.
    return "_" * len(m.group(0))


def clean(text: str) -> str:
    """The message without fenced code blocks; URLs reduced to the docs/adr path they name, if any."""
    text = _FENCE.sub("\n", text.replace("\r\n", "\n"))
    return _URL.sub(_keep_adr_path, text).replace("’", "'")


def mask_quotes(text: str) -> str:
    """`text` with quoted spans and blockquote lines masked by '_' (same length)."""
    return _BLOCKQUOTE.sub(_mask, _QUOTES.sub(_mask, text))


def _split(text: str, masked: str, pattern: re.Pattern[str], sentence: int, question: bool) -> list[Clause]:
    out: list[Clause] = []
    pos = 0
    spans = [(m.start(), m.end()) for m in pattern.finditer(masked)] + [(len(masked), len(masked))]
    n = len(spans)
    for k, (a, b) in enumerate(spans):
        piece, mpiece = text[pos:a], masked[pos:a]
        if piece.strip():
            out.append(Clause(piece.strip(), mpiece.strip(), sentence, len(out), question and k == n - 1))
        pos = b
    return out


@lru_cache(maxsize=8192)
def analyse(text: str) -> Message:
    """Clean, split into sentences (split on the quote-masked text) and clauses."""
    cleaned = clean(text)
    masked = mask_quotes(cleaned)
    fine: list[Clause] = []
    coarse: list[Clause] = []
    pos = 0
    bounds = [(m.start(), m.end()) for m in _SENTENCE_END.finditer(masked)] + [(len(masked), len(masked))]
    for i, (a, b) in enumerate(bounds):
        sent, msent = cleaned[pos:a], masked[pos:a]
        pos = b
        if not sent.strip():
            continue
        q = msent.rstrip().endswith(("?", "？"))
        parts = _split(sent, msent, _FINE, i, q)
        # An interrogative clause anywhere in a question sentence makes it a question too.
        fine.extend(
            Clause(
                c.text,
                c.masked,
                c.sentence,
                c.index,
                c.question or (q and bool(_QUESTION_START.match(c.masked))),
            )
            for c in parts
        )
        coarse.extend(_split(sent, msent, _COARSE, i, q))
    return Message(cleaned, tuple(fine), tuple(coarse))


def words_before(text: str, pos: int, n: int = WINDOW) -> list[str]:
    """The last `n` words of text[:pos], lower-cased."""
    return [w.lower() for w in _WORD.findall(text[:pos])][-n:]


def negated(text: str, pos: int, n: int = WINDOW) -> bool:
    """Whether a negation trigger stands within `n` words before `pos` (pseudo-negations excluded)."""
    before = text[:pos]
    before = PSEUDO_NEGATION.sub(" ", before)
    return any(NEGATION.match(w) for w in words_before(before, len(before), n))


def embedded_question(text: str, pos: int) -> bool:
    """'I checked whether it conflicts', 'to see if it is UTC': not an assertion."""
    return bool(_EMBEDDED_QUESTION.search(text[:pos]))


def quoted_question(text: str, pos: int) -> bool:
    """Whether `pos` lies inside a quoted span that is itself a question ('You asked "UTC?"')."""
    return any(
        m.start() <= pos < m.end() and m.group(0)[1:-1].rstrip().endswith(("?", "？"))
        for m in _QUOTES.finditer(text)
    )


def bare_negative(clause: Clause) -> bool:
    """'none', 'no', 'not really': an answer that negates the previous clause ('Conflicts: none')."""
    return bool(_BARE_NEGATIVE.match(clause.masked))


# --- citations -----------------------------------------------------------------------------------
_REF_WORD = re.compile(
    r"(?:\b(?:pr|pull|pulls|issue|issues|ticket|bug|version|release|build|line|lines|port|page|step|job|"
    r"commit|order|invoice|pid|code|error|status|room|item|rev|revision|run|rep|seq|v)\s*[#:.]?\s*|#)$",
    re.I,
)
_NOT_FOUND_BEFORE = re.compile(
    r"(?:\b(?:could|can|did|do|does|was|were|is)\s*(?:not|n't)\s+|\bcannot\s+|\bunable\s+to\s+|\bfailed\s+to\s+)"
    r"(?:find|locate|see|open|read|access)(?:\s+(?:any|an|a|the))?\s*$"
    r"|\b(?:there\s+(?:is|was|are|were)\s+no|there's\s+no|no\s+such|found\s+no|no)\s*$",
    re.I,
)
_NOT_FOUND_AFTER = re.compile(
    r"^[\s\w.-]{0,12}?(?:do|does|did)(?:\s*not|n't)\s+exist|^\s*(?:is|was)\s+(?:missing|absent|not\s+found|"
    r"nowhere)|^\s*(?:not\s+found|missing|does not exist)",
    re.I,
)


@lru_cache(maxsize=64)
def cite_re(adr_id: str) -> re.Pattern[str]:
    """A citation of ADR `adr_id` ('0003'): ADR-0003, ADR 0003, ADR0003, ADR-3, ADR #3, a bare 0003,
    docs/adr/0003-….md. A bare 0003 must stand alone: not in 10003, 2.0003, 0003.5, x0003."""
    short = adr_id.lstrip("0") or "0"
    return re.compile(
        rf"(?<![0-9a-z_.:])(?P<bare>{adr_id})(?![0-9a-z_]|\.[0-9])"
        rf"|\badr[-_ #]*0*{short}(?![0-9])",
        re.I,
    )


def cites(text: str, adr_id: str) -> list[tuple[int, int]]:
    """Spans in `text` where it refers to ADR `adr_id` as a decision.

    Not a citation: a number inside a URL (the URL is gone after `clean`, unless it is a link to
    the ADR file), a date-like or range-like number (2025-0002, 0002/11), an issue/PR/version/line
    number (PR #0002, v0002, line 0002), an ADR the agent says it could not find or that does not
    exist ("I could not find ADR-0002", "there is no ADR 0002", "ADR-0002 does not exist").
    """
    out = []
    for m in cite_re(adr_id).finditer(text):
        a, b = m.start(), m.end()
        before, after = text[max(0, a - 40) : a], text[b : b + 40]
        if m.group("bare") and (
            re.search(r"\d[-/]$", before) or re.match(r"[-/]\d", after) or _REF_WORD.search(before)
        ):
            continue
        if _NOT_FOUND_BEFORE.search(before) or _NOT_FOUND_AFTER.match(after):
            continue
        out.append((a, b))
    return out


_ANY_ADR = re.compile(r"\badr[-_ #]*(\d{1,4})(?![0-9])|(?<![0-9a-z_.:])(0\d{3})(?![0-9a-z_]|\.[0-9])", re.I)


def adr_mentions(text: str) -> list[tuple[int, int, str]]:
    """(start, end, four-digit id) of every ADR citation in `text` (ADR-N forms, bare 0NNN, ADR paths)."""
    ids = {f"{int(m.group(1) or m.group(2)):04d}" for m in _ANY_ADR.finditer(text)}
    return sorted((a, b, adr_id) for adr_id in ids for a, b in cites(text, adr_id))
