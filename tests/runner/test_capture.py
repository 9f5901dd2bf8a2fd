"""Capture of a sandbox's end state (runner/capture.py) on real sandboxes, without the client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from evalb import sandbox
from runner import capture
from runner.capture import Limits, collect, escape_name, unescape_name

SECRET = "s3cr3t-canary-4711"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> sandbox.SandboxInfo:
    return sandbox.build_sandbox("W1", tmp_path_factory.mktemp("sb") / "sb")


@pytest.fixture
def box(tmp_path: Path) -> tuple[Path, sandbox.Tree]:
    info = sandbox.build_sandbox("R2", tmp_path / "sb")
    return info.path, info.initial_tree


def _rows(c: capture.Capture) -> dict[str, capture.ArtifactRecord]:
    return {r.path: r for r in c.rows}


def _rm(path: Path) -> None:
    subprocess.run(["rm", "-rf", str(path)], check=False)  # deep trees: shutil.rmtree recurses


@pytest.mark.parametrize("variant", ["R1", "R4", "R4-nograph", "W1"])
def test_untouched_sandbox_has_no_rows_and_the_tree_is_recomputable(tmp_path: Path, variant: str) -> None:
    """The builder's initial tree is what the sandbox holds, and the importer's recomputation from
    the fixture alone gives the same tree."""
    info = sandbox.build_sandbox(variant, tmp_path / "sb")
    c = collect("r", info.path, info.initial_tree)
    assert c.rows == [] and c.summary["errors"] == 0 and c.summary["git"] == "dir"
    assert c.summary["listed"] == len(info.initial_tree) + 1  # + .git
    assert sandbox.initial_tree(variant) == info.initial_tree
    assert ("graphify-out/graph.json" in info.initial_tree) == (variant == "R4")


def test_changes_are_found_against_the_initial_tree(box: tuple[Path, sandbox.Tree]) -> None:
    sb, tree = box
    readme = sb / "README.md"
    old = readme.read_bytes()
    readme.write_bytes(bytes([old[0] ^ 1]) + old[1:])  # same size, other bytes
    os.chmod(sb / "Rakefile", 0o755)
    (sb / "config.ru").unlink()
    (sb / "docs" / "adr" / "0007-new.md").write_text("# new\n")
    (sb / "lib").rename(sb / "lib2")
    rows = _rows(collect("r", sb, tree))
    assert (rows["README.md"].change, rows["README.md"].content) == ("modified", readme.read_text())
    assert (rows["Rakefile"].change, rows["Rakefile"].mode) == ("modified", 0o755)
    assert (rows["config.ru"].change, rows["config.ru"].kind, rows["config.ru"].mode) == (
        "deleted",
        "file",
        None,
    )
    assert rows["docs/adr/0007-new.md"].change == "added"
    assert rows["docs/adr/0007-new.md"].sha256 is not None
    assert rows["lib"].change == "deleted" and rows["lib2"].change == "added"
    assert all(r.change == "deleted" for p, r in rows.items() if p.startswith("lib/"))
    assert not any(p.startswith("docs/adr/0001") for p in rows)  # unchanged: no row


def test_committed_adr_is_added_and_git_is_never_run(box: tuple[Path, sandbox.Tree], tmp_path: Path) -> None:
    """A committed new ADR is still 'added'; a hostile git config is never acted on."""
    sb, tree = box
    marker = tmp_path / "fsmonitor-ran"
    (sb / "docs" / "adr" / "0007-x.md").write_text("# x\n")
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@b", "-C", str(sb)]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    subprocess.run([*git, "config", "core.fsmonitor", f"touch {marker}"], check=True)
    rows = _rows(collect("r", sb, tree))
    assert rows["docs/adr/0007-x.md"].change == "added"
    assert not marker.exists()
    assert not any(p.startswith(".git") for p in rows)


def test_git_file_is_noted_not_followed(box: tuple[Path, sandbox.Tree], tmp_path: Path) -> None:
    sb, tree = box
    _rm(sb / ".git")
    (sb / ".git").write_text(f"gitdir: {tmp_path}/other/.git\n")
    c = collect("r", sb, tree)
    assert c.summary["git"] == "file" and c.rows == []


def test_links_are_recorded_never_followed(box: tuple[Path, sandbox.Tree], tmp_path: Path) -> None:
    sb, tree = box
    secret = tmp_path / "host-secret"
    secret.write_text(SECRET)
    os.symlink(secret, sb / "docs" / "adr" / "0099-x.md")
    os.symlink("/proc/self/environ", sb / "env")
    os.symlink(tmp_path, sb / "hostdir")  # a link to a directory is not entered
    (sb / "docs" / "adr" / "0001-retry-failed-deliveries-at-a-fixed-30-second-interval.md").unlink()
    os.symlink(secret, sb / "docs" / "adr" / "0001-retry-failed-deliveries-at-a-fixed-30-second-interval.md")
    os.environ["EVALB_CAPTURE_CANARY"] = SECRET
    try:
        c = collect("r", sb, tree)
    finally:
        del os.environ["EVALB_CAPTURE_CANARY"]
    rows = _rows(c)
    assert rows["docs/adr/0099-x.md"].kind == "symlink"
    assert rows["docs/adr/0099-x.md"].link_target == str(secret)
    assert rows["env"].link_target == "/proc/self/environ" and rows["hostdir"].kind == "symlink"
    assert rows["docs/adr/0001-retry-failed-deliveries-at-a-fixed-30-second-interval.md"].change == "modified"
    assert SECRET not in json.dumps([r.model_dump() for r in c.rows]) + c.summary_json()
    assert c.summary["symlinks"] == 4 and not any(p.startswith("hostdir/") for p in rows)


def test_special_files_are_flagged_never_opened(box: tuple[Path, sandbox.Tree]) -> None:
    """A FIFO nobody writes to would block an open() for ever: capture must return at once."""
    sb, tree = box
    os.mkfifo(sb / "docs" / "adr" / "0098-fifo.md")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(sb / "sock"))
    out: list[capture.Capture] = []
    t = threading.Thread(target=lambda: out.append(collect("r", sb, tree)), daemon=True)
    t.start()
    t.join(20)
    s.close()
    assert out, "capture blocked on a FIFO"
    rows = _rows(out[0])
    assert (rows["docs/adr/0098-fifo.md"].kind, rows["docs/adr/0098-fifo.md"].flags) == ("special", ["fifo"])
    assert rows["sock"].flags == ["socket"] and out[0].summary["special"] == 2


def test_names_that_are_not_utf8_are_escaped_losslessly(box: tuple[Path, sandbox.Tree]) -> None:
    sb, tree = box
    raw = b"bad-\xff\xfe-\\x41-\xc3\xa9.md"
    with open(os.path.join(os.fsencode(sb), b"docs", b"adr", raw), "wb") as fh:
        fh.write(b"x")
    os.symlink(b"/tmp/\xff", os.path.join(os.fsencode(sb), b"lnk"))
    rows = _rows(collect("r", sb, tree))
    name = next(p for p in rows if p.startswith("docs/adr/bad-"))
    assert "name_escaped" in rows[name].flags
    assert unescape_name(name) == b"docs/adr/" + raw
    assert (
        rows["lnk"].flags == ["target_escaped"]
        and unescape_name(rows["lnk"].link_target or "") == b"/tmp/\xff"
    )
    assert escape_name("plain\\name") == ("plain\\name", False)


def _deep(root: Path, levels: int, name: str = "d") -> None:
    """`levels` nested directories under root (beyond PATH_MAX: made by fd)."""
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir(name, dir_fd=fd)
            nfd = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = nfd
        with open(os.open("leaf.md", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as fh:
            fh.write("deep")
    finally:
        os.close(fd)


def test_deep_trees_stop_at_the_depth_cap(box: tuple[Path, sandbox.Tree]) -> None:
    sb, tree = box
    try:
        _deep(sb, 1200)
        _deep(sb / "docs" / "adr", 200, "sub")
        c = collect("r", sb, tree)
        assert c.summary["caps_hit"] == ["max_depth"] and c.summary["cap_counts"]["max_depth"] == 2
        rows = _rows(c)
        capped = [r for r in rows.values() if "depth_cap" in r.flags]
        assert len(capped) == 2 and all(r.path.count("/") == 64 for r in capped)
        assert len(rows) == 65 + 63 and c.summary["errors"] == 0  # d x 65; sub x 63
    finally:
        _rm(sb / "d")
        _rm(sb / "docs" / "adr" / "sub")


def test_sizes_are_capped_and_sparse_files_cost_no_memory(box: tuple[Path, sandbox.Tree]) -> None:
    sb, tree = box
    with open(sb / "huge", "wb") as fh:
        fh.truncate(2 << 30)
    for i in range(20):
        with open(sb / f"sparse-{i}", "wb") as fh:
            fh.truncate(1 << 20)
    (sb / "big.txt").write_text("a" * ((1 << 20) + 1))
    c = collect("r", sb, tree)
    rows = _rows(c)
    assert rows["huge"].sha256 is None and rows["huge"].flags == ["hash_cap"] and rows["huge"].size == 2 << 30
    assert all(
        rows[f"sparse-{i}"].flags == ["binary"] and rows[f"sparse-{i}"].content is None for i in range(20)
    )
    assert rows["big.txt"].content is None and rows["big.txt"].flags == ["content_cap"]
    assert c.summary["content_bytes"] == 0 and c.summary["hashed_bytes"] < 30 << 20
    assert set(c.summary["caps_hit"]) == {"max_file_hash", "max_file_content"}


def test_run_caps_bound_entries_content_and_hashing(box: tuple[Path, sandbox.Tree]) -> None:
    sb, tree = box
    (sb / "many").mkdir()
    for i in range(50):
        (sb / "many" / f"f{i:02}.txt").write_text(f"text {i}\n" * 100)
    lim = Limits(max_new_entries=20, max_run_content=3000, max_run_hash=6000)
    c = collect("r", sb, tree, lim)
    assert c.summary["new_entries"] == 51 and c.summary["cap_counts"]["max_new_entries"] == 31
    fixture = sum(e.size for e in tree.values())  # compared with the initial tree, not charged
    assert len(c.rows) == 20 and 0 < c.summary["content_bytes"] <= 3000
    assert 6000 < c.summary["hashed_bytes"] <= 6000 + fixture + 1
    assert {"max_new_entries", "max_run_content", "max_run_hash"} <= set(c.summary["caps_hit"])
    listed = collect("r", sb, tree, Limits(max_listed=10))
    assert listed.summary["caps_hit"] == ["max_listed"]
    assert {r.change for r in listed.rows} <= {"unseen", "added", "modified"} and listed.rows


def test_hard_links_keep_no_text(box: tuple[Path, sandbox.Tree], tmp_path: Path) -> None:
    sb, tree = box
    outside = sb.parent / "outside-secret"  # same file system, so the link can be made
    outside.write_text(SECRET)
    os.link(outside, sb / "docs" / "adr" / "0097-x.md")
    row = _rows(collect("r", sb, tree))["docs/adr/0097-x.md"]
    assert row.flags == ["hardlink"] and row.content is None and row.sha256 is not None


def test_an_entry_that_fails_is_a_row_not_an_exception(
    box: tuple[Path, sandbox.Tree], monkeypatch: pytest.MonkeyPatch
) -> None:
    sb, tree = box
    (sb / "a.txt").write_text("a")
    (sb / "b.txt").write_text("b")
    real = capture._Walk.read

    def flaky(self, dir_fd, name, st, *, keep):  # type: ignore[no-untyped-def]
        if name == "a.txt":
            raise PermissionError(13, "Permission denied")
        return real(self, dir_fd, name, st, keep=keep)

    monkeypatch.setattr(capture._Walk, "read", flaky)
    c = collect("r", sb, tree)
    rows = _rows(c)
    assert (rows["a.txt"].kind, rows["a.txt"].flags) == ("unknown", ["error:PermissionError"])
    assert rows["b.txt"].content == "b" and c.summary["errors"] == 1
    assert "a.txt" in c.summary["error_samples"][0]


def test_a_missing_sandbox_is_recorded_not_raised(tmp_path: Path, built: sandbox.SandboxInfo) -> None:
    c = collect("r", tmp_path / "nowhere", built.initial_tree)
    assert c.summary["errors"] == 1 and {r.change for r in c.rows} == {"deleted"}
    os.symlink(built.path, tmp_path / "link-to-sandbox")
    c = collect("r", tmp_path / "link-to-sandbox", built.initial_tree)  # the root is not followed either
    assert c.summary["errors"] == 1 and {r.change for r in c.rows} == {"unseen"}


def test_small_files_are_read_first(box: tuple[Path, sandbox.Tree]) -> None:
    """Many big files met first by the walk cannot push a small new ADR past the run's caps."""
    sb, tree = box
    (sb / "aaa").mkdir()
    for i in range(8):
        (sb / "aaa" / f"big{i}").write_text("b" * 5000)
    (sb / "docs" / "adr" / "0007-dedup.md").write_text("# Dedup\n")
    c = collect("r", sb, tree, Limits(max_run_hash=12_000, max_run_content=9_000))
    rows = _rows(c)
    assert rows["docs/adr/0007-dedup.md"].content == "# Dedup\n"
    assert sum(1 for p, r in rows.items() if p.startswith("aaa/big") and r.content) == 1
    assert set(c.summary["caps_hit"]) == {"max_run_hash", "max_run_content"}
