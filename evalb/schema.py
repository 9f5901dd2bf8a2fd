"""The archive's records: one pydantic model per Parquet table; the Parquet schema is derived from them.

This module is the contract between `runner/` (writes) and `analysis/` (reads). Changing a field
means bumping SCHEMA_VERSION and adding a migration in `evalb.migrations`; docs/archive.md
documents every column and a test checks the two agree. A column added after v1 has a default
(`Field(default=...)`): the value a migration gives the rows of older files.
"""

from __future__ import annotations

import datetime as dt
import json
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:  # polars is imported where a frame is built: commands that never build one start faster
    import polars as pl

SCHEMA_VERSION = 3

Outcome = Literal[
    "completed", "timeout", "crashed", "client_error", "interrupted", "resource_limit", "harness_error",
    "turn_limit", "budget_limit",
]  # fmt: skip
OUTCOMES: tuple[str, ...] = get_args(Outcome)


class Record(BaseModel):
    """Base for archive rows: strict field set, each field documented."""

    model_config = ConfigDict(extra="forbid")


class RunRecord(Record):
    """One rep: a single headless client session in a fresh sandbox (or an imported transcript)."""

    run_id: str = Field(description="Unique id of the run (uuid4 hex).")
    schema_version: int = Field(description="Archive schema version this row was written with.")
    slot: str = Field(
        description=(
            "Slot key: 'variant|model|plugin_hash[:16]|rep' for recorded runs of the 'default' arm, "
            "the same plus '|arm' for a named arm (plugin_hash 'no-plugin' for a no-plugin arm), "
            "'import|variant|model|sha256[:16]' for imports; resume skips filled slots."
        )
    )
    source: Literal["record", "import", "selftest"] = Field(description="How the run entered the archive.")
    scenario: str = Field(description="Scenario id, e.g. 'R4'.")
    variant: str = Field(description="Variant id, e.g. 'R4' or 'R4-nograph'.")
    model_alias: str = Field(description="Model asked for: 'haiku', 'sonnet', 'scripted:oracle', ...")
    model_id: str | None = Field(description="Model id the client reported in system/init.")
    rep: int = Field(description="Repetition index within the slot's cell, from 0.")
    attempt: int = Field(description="Attempt number for this slot (1 = first try).")
    started_at: dt.datetime = Field(description="When the client was started (UTC).")
    ended_at: dt.datetime | None = Field(description="When the client ended (UTC); null if interrupted.")
    duration_ms: int | None = Field(description="Wall time of the session in milliseconds.")
    exit_code: int | None = Field(description="Client exit status; negative = killed by that signal.")
    outcome: str = Field(description=", ".join(OUTCOMES) + " (docs/runner.md, Outcomes).")
    outcome_detail: str = Field(description="One line on why the outcome is what it is.")
    reached_model: bool = Field(description="Whether any assistant event arrived (the model took a turn).")
    hook_seen: bool = Field(description="Whether a SessionStart system/hook_response event was seen.")
    hook_note: str | None = Field(description="The additionalContext the SessionStart hook returned.")
    client_version: str | None = Field(description="claude_code_version from system/init (or --version).")
    client_path: str = Field(description="The client binary that ran.")
    session_id: str | None = Field(description="The client's session id.")
    result_subtype: str | None = Field(description="Subtype of the last result event (success, error_...).")
    num_turns: int | None = Field(description="num_turns from the result event.")
    cost_usd: float | None = Field(description="total_cost_usd from the result event.")
    input_tokens: int | None = Field(description="usage.input_tokens from the result event.")
    output_tokens: int | None = Field(description="usage.output_tokens from the result event.")
    cache_read_tokens: int | None = Field(description="usage.cache_read_input_tokens.")
    cache_creation_tokens: int | None = Field(description="usage.cache_creation_input_tokens.")
    api_retries: int = Field(description="Number of system/api_retry events seen.")
    plugin_name: str | None = Field(description="Name from the plugin's .claude-plugin/plugin.json.")
    plugin_version: str | None = Field(description="Version from the plugin's plugin.json.")
    plugin_hash: str | None = Field(description="Content hash of the plugin directory under test.")
    plugin_dir: str | None = Field(description="Path of the plugin directory under test.")
    arm: str = Field(
        default="default",
        description="The grid arm this run belongs to: a name from the grid file's `plugins:` mapping, "
        "or 'default' for a grid or run naming one plugin (and for imports). A no-plugin arm has "
        "plugin_name/plugin_hash/plugin_dir null (docs/runner.md, Arms).",
    )
    fixture_hash: str | None = Field(description="Content hash of fixture/project (graph excluded).")
    scenario_hash: str | None = Field(description="Content hash of the scenario file.")
    rubric_hash: str | None = Field(description="Content hash of judge-rubric.md.")
    rules_hash: str | None = Field(description="Content hash of the checker rules at record time.")
    manifest_json: str | None = Field(description="The full frozen-part manifest (JSON) at record time.")
    confinement: str = Field(
        description="'bwrap', 'bwrap (no network)', 'none (opted out)', or 'n/a (imported)' for imports."
    )
    stderr: str = Field(description="The client's stderr (truncated to 64 KiB).")
    n_lines: int = Field(description="Stdout lines captured.")
    n_malformed: int = Field(description="Lines that were not a JSON object (kept raw, flagged).")
    recorder_version: str = Field(description="evalb version that wrote the row.")
    host: str = Field(description="Hostname of the recorder.")
    options_json: str = Field(description="Runner options for this rep (timeout, policy params, ...).")
    capture_json: str | None = Field(
        default=None,
        description="How the sandbox's end state was captured (JSON): limits, counts, caps hit, errors "
        "(see 'Capture' above); null for interrupted runs, imports without --sandbox and v1 runs.",
    )


