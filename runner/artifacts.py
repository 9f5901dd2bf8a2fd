"""Collecting a sandbox's end state after a session: git status and the content of what changed."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from evalb.schema import ArtifactRecord

MAX_FILE_BYTES = 1 << 20  # larger files keep their hash and size, not their content


def _git(sandbox: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "core.quotepath=off", *args], cwd=sandbox, capture_output=True, text=True, check=False
    ).stdout


def collect(run_id: str, sandbox: Path) -> list[ArtifactRecord]:
    """One `git_status` row, then one row per added/changed/deleted path (docs/adr/ always included)."""
    status = _git(sandbox, "status", "--porcelain=v1", "--untracked-files=all")
    rows = [
        ArtifactRecord(
            run_id=run_id, path="", kind="git_status", git_status=None, content=status, sha256=None, size=None
        )
    ]
    seen: set[str] = set()
    for line in status.splitlines():
        code, path = line[:2], line[3:]
        if " -> " in path:  # a rename: keep the new name
            path = path.split(" -> ", 1)[1]
        path = path.strip('"')
        seen.add(path)
        rows.append(_file_row(run_id, sandbox, path, code))
    adr_dir = sandbox / "docs" / "adr"
    if adr_dir.is_dir():
        for p in sorted(adr_dir.rglob("*")):
            rel = p.relative_to(sandbox).as_posix()
            if p.is_file() and rel not in seen:
                rows.append(_file_row(run_id, sandbox, rel, None))
    return rows


def _file_row(run_id: str, sandbox: Path, rel: str, code: str | None) -> ArtifactRecord:
    p = sandbox / rel
    if not p.is_file():
        return ArtifactRecord(
            run_id=run_id, path=rel, kind="deleted", git_status=code, content=None, sha256=None, size=None
        )
    data = p.read_bytes()
    content = data.decode("utf-8", errors="replace") if len(data) <= MAX_FILE_BYTES else None
    return ArtifactRecord(
        run_id=run_id,
        path=rel,
        kind="file",
        git_status=code,
        content=content,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
    )
