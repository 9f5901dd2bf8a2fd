"""Scenario files: `scenarios/<ID>.md` = YAML frontmatter (checker metadata) + a held-out `## Task` block.

HELD-OUT: the Task block is read only to hand it to the client in `runner`; nothing else (the
self-test, the scripted policies, the checker) may look at it. `Scenario.task` is therefore loaded
lazily through `task_prompt()`, never printed, and never part of `repr`.
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evalb import paths
from evalb.errors import ScenarioError

ADR_ID = re.compile(r"^\d{4}$")
DEFAULT_CONFLICT_PATTERNS = [
    r"conflict",
    r"contradict",
    r"goes against",
    r"go against",
    r"violat",
    r"inconsistent with",
    r"at odds with",
    r"supersed",
    r"would (?:reverse|undo|override|break)",
]


class ScenarioKind(StrEnum):
    """W scenarios test the write trigger, R scenarios retrieval, O scenarios over-triggering (a task
    where consulting docs/adr or proposing an ADR is pointless; ids start with 'O')."""

    write = "write"
    retrieval = "retrieval"
    overtrigger = "overtrigger"


#: Listing order of the kinds (load_scenarios, grid 'all', TSV rows).
KIND_ORDER = {ScenarioKind.write: 0, ScenarioKind.retrieval: 1, ScenarioKind.overtrigger: 2}


def _compiled(patterns: list[str]) -> list[str]:
    """The patterns, each checked to compile (a bad one is a validation error, not a traceback)."""
    for p in patterns:
        try:
            re.compile(p)
        except re.error as e:
            raise ValueError(f"pattern {p!r} is not a valid regex: {e}") from e
    return patterns


class PolicyHints(BaseModel):
    """What an ideal agent would do here. Read by the scripted policies only, never by the checker."""

    model_config = ConfigDict(extra="forbid")

    touch_file: str = Field(description="The code file the task is mainly about (every policy reads it).")
    search_topic: str | None = Field(None, description="Words an ideal agent passes to `adr-search --topic`.")
    search_file: str | None = Field(None, description="File an ideal agent passes to `adr-search --file`.")
    record_title: str | None = Field(None, description="W: title of the ADR an ideal agent records.")
    record_supersedes: str | None = Field(None, description="W3: id of the ADR the new record supersedes.")
    edit_old: str | None = Field(
        None, description="O: text an ideal agent replaces in touch_file (None: it writes touch_file anew)."
    )
    edit_new: str | None = Field(None, description="O: the replacement text (or the new file's content).")
    replace_all: bool = Field(False, description="O: replace every occurrence of edit_old, not just one.")


class DoneCheck(BaseModel):
    """O: one file the task's success is read from, in the sandbox's end state."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str = Field(description="Path relative to the project root; must end as a changed regular file.")
    present: list[str] = Field(default_factory=list, description="Regexes that must ALL occur in it.")
    absent: list[str] = Field(default_factory=list, description="Regexes none of which may occur in it.")

    @field_validator("present", "absent")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        return _compiled(v)

    @model_validator(mode="after")
    def _something(self) -> DoneCheck:
        if not self.present and not self.absent:
            raise ValueError(f"done check on {self.path} needs present or absent patterns")
        if self.path.startswith("/") or ".." in self.path.split("/"):
            raise ValueError(f"done check path {self.path!r} must be relative to the project, without '..'")
        return self


