"""A rep's sandbox is hostile input: capture runs no git, follows no link, opens no special file,
and stays bounded, through real confined reps (scripted:shell) and through `evalb-record import
--sandbox`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import polars as pl
import pytest

from runner.limits import Limits
from tests.conftest import GOLDEN, SCRIPTED_JUDGE
from tests.hardening.helpers import check_archive, record_shell, run_recorder, snapshot

SECRET = "hostile-capture-canary-90210"
ENV_SECRET = "recorder-env-canary-31337"
BIN = Path(".venv/bin").resolve()
ADR = "docs/adr/0007-dedup-webhooks.md"  # matches W1's topic pattern 'dedup'


def _rm(path: Path) -> None:
    subprocess.run(["rm", "-rf", str(path)], check=False)  # 1,200-deep trees: not shutil.rmtree


def _peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def _git_attacks(marks: Path) -> list[str]:
    """Shell commands that arm every git config vector we know, each touching a marker file in
    `marks` (a host directory) if anything runs it."""
    hook = f"#!/bin/sh\ntouch {marks}/hook\n"
    hooks = " ".join(
        f"hooks/{h}" for h in ("post-index-change", "pre-commit", "post-checkout", "reference-transaction")
    )
    cfg = {
        "core.fsmonitor": f"touch {marks}/fsmonitor; echo",
        "filter.evil.clean": f"touch {marks}/clean; cat",
        "filter.evil.smudge": f"touch {marks}/smudge; cat",
        "filter.evil.process": f"touch {marks}/process",
        "diff.evil.textconv": f"touch {marks}/textconv; cat",
        "diff.external": f"touch {marks}/diff-external",
        "core.pager": f"touch {marks}/pager; cat",
        "core.editor": f"touch {marks}/editor",
        "core.sshCommand": f"touch {marks}/ssh",
        "core.hooksPath": "hooks",
        "status.showUntrackedFiles": "all",
    }
    sets = "; ".join(f"git config {k} {json.dumps(v)}" for k, v in cfg.items())
    return [
        "printf '* filter=evil diff=evil\\n' > .gitattributes && echo changed >> README.md",
        f"mkdir -p hooks && printf {json.dumps(hook)} > hooks/x && chmod +x hooks/x && "
        f"for h in {hooks}; do cp hooks/x $h; done",
        sets,
        f"printf '[core]\\n\\tfsmonitor = touch {marks}/included\\n' > evil.cfg && "
        "git config include.path ../evil.cfg",
    ]


def _assert_no_secret(root: Path, secrets: list[str]) -> None:
    """No secret byte in any file of the archive (raw), nor in any string column (decoded)."""
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    for p in files:
        data = p.read_bytes()
        for s in secrets:
            assert s.encode() not in data, f"{s} in {p}"
        if p.suffix != ".parquet":
            continue
        df = pl.read_parquet(p)
        for col, dtype in df.schema.items():
            if dtype == pl.String:
                values = df[col].drop_nulls().to_list()
            elif dtype == pl.List(pl.String):
                values = [x for xs in df[col].drop_nulls().to_list() for x in xs]
            else:
                continue
            text = "\n".join(values)
            for s in secrets:
                assert s not in text, f"{s} in {p}:{col}"


def _arts(root: Path) -> pl.DataFrame:
    return pl.read_parquet(str(root / "artifacts" / "*.parquet"))


def _score(root: Path) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [str(BIN / "evalb-score"), "--archive", str(root)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ADR_EVAL_B_JUDGE_CMD": SCRIPTED_JUDGE},
    )
    assert out.returncode in (0, 1), out.stderr  # 1: a valid run failed (the agents here do no task)
    assert "Traceback" not in out.stderr and "error:" not in out.stderr, out.stderr
    return out


@pytest.fixture
def other_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "other"
    repo.mkdir()
    git = ["git", "-c", "user.name=o", "-c", "user.email=o@o", "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("other\n")
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "other"], check=True)
    return repo


@pytest.mark.client
def test_git_config_in_the_sandbox_never_runs_on_the_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, other_repo: Path
) -> None:
    """Every git vector armed inside a confined rep (and a `.git` file pointing at another
    repository in a second rep): nothing runs on the host, the other repository is untouched."""
    marks = tmp_path / "marks"
    marks.mkdir()
    before = snapshot(other_repo / ".git")
    root = tmp_path / "a"
    record_shell(root, tmp_path, _git_attacks(marks), monkeypatch=monkeypatch, workdir=tmp_path)
    df = record_shell(
        root,
        tmp_path,
        [f"rm -rf .git && printf 'gitdir: {other_repo}/.git\\n' > .git && echo x > new.txt"],
        variant="R2",
        monkeypatch=monkeypatch,
        workdir=tmp_path,
    )
    assert sorted(df["outcome"]) == ["completed", "completed"]
    assert list(marks.iterdir()) == [], "a command from the sandbox's git config ran on the host"
    assert snapshot(other_repo / ".git") == before
    check_archive(root)
    caps = {r["variant"]: json.loads(r["capture_json"]) for r in df.iter_rows(named=True)}
    assert caps["R1"]["git"] == "dir" and caps["R2"]["git"] == "file"
    arts = _arts(root)
    by_variant = arts.join(df.select("run_id", "variant"), on="run_id")
    r1 = set(by_variant.filter(pl.col("variant") == "R1").select("path", "change").iter_rows())
    assert {("README.md", "modified"), (".gitattributes", "added"), ("hooks/x", "added")} <= r1
    assert set(by_variant.filter(pl.col("variant") == "R2")["path"]) == {"new.txt"}
    assert arts["git_status"].null_count() == arts.height  # git was not run
    _score(root)
    assert list(marks.iterdir()) == []


@pytest.mark.client
def test_links_to_host_secrets_are_recorded_as_links(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Symlinks to a host file holding a secret, to the recorder's /proc/self/environ, to /proc/1,
    and a docs/adr/NNNN-*.md link on the W1 topic: archived as links, no secret byte anywhere in the
    archive (scored too), and the link does not pass W1's new-ADR check."""
    secret = tmp_path / "host-secret.txt"
    secret.write_text(SECRET)
    monkeypatch.setenv("EVALB_HOSTILE_CANARY", ENV_SECRET)  # in the recorder's own environment
    root = tmp_path / "a"
    cmds = [
        f"ln -s {secret} x && ln -s {secret} {ADR} && ln -s /proc/self/environ env",
        f"ln -s /proc/1/environ p1 && ln -s {tmp_path} hostdir && ln -s {secret} docs/adr/0001-retry.md",
    ]
    df = record_shell(root, tmp_path, cmds, variant="W1", monkeypatch=monkeypatch, workdir=tmp_path)
    assert df["outcome"].to_list() == ["completed"]
    check_archive(root)
    links = _arts(root).filter(pl.col("kind") == "symlink")
    assert dict(links.select("path", "link_target").iter_rows()) == {
        "x": str(secret),
        ADR: str(secret),
        "env": "/proc/self/environ",
        "p1": "/proc/1/environ",
        "hostdir": str(tmp_path),
        "docs/adr/0001-retry.md": str(secret),
    }
    assert links["content"].null_count() == links.height and links["sha256"].null_count() == links.height
    from analysis.checker import rule_connection

    assert rule_connection(root).execute("SELECT ok FROM new_adr").fetchall() == [(False,)]
    _score(root)
    _assert_no_secret(root, [SECRET, ENV_SECRET])


