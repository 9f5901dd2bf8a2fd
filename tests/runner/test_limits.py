"""Per-rep limits without the client: how each is held, the fallbacks, the end-of-rep kill."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from runner import limits
from runner.limits import Limits, RepGuard


def test_without_a_writable_cgroup_the_record_says_what_is_not_enforced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "CGROUP_ROOT", tmp_path / "no-cgroups")
    with RepGuard(Limits(memory=1 << 30, pids=100, tmp=1 << 20, file_size=1 << 20), confined=True) as g:
        assert g.groups == []
        assert g.enforced["memory"] == "not enforced (no writable memory cgroup)"
        assert g.enforced["file_size"] == "1 MiB (RLIMIT_FSIZE)" and g.enforced["kill"] == "process group"
        if os.geteuid() == 0:
            assert g.enforced["pids"].startswith("not enforced")
        assert g.hit() is None


@pytest.mark.skipif(
    not Path("/sys/fs/cgroup/pids").is_dir() or os.geteuid() != 0, reason="needs cgroup v1 as root"
)
def test_every_process_of_the_rep_is_killed_and_the_groups_removed() -> None:
    """A child that left the process group (setsid) is still in the rep's cgroup, and dies with it."""
    g = RepGuard(Limits(), confined=False).open()
    assert g.enforced["pids"] == "512 (cgroup v1)" and g.enforced["kill"] == "cgroup"
    marker = "7" + str(time.time_ns() % 10**6)
    p = subprocess.Popen(
        ["bash", "-c", f"setsid sleep {marker} & echo started"],
        preexec_fn=g.preexec,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "started"
    p.wait()
    assert len(g.pids()) == 1  # the setsid sleep, alone in the group
    groups = list(g.groups)
    g.close()
    assert g.pids() == [] and not any(x.exists() for x in groups)
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and _cmd(pid) == f"sleep {marker}"]


def _cmd(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--mem-limit", "lots"], "error: --mem-limit 'lots' is not a size"),
        (["--pids-limit", "10"], "error: --pids-limit 10 is too small for the client"),
        (["--credentials", "file"], "error: --credentials 'file' is not a mode"),
        (["--network", "api-only", "--no-confine"], "error: --network api-only needs confinement"),
    ],
)
def test_bad_limit_options_refuse_in_one_line(tmp_path: Path, args: list[str], said: str) -> None:
    from tests.hardening.helpers import run_recorder

    archive = tmp_path / "archive"
    res = run_recorder("run", "R1", "scripted:oracle", "--archive", archive, *args, timeout=60)
    lines = res.stderr.strip().splitlines()
    assert res.returncode != 0 and len(lines) == 1 and lines[0].startswith(said), res.stderr
    assert not archive.exists()