class _Summary(Protocol):
    def run_fields(self) -> dict[str, Any]: ...


def expected_judge(model_alias: str) -> str:
    """The judge a run of this model expects: `scripted` (evalb-scripted-judge) for the scripted
    models, else `haiku` (`claude -p --model haiku`); stored as `options_json.judge`."""
    return "scripted" if model_alias.startswith("scripted:") else "haiku"


def run_record(summary: _Summary | None = None, **fields: Any) -> RunRecord:
    """The one way a runs row is built: the transcript summary's fields
    (`TranscriptSummary.run_fields()`: model id, tokens, cost, hook seen, ...), then `fields` over
    them. `schema_version` defaults to this schema; `options_json` (default `{}`) gains `judge`,
    the judge the run expects (see `expected_judge`), unless it names one already."""
    row: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "options_json": "{}"}
    if summary is not None:
        row.update(summary.run_fields())
    row.update(fields)
    opts = json.loads(row["options_json"])
    if isinstance(opts, dict) and "judge" not in opts:
        opts["judge"] = expected_judge(str(row.get("model_alias", "")))
        row["options_json"] = json.dumps(opts, sort_keys=True, default=str)
    return RunRecord(**row)


class EventRecord(Record):
    """One content block of one stream-json line (lines without content blocks give one row)."""

    run_id: str = Field(description="The run this line belongs to.")
    seq: int = Field(description="Line number in the client's stdout, from 0.")
    block_index: int | None = Field(description="Index of the block in message.content; null if none.")
    type: str | None = Field(description="Top-level 'type' (system, assistant, user, result, ...).")
    subtype: str | None = Field(description="Top-level 'subtype' (init, hook_response, success, ...).")
    message_id: str | None = Field(description="message.id (assistant events).")
    role: str | None = Field(description="message.role.")
    block_type: str | None = Field(description="text | tool_use | tool_result | thinking | ...")
    tool_name: str | None = Field(description="tool_use: the tool's name (Bash, Read, Skill, ...).")
    tool_use_id: str | None = Field(description="tool_use id, or the id a tool_result answers.")
    tool_input: str | None = Field(description="tool_use: the input object as JSON text.")
    text: str | None = Field(
        description="Text of a text/thinking block, tool_result content, or result text."
    )
    is_error: bool | None = Field(description="tool_result is_error, or the result event's is_error.")
    parent_tool_use_id: str | None = Field(description="Set on events from inside a sub-agent (Task).")
    is_synthetic: bool | None = Field(description="isSynthetic on user events (e.g. a skill's text).")
    malformed: bool = Field(description="True when the line was not a JSON object; `raw` keeps it.")
    received_at: dt.datetime | None = Field(description="When the recorder read the line (UTC).")
    raw: str = Field(description="The line exactly as the client wrote it (losslessly kept).")
    raw_encoding: str | None = Field(
        default=None,
        description="null: `raw` is the line's text; 'base64': the line was not valid UTF-8 and `raw` "
        "holds its bytes in base64.",
    )