class Variant(BaseModel):
    """A runnable form of a scenario: the base one, or e.g. R4-nograph (same Task, graph absent)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Variant id as written in runs and TSV rows, e.g. 'R4' or 'R4-nograph'.")
    graph: bool = Field(description="Whether the sandbox keeps fixture/project/graphify-out/.")
    expect_b: Literal["pass", "fail"] = Field(
        "pass", description="What axis (b) should give for an ideal agent (fail for degradation checks)."
    )
    description: str = ""


class Scenario(BaseModel):
    """Checker metadata of one scenario (frontmatter), validated; the Task block stays out of it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(description="W1..W3, R1..R4 or O1..O3.")
    kind: ScenarioKind
    title: str = Field(description="Short human title; never shown to the model.")
    correct_adr: str | None = Field(None, description="R: the ADR id the answer must rest on, e.g. '0002'.")
    match: Literal["id", "content"] = Field(
        "id", description="R: cite the id ('id') or state the decision's content ('content', R3)."
    )
    content_patterns: list[str] = Field(
        default_factory=list, description="R, match=content: regexes that must ALL occur in assistant text."
    )
    distractors: list[str] = Field(
        default_factory=list, description="R2: superseded ids that FAIL axis (b) when cited as if live."
    )
    require_conflict: bool = Field(
        True, description="R: the answer must flag the conflict with the decision."
    )
    conflict_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_CONFLICT_PATTERNS))
    topic_patterns: list[str] = Field(
        default_factory=list,
        description="W: regexes; a new docs/adr/NNNN-*.md whose name or body matches any one passes (b).",
    )
    supersedes: str | None = Field(None, description="W3: the earlier ADR the reversal concerns.")
    done: list[DoneCheck] = Field(
        default_factory=list, description="O: the task is done when every check holds (axis (b))."
    )
    graph: bool = Field(False, description="Whether the base variant's sandbox keeps the code graph.")
    variants: list[Variant] = Field(default_factory=list, description="Extra variants, e.g. R4-nograph.")
    policy: PolicyHints
    source: Path = Field(exclude=True, description="The scenario file.")
    sha256: str = Field(description="Content hash of the whole scenario file (Task block included).")

    @field_validator("correct_adr", "supersedes")
    @classmethod
    def _adr_id(cls, v: str | None) -> str | None:
        if v is not None and not ADR_ID.match(v):
            raise ValueError(f"ADR ids are four digits, got {v!r}")
        return v

    @field_validator("distractors")
    @classmethod
    def _adr_ids(cls, v: list[str]) -> list[str]:
        for i in v:
            cls._adr_id(i)
        return v

    @field_validator("content_patterns", "topic_patterns", "conflict_patterns")
    @classmethod
    def _regexes(cls, v: list[str]) -> list[str]:
        return _compiled(v)

    @model_validator(mode="after")
    def _kind_fields(self) -> Scenario:
        if self.kind is ScenarioKind.retrieval and not self.correct_adr:
            raise ValueError("retrieval scenarios need correct_adr")
        if self.kind is ScenarioKind.retrieval and self.match == "content" and not self.content_patterns:
            raise ValueError("match: content needs content_patterns")
        if self.kind is ScenarioKind.write and not self.topic_patterns:
            raise ValueError("write scenarios need topic_patterns")
        if self.kind is ScenarioKind.overtrigger:
            if not self.done:
                raise ValueError("overtrigger scenarios need done checks (what the task's success is)")
            if not self.id.startswith("O"):
                raise ValueError(
                    "overtrigger scenario ids start with 'O' (reports group them by that letter)"
                )
            if self.policy.edit_new is None:
                raise ValueError("overtrigger scenarios need policy.edit_new (what an ideal agent changes)")
        elif self.id.startswith("O"):
            raise ValueError("ids starting with 'O' are for overtrigger scenarios")
        return self

    def all_variants(self) -> list[Variant]:
        """The base variant first, then the extra ones."""
        return [Variant(id=self.id, graph=self.graph, expect_b="pass"), *self.variants]

    def task_prompt(self) -> str:
        """The held-out Task block. Only `runner` may call this, to start the client."""
        return parse_task_block(self.source.read_text(encoding="utf-8"), self.source)


_FRONTMATTER = re.compile(r"\A---\n(.*?)\n---\n(.*)\Z", re.S)
_TASK = re.compile(r"^## Task[ \t]*\n(.*?)(?=^## |\Z)", re.S | re.M)


def parse_task_block(text: str, source: Path) -> str:
    """The text under `## Task`, stripped; error when absent or empty."""
    m = _TASK.search(text)
    if not m or not m.group(1).strip():
        raise ScenarioError(f"{source}: no '## Task' block", hint="add a '## Task' section with the prompt")
    return m.group(1).strip()


def parse_scenario(path: Path) -> Scenario:
    """Parse and validate one scenario file (its Task block must exist but is not kept)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ScenarioError(f"cannot read scenario file {path}: {e.strerror}") from e
    text = raw.decode("utf-8")
    m = _FRONTMATTER.match(text)
    if not m:
        raise ScenarioError(f"{path}: no YAML frontmatter", hint="start the file with a '---' block")
    parse_task_block(m.group(2), path)
    try:
        meta = yaml.safe_load(m.group(1)) or {}
        return Scenario.model_validate({**meta, "source": path, "sha256": hashlib.sha256(raw).hexdigest()})
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: frontmatter is not valid YAML: {e}") from e
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or "frontmatter"
        raise ScenarioError(f"{path}: {loc}: {first['msg']}") from e


@cache
def _load_dir(directory: Path) -> tuple[Scenario, ...]:
    parsed = [parse_scenario(p) for p in directory.glob("*.md")]
    # The spec's order: write-trigger scenarios first, then retrieval, then over-triggering, each by id.
    return tuple(sorted(parsed, key=lambda s: (KIND_ORDER[s.kind], s.id)))


def load_scenarios(directory: Path | None = None) -> list[Scenario]:
    """All scenarios in `directory` (default: the repo's scenarios/): W, then R, then O, each by id."""
    return list(_load_dir((directory or paths.SCENARIOS_DIR).resolve()))


def resolve_variant(variant_id: str, directory: Path | None = None) -> tuple[Scenario, Variant]:
    """Find the scenario and variant for an id such as 'R2' or 'R4-nograph'."""
    known: list[str] = []
    for sc in load_scenarios(directory):
        for v in sc.all_variants():
            known.append(v.id)
            if v.id.lower() == variant_id.lower():
                return sc, v
    raise ScenarioError(
        f"unknown scenario {variant_id!r}", hint=f"choose one of: {', '.join(known) or '(none found)'}"
    )


def all_variant_ids(directory: Path | None = None) -> list[str]:
    """Every runnable variant id, e.g. W1..W3, R1..R4, R4-nograph, O1..O3."""
    return [v.id for sc in load_scenarios(directory) for v in sc.all_variants()]