@pytest.mark.client
def test_a_committed_adr_is_a_new_adr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that writes its ADR and commits it (git add && git commit) has written one."""
    root = tmp_path / "a"
    cmds = [
        f"printf '# Deduplicate webhooks by id\\n' > {ADR} && git add {ADR} && git commit -qm adr && git status --short"
    ]
    df = record_shell(root, tmp_path, cmds, variant="W1", monkeypatch=monkeypatch, workdir=tmp_path)
    assert df["outcome"].to_list() == ["completed"]
    row = _arts(root).filter(pl.col("path") == ADR).row(0, named=True)
    assert (row["kind"], row["change"], row["content"]) == ("file", "added", "# Deduplicate webhooks by id\n")
    from analysis.checker import rule_connection

    ok = rule_connection(root).execute("SELECT ok, reason FROM new_adr").fetchall()
    assert ok == [(True, f"new ADR {ADR} matches the topic")]


def _resource_attacks() -> list[str]:
    return [
        "printf x > \"$(printf 'docs/adr/0098-bad\\377\\376.md')\" && printf y > \"$(printf 'bad\\303\\050')\"",
        'mkdir -p "$(printf "d/%.0s" $(seq 1200))" && echo deep',  # 1,200 levels (2,400 bytes of path)
        'D="docs/adr/$(printf "sub/%.0s" $(seq 100))" && mkdir -p "$D" && echo x > "$D/0100-deep.md"',
        "mkfifo fifo docs/adr/0097-fifo.md && truncate -s 2G huge.bin",
        "mkdir sparse && for i in $(seq 500); do truncate -s 1M sparse/f$i; done",
    ]


@pytest.mark.client
def test_resource_attacks_are_capped_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names that are not UTF-8, a 1,200-deep tree, deep folders under docs/adr, FIFOs, a 2 GB sparse
    file and 500 sparse 1 MiB files: the rep is completed with its caps recorded, the recorder's
    memory stays bounded, the archive stays small and readable, and scoring works."""
    root, work = tmp_path / "a", tmp_path / "work"
    work.mkdir()
    peak = _peak_rss_mib()
    try:
        # files up to 4 GiB may be written (the default per-rep cap is 1 GiB): the 2 GB sparse file must
        # reach capture, whose own caps are what this test is about
        df = record_shell(
            root, tmp_path, _resource_attacks(), monkeypatch=monkeypatch, workdir=work,
            limits=Limits(file_size=4 << 30),
        )  # fmt: skip
        grew = _peak_rss_mib() - peak
        left = list(work.iterdir())  # the recorder removed the 1,200-deep sandbox
    finally:
        _rm(work)
    assert left == []
    assert df["outcome"].to_list() == ["completed"], df["outcome_detail"].to_list()
    assert grew < 256, f"the recorder's peak memory grew by {grew:.0f} MiB"
    cap = json.loads(df["capture_json"][0])
    assert {"max_depth", "max_file_hash", "max_run_hash"} <= set(cap["caps_hit"]), cap
    assert cap["errors"] == 0 and cap["escaped_names"] == 2 and cap["special"] == 2
    assert cap["content_bytes"] < 1 << 20
    check_archive(root)
    arts = _arts(root)
    rows = {r["path"]: r for r in arts.iter_rows(named=True)}
    assert rows["fifo"]["flags"] == ["fifo"] and rows["docs/adr/0097-fifo.md"]["kind"] == "special"
    assert rows["huge.bin"]["sha256"] is None and rows["huge.bin"]["size"] == 2 << 30
    assert rows["docs/adr/0098-bad\\xff\\xfe.md"]["flags"] == ["name_escaped"]
    assert rows["bad\\xc3("]["content"] == "y"
    sparse = arts.filter(pl.col("path").str.starts_with("sparse/f"))
    assert sparse.height == 500 and sparse["content"].null_count() == 500
    assert max(p.count("/") for p in rows) == 64  # the depth cap
    size = sum(p.stat().st_size for p in (root / "artifacts").glob("*.parquet"))
    assert size < 512 * 1024, f"artifacts take {size} bytes"
    _score(root)