class ArtifactRecord(Record):
    """One entry of the sandbox's end state that differs from the tree the sandbox was built with."""

    run_id: str = Field(description="The run whose sandbox this was.")
    path: str = Field(
        description="Path relative to the sandbox root; a name that is not UTF-8 is escaped (flag "
        "'name_escaped', see 'Capture'); '' for a v1 status listing."
    )
    kind: Literal["file", "symlink", "dir", "special", "unknown", "git_status"] = Field(
        description="'file' (a regular file), 'symlink', 'dir', 'special' (FIFO, socket, device), "
        "'unknown' (could not be examined), or 'git_status' (v1 only: the status listing). A deleted "
        "entry: what it was."
    )
    change: Literal["added", "modified", "deleted", "unseen", "unchanged"] | None = Field(
        description="'added', 'modified' (content, kind or mode), 'deleted', 'unseen' (a cap stopped "
        "the walk before it). v1 rows, migrated from git_status: '??'/'A' added, 'D' deleted, other "
        "codes modified, no code 'unchanged' (v1 kept every docs/adr file); null for the status listing."
    )
    mode: int | None = Field(default=None, description="Permission bits (e.g. 420 = 0o644); null if deleted.")
    size: int | None = Field(description="Size in bytes (a link: its target's length).")
    sha256: str | None = Field(description="Hash of a regular file's bytes; null past a hash cap.")
    link_target: str | None = Field(
        default=None, description="A symlink's target text (never followed; escaped like paths)."
    )
    content: str | None = Field(
        description="A regular file's text (UTF-8, replacement on bad bytes); null for binary files "
        "(a NUL byte), hard-linked files, or past a content cap; v1: the status text."
    )
    flags: list[str] = Field(
        default_factory=list,
        description="What capture noticed or withheld: name_escaped, content_cap, hash_cap, binary, "
        "hardlink, fifo, socket, chardev, blockdev, depth_cap, error:..., (see 'Capture').",
    )
    git_status: str | None = Field(
        default=None, description="v1 only (git is no longer run): porcelain status code, e.g. '??', ' M'."
    )


class JudgementRecord(Record):
    """A judge's answer for a run's final message; keyed so rescoring never pays twice."""

    run_id: str = Field(description="The run judged.")
    rubric_hash: str = Field(description="Content hash of the rubric used.")
    judge: str = Field(description="Judge identity, e.g. 'claude -p --model haiku' or the stub command.")
    verdict: Literal["YES", "NO", "ERROR"] = Field(description="YES = proposed/asked to record.")
    raw_output: str = Field(description="What the judge printed.")
    judged_at: dt.datetime = Field(description="When (UTC).")


class ScoreRecord(Record):
    """One run's verdict under one checker version."""

    run_id: str = Field(description="The run scored.")
    checker_hash: str = Field(description="Hash of all rules (and rubric) that produced this row.")
    scored_at: dt.datetime = Field(description="When (UTC).")
    scenario: str = Field(description="Copied from runs for convenience.")
    variant: str = Field(description="Copied from runs.")
    model_alias: str = Field(description="Copied from runs.")
    plugin_hash: str | None = Field(description="Copied from runs.")
    rep: int = Field(description="Copied from runs.")
    valid: bool = Field(description="False = INVALID run, excluded from pass rates.")
    invalid_reason: str | None = Field(description="Why the run is invalid.")
    axis_a: bool | None = Field(description="Unprompted consultation (null when invalid).")
    axis_b: bool | None = Field(description="Specific correctness (null when invalid).")
    passed: bool | None = Field(description="axis_a AND axis_b (null when invalid).")
    needless: bool | None = Field(
        default=None,
        description="O (over-triggering) scenarios: the run consulted the ADR system or proposed an ADR "
        "although the task had nothing to do with a decision (null for W/R runs and invalid runs).",
    )
    verdict: Literal["PASS", "FAIL", "INVALID"] = Field(description="What the TSV row says.")
    reasons: str = Field(description="Short human reasons, '; '-separated.")
    evidence_a: list[int] = Field(description="seq numbers of the events that decided axis (a).")
    evidence_b: list[int] = Field(description="seq numbers of the events that decided axis (b).")


TABLES: dict[str, type[Record]] = {
    "runs": RunRecord,
    "events": EventRecord,
    "artifacts": ArtifactRecord,
    "judgements": JudgementRecord,
    "scores": ScoreRecord,
}


def _polars_type(annotation: Any) -> pl.DataType:
    import polars as pl

    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return _polars_type(inner[0])
    if origin is Literal:
        return pl.String()
    if origin is list:
        return pl.List(_polars_type(get_args(annotation)[0]))
    mapping: dict[Any, pl.DataType] = {
        str: pl.String(),
        int: pl.Int64(),
        float: pl.Float64(),
        bool: pl.Boolean(),
        dt.datetime: pl.Datetime("us", "UTC"),
    }
    return mapping[annotation]


def polars_schema(table: str) -> pl.Schema:
    """The Parquet/Polars schema of a table, derived from its record model."""
    import polars as pl

    model = TABLES[table]
    return pl.Schema({name: _polars_type(f.annotation) for name, f in model.model_fields.items()})


def columns(table: str) -> list[str]:
    """Column names of a table, in order."""
    return list(TABLES[table].model_fields)


def to_frame(table: str, rows: Sequence[Record] | Sequence[dict[str, Any]]) -> pl.DataFrame:
    """Rows (records or dicts) as a DataFrame with exactly the table's schema."""
    import polars as pl

    dicts = [r.model_dump() if isinstance(r, BaseModel) else r for r in rows]
    return pl.DataFrame(dicts, schema=polars_schema(table), orient="row" if not dicts else None)
