"""Helpers for the checker tests: build small archives of fabricated runs and score them."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analysis import fabricate as fab
from analysis.checker import rule_connection, score_archive
from analysis.judge import KeywordJudge
from evalb.archive import Archive

GOLDEN = Path(__file__).parent / "golden"


def hooked() -> fab.TranscriptBuilder:
    """A session that saw the hook and the init line, as every valid run starts."""
    return fab.TranscriptBuilder().hook().init()


class Runs:
    """An archive under construction: add runs by name, then score or query them."""

    def __init__(self, root: Path) -> None:
        self.archive = Archive(root)
        self.archive.ensure()
        self.ids: dict[str, str] = {}

    def add(
        self,
        name: str,
        lines: list[str],
        variant: str = "R1",
        *,
        files: list[fab.SandboxFile] | None = None,
        outcome: str = "completed",
        model: str = "m",
    ) -> str:
        scenario = variant.split("-")[0]
        self.ids[name] = fab.archive_transcript(
            self.archive,
            lines,
            variant=variant,
            scenario=scenario,
            model_alias=model,
            files=files,
            outcome=outcome,
            rep=len(self.ids),
        )
        return self.ids[name]

    def rule(self, view: str, **kw: object) -> dict[str, dict]:
        """Rows of one rule view, keyed by the test's run name."""
        con = rule_connection(self.archive.root, **kw)  # type: ignore[arg-type]
        df = con.sql(f"SELECT * FROM {view}").pl()
        by_id = {r["run_id"]: r for r in df.iter_rows(named=True)}
        return {name: by_id.get(rid, {}) for name, rid in self.ids.items()}

    def score(self, **kw: object) -> dict[str, dict]:
        kw.setdefault("judge", KeywordJudge())
        sp = score_archive(self.archive.root, **kw)  # type: ignore[arg-type]
        by_id = {r["run_id"]: r for r in sp.scores.iter_rows(named=True)}
        return {name: by_id[rid] for name, rid in self.ids.items() if rid in by_id}


def read_golden(name: str) -> list[str]:
    return (GOLDEN / name).read_text(encoding="utf-8").splitlines()


def ab(v: bool | None) -> str:
    return "-" if v is None else ("PASS" if v else "FAIL")


def frame_rows(df: pl.DataFrame) -> list[dict]:
    return list(df.iter_rows(named=True))
