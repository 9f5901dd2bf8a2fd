"""Bad input: one clear line on stderr, a non-zero exit, and the archive exactly as it was before.

An existing archive (one rep recorded) is snapshotted (every file's path and hash) before each bad
command and compared after. None of these commands gets as far as starting a client."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import record_grid
from tests.hardening.helpers import run_recorder, snapshot


@pytest.fixture(scope="module")
def base_archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("bad") / "archive"
    record_grid(root, ["R1"], ["scripted:oblivious"], 1, jobs=1)
    return root


@pytest.fixture
def archive(base_archive: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "archive"
    shutil.copytree(base_archive, dest)
    return dest


def _one_line_refusal(res: subprocess.CompletedProcess[str], needle: str) -> None:
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0, res.stderr
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("error: ") and needle in lines[0], lines[0]


@pytest.mark.client
@pytest.mark.parametrize(
    ("args", "env", "needle"),
    [
        (["R9", "scripted:oracle"], {}, "unknown scenario 'R9'"),
        (["R1", "scripted:wizard"], {}, "unknown scripted policy 'wizard'"),
        (["R1", "scripted:oracle", "--plugin-dir", "/nonexistent/plugin"], {}, "does not exist"),
        (["R1", "haiku"], {"ANTHROPIC_API_KEY": None, "CLAUDE_CODE_OAUTH_TOKEN": None}, "no credentials"),
        (["R1", "scripted:oracle"], {"EVALB_CLAUDE_BIN": "/nonexistent/claude"}, "scripts/setup"),
        (["R1", "scripted:oracle", "--inject-fault", "flood:turn=0"], {}, "unknown fault kind"),
    ],
    ids=["scenario", "policy", "plugin-missing", "no-credentials", "no-client", "bad-fault"],
)
def test_refusals_leave_the_archive_as_it_was(
    archive: Path, args: list[str], env: dict[str, str | None], needle: str
) -> None:
    before = snapshot(archive)
    full_env = {k: v for k, v in os.environ.items() if k not in env}
    full_env.update({k: v for k, v in env.items() if v is not None})
    if "haiku" in args:  # no credential of any kind
        for k in ("ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"):
            full_env.pop(k, None)
    _one_line_refusal(run_recorder("run", *args, "--archive", archive, env=full_env), needle)
    assert snapshot(archive) == before


@pytest.mark.client
def test_unreadable_plugin_dir(archive: Path, tmp_path: Path) -> None:
    """A plugin whose manifest cannot be read (a directory where plugin.json should be: root reads
    through chmod 000, so that is how unreadable is made here)."""
    plugin = tmp_path / "plugin"
    (plugin / ".claude-plugin" / "plugin.json").mkdir(parents=True)
    before = snapshot(archive)
    res = run_recorder("run", "R1", "scripted:oracle", "--plugin-dir", plugin, "--archive", archive)
    _one_line_refusal(res, "cannot read")
    assert snapshot(archive) == before


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


@pytest.mark.client
def test_read_only_archive(archive: Path) -> None:
    """The archive on a read-only mount (a bind remounted ro; bwrap's --ro-bind where mount is not allowed)."""
    before = snapshot(archive)
    cmd = ["run", "R1", "scripted:oracle", "--archive", str(archive)]
    if _mount("--bind", str(archive), str(archive)) and _mount("-o", "remount,bind,ro", str(archive)):
        try:
            res = run_recorder(*cmd)
        finally:
            subprocess.run(["umount", str(archive)], check=True)
    else:  # pragma: no cover - machines without mount rights
        exe = str(Path(".venv/bin/evalb-record").resolve())
        res = subprocess.run(
            ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(archive), str(archive), exe, *cmd],
            capture_output=True,
            text=True,
            timeout=120,
        )
    _one_line_refusal(res, "Read-only file system")
    assert snapshot(archive) == before


@pytest.mark.client
def test_full_disk(archive: Path, tmp_path: Path) -> None:
    """The archive on a small tmpfs filled up: refused before anything is written."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if not _mount("-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)):
        pytest.fail("cannot mount a tmpfs here (CI runs as root: mount -t tmpfs is expected to work)")
    try:
        root = mnt / "archive"
        shutil.copytree(archive, root)
        with open(mnt / "filler", "wb") as fh:  # leave ~1 MiB
            free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
            fh.write(b"\0" * max(0, free - 1024 * 1024))
        before = snapshot(root)
        res = run_recorder("run", "R1,R2", "scripted:oracle", "--archive", root)
        _one_line_refusal(res, "the disk is full")
        assert snapshot(root) == before
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