def test_import_of_an_attacked_sandbox(tmp_path: Path, other_repo: Path) -> None:
    """`evalb sandbox R2 D/sb`, attacked from outside (git vectors, links to secrets, FIFO, names that
    are not UTF-8, a deep tree, sparse files), then `evalb-record import --sandbox D/sb`: nothing runs,
    nothing leaks, caps recorded; a `.git` file pointing at another repository leaves it untouched."""
    marks = tmp_path / "marks"
    marks.mkdir()
    sb, sb2, root = tmp_path / "sb", tmp_path / "sb2", tmp_path / "a"
    for d in (sb, sb2):
        out = subprocess.run([str(BIN / "evalb"), "sandbox", "R2", str(d)], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
    secret = tmp_path / "host-secret.txt"
    secret.write_text(SECRET)
    script = " && ".join(
        [
            *_git_attacks(marks),
            f"ln -s {secret} x && ln -s {secret} docs/adr/0099-x.md && ln -s /proc/self/environ env",
            *_resource_attacks(),
        ]
    )
    subprocess.run(["bash", "-c", script], cwd=sb, check=True, capture_output=True)
    before = snapshot(other_repo / ".git")
    shutil.rmtree(sb2 / ".git")
    (sb2 / ".git").write_text(f"gitdir: {other_repo}/.git\n")
    (sb2 / "new.txt").write_text("x")
    env = {**os.environ, "EVALB_HOSTILE_CANARY": ENV_SECRET}
    try:
        for transcript, box in (("plugin-hook-bash.jsonl", sb), ("no-plugin.jsonl", sb2)):
            out = run_recorder(
                "import", GOLDEN / transcript, "--scenario", "R2", "--model", "x", "--sandbox", box,
                "--archive", root, env=env,
            )  # fmt: skip
            assert out.returncode == 0, out.stderr
    finally:
        _rm(sb)
    assert list(marks.iterdir()) == [] and snapshot(other_repo / ".git") == before
    df = check_archive(root)
    caps = [json.loads(c) for c in df.sort("outcome_detail")["capture_json"]]
    assert {c["git"] for c in caps} == {"dir", "file"}
    arts = _arts(root)
    rows = {r["path"]: r for r in arts.iter_rows(named=True)}
    assert rows["x"]["kind"] == "symlink" and rows["docs/adr/0099-x.md"]["link_target"] == str(secret)
    assert rows["fifo"]["flags"] == ["fifo"] and rows["huge.bin"]["flags"] == ["hash_cap"]
    assert rows["docs/adr/0098-bad\\xff\\xfe.md"]["flags"] == ["name_escaped"]
    attacked = next(c for c in caps if c["git"] == "dir")
    assert {"max_depth", "max_file_hash", "max_run_hash"} <= set(attacked["caps_hit"]) and attacked[
        "errors"
    ] == 0
    sparse = arts.filter(pl.col("path").str.starts_with("sparse/f"))
    assert sparse.height == 500 and sparse["content"].null_count() == 500
    assert rows["new.txt"]["change"] == "added"
    _assert_no_secret(root, [SECRET, ENV_SECRET])
    _score(root)
