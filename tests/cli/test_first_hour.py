"""A new user's first-hour mistakes at the command line (issue 12, items 5, 6, 8): one line, the
documented exit code, and nothing recorded or changed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app as evalb_app
from evalb import manifest, paths
from evalb.archive import read_table
from tests.cli.helpers import ROOT, call

GOLDEN = ROOT / "tests" / "runner" / "golden" / "plugin-hook-bash.jsonl"


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def archive(tmp_path: Path) -> Path:
    """An archive holding one imported run."""
    a = tmp_path / "archive"
    res = call("evalb-record", "import", GOLDEN, "--scenario", "R1", "--model", "haiku", "--archive", a)
    assert res.code == 0, res.err
    return a


REFUSED_RUNS = [
    (["R1", "scripted:judge"], "error: scripted:judge is the judge's model, not a policy to record"),
    (["R1", "scripted:oracle", "--timeout", "0"], "error: --timeout 0 must be more than 0 seconds"),
    (["R1", "scripted:oracle", "--timeout", "-5"], "error: --timeout -5 must be more than 0 seconds"),
    (["R1", "scripted:oracle", "--max-api-retries", "-1"], "error: --max-api-retries -1 must be 0 or more"),
    (["R1", "hai\tku"], "error: model name 'hai\\tku' is empty or holds a control character"),
    (
        ["R1", "haiku\nR1\thaiku"],
        "error: model name 'haiku\\nR1\\thaiku' is empty or holds a control character",
    ),
    (["R1", "scripted:oracle\x1b[2J"], "error: model name 'scripted:oracle\\x1b[2J' is empty"),
    (["R1", "haiku,"], "error: model name '' is empty"),
    (["R1", "scripted:oracle", "--results", "/"], "error: --results / is a directory"),
    (
        ["R1", "scripted:oracle", "--workdir", "/nonexistent/w"],
        "error: --workdir /nonexistent/w is not a directory",
    ),
]


@pytest.mark.parametrize(("args", "start"), REFUSED_RUNS, ids=[" ".join(a) for a, _ in REFUSED_RUNS])
def test_run_refuses_before_touching_the_archive(archive: Path, args: list[str], start: str) -> None:
    before = snapshot(archive)
    res = call("evalb-record", "run", *args, "--archive", archive)
    assert res.code == 2
    assert len(res.lines) == 1 and res.lines[0].startswith(start), res.err
    assert snapshot(archive) == before


def test_a_refused_run_creates_no_archive(tmp_path: Path) -> None:
    res = call("evalb-record", "run", "R1", "scripted:judge", "--archive", tmp_path / "new")
    assert res.code == 2 and not (tmp_path / "new").exists()


GRID_FILES = [
    ("model: [haiku]\n", "unknown key 'model', did you mean 'models'?"),
    ("models: haiku\n", "'models' must be a list, got str"),
    ("scenarios: R1\nmodels: [haiku]\n", "'scenarios' must be a list, got str"),
    ("models: [haiku]\nreps: many\n", "'reps': "),
    ("models: [haiku]\nrepz: 2\n", "unknown key 'repz', did you mean 'reps'?"),
    ("scenarios: [R1]\n", "the key 'models' is missing"),
    ("models: [haiku\nreps: 2\n", "is not valid YAML at line 2, column 5"),
    ("- haiku\n", "is not a mapping"),
    ("models: ['hai\tku']\n", "model name 'hai\\tku' is empty or holds a control character"),
    ("models: [scripted:judge]\n", "scripted:judge is the judge's model"),
]


@pytest.mark.parametrize(("text", "says"), GRID_FILES, ids=[t for t, _ in GRID_FILES])
def test_grid_file_mistakes_name_the_field(tmp_path: Path, text: str, says: str) -> None:
    f = tmp_path / "grid.yaml"
    f.write_text(text)
    res = call("evalb-record", "grid", f, "--archive", tmp_path / "a")
    assert res.code == 2
    assert len(res.lines) == 1 and res.lines[0].startswith("error: "), res.err
    assert says in res.lines[0]
    if "models" not in says and "YAML" not in says and "judge" not in says and "control" not in says:
        assert "write e.g. scenarios: [R1, R2], models: [haiku], reps: 3" in res.lines[0]
    assert not (tmp_path / "a").exists()


def test_grid_has_the_options_run_has(tmp_path: Path) -> None:
    res = CliRunner().invoke(evalb_app_record(), ["grid", "--help"], terminal_width=200)
    for option in ("--reps", "--workdir", "--keep-sandboxes", "--max-api-retries", "--timeout"):
        assert option in res.output, option
    f = tmp_path / "grid.yaml"
    f.write_text("scenarios: [R1]\nmodels: [scripted:oracle]\nreps: 2\n")
    for args, start in (
        (["--reps", "0"], "error: --reps must be at least 1, got 0"),
        (["--workdir", tmp_path / "missing"], f"error: --workdir {tmp_path / 'missing'} is not a directory"),
        (["--max-api-retries", "-1"], "error: --max-api-retries -1 must be 0 or more"),
        (["--timeout", "0"], "error: --timeout 0 must be more than 0 seconds"),
    ):
        res2 = call("evalb-record", "grid", f, "--archive", tmp_path / "a", *args)
        assert res2.code == 2 and len(res2.lines) == 1 and res2.lines[0].startswith(start), res2.err
    assert not (tmp_path / "a").exists()


def evalb_app_record():
    from cli.record import app

    return app


def test_report_help_shows_its_options() -> None:
    res = CliRunner().invoke(evalb_app, ["report", "--help"], prog_name="evalb", terminal_width=200)
    assert res.exit_code == 0
    assert "Usage: evalb report [OPTIONS]" in res.output and "COMMAND [ARGS]" not in res.output
    for option in ("--archive", "--out", "--title"):
        assert option in res.output


def test_manifest_plugin_dir_missing_is_exit_2(tmp_path: Path) -> None:
    for args in (["manifest"], ["manifest", "diff", tmp_path / "m.json"]):
        res = call("evalb", *args, "--plugin-dir", tmp_path / "missing")
        assert res.code == 2
        assert res.lines == [
            f"error: --plugin-dir {tmp_path / 'missing'} is not a directory (pass the plugin's root directory)"
        ]


def test_manifest_diff_plugin_dir_in_either_order(tmp_path: Path) -> None:
    """`manifest diff FILE --plugin-dir D` and `manifest --plugin-dir D diff FILE` say the same."""
    plugin = tmp_path / "plugin"
    shutil.copytree(paths.REFERENCE_PLUGIN, plugin)
    (plugin / "EXTRA.md").write_text("changed\n")
    saved = tmp_path / "m.json"
    saved.write_text(json.dumps(manifest.frozen_manifest()))
    runner = CliRunner()
    after = runner.invoke(evalb_app, ["manifest", "diff", str(saved), "--plugin-dir", str(plugin)])
    before = runner.invoke(evalb_app, ["manifest", "--plugin-dir", str(plugin), "diff", str(saved)])
    default = runner.invoke(evalb_app, ["manifest", "diff", str(saved)])
    assert after.exit_code == before.exit_code == 1
    assert after.output == before.output == "changed: plugin\n"
    assert default.exit_code == 0 and default.output.startswith("unchanged")


def test_manifest_show_prints_a_runs_stored_manifest(archive: Path, tmp_path: Path) -> None:
    runs = read_table(archive, "runs", columns=["run_id", "manifest_json"])
    run_id = runs["run_id"][0]
    res = CliRunner().invoke(evalb_app, ["manifest", "show", run_id[:8], "--archive", str(archive)])
    assert res.exit_code == 0, res.output
    shown = json.loads(res.output)
    assert shown == json.loads(runs["manifest_json"][0]) and "plugin" in shown and "fixture" in shown
    saved = tmp_path / "m.json"
    saved.write_text(res.output)
    diff = CliRunner().invoke(evalb_app, ["manifest", "diff", str(saved)])
    assert diff.exit_code == 0 and diff.output.startswith("unchanged"), diff.output
    for prefix, says in (("zzzzzzzz", "error: no run in"), ("abc", "error: run id 'abc' is too short")):
        bad = call("evalb", "manifest", "show", prefix, "--archive", archive)
        assert bad.code == 2 and len(bad.lines) == 1 and bad.lines[0].startswith(says), bad.err


def test_report_out_mistakes_are_one_line(archive: Path, tmp_path: Path) -> None:
    for out, says in (
        (tmp_path, f"error: --out {tmp_path} is a directory"),
        (tmp_path / "no" / "r.html", f"error: --out {tmp_path / 'no' / 'r.html'}: the directory"),
    ):
        res = call("evalb", "report", "--archive", archive, "--out", out)
        assert res.code == 2 and len(res.lines) == 1 and res.lines[0].startswith(says), res.err


@pytest.mark.client
def test_grid_keep_sandboxes_says_where(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`grid --reps 1 --workdir W --keep-sandboxes` records one rep, keeps its sandbox in W, and says so."""
    f = tmp_path / "grid.yaml"
    f.write_text("scenarios: [R1]\nmodels: [scripted:oracle]\nreps: 3\n")
    work = tmp_path / "work"
    work.mkdir()
    res = call(
        "evalb-record",
        "grid",
        f,
        "--reps",
        "1",
        "--workdir",
        work,
        "--keep-sandboxes",
        "--archive",
        tmp_path / "a",
    )
    assert res.code == 0, res.err
    assert read_table(tmp_path / "a", "runs", columns=["run_id"]).height == 1  # --reps 1 beat the file's 3
    kept = sorted(work.glob("evalb-R1-*"))
    assert len(kept) == 1 and kept[0].is_dir()
    said = capsys.readouterr().err  # the recorder's summary goes to stderr, beside the progress
    assert f"kept each rep's sandbox and HOME in {work.resolve()}/evalb-<variant>-*" in said


def test_recover_and_migrate_never_create_an_archive(tmp_path: Path) -> None:
    typo = tmp_path / "archvie"
    for cmd in ("recover", "migrate"):
        res = call("evalb-record", cmd, "--archive", typo)
        assert res.code == 2
        assert len(res.lines) == 1 and res.lines[0].startswith(f"error: {typo} is not an evalb archive (")
    assert not typo.exists()


def test_recording_into_a_folder_that_is_not_an_archive_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"\xff\xd8")
    for args in (
        ["run", "R1", "scripted:oracle"],
        ["import", GOLDEN, "--scenario", "R1", "--model", "haiku"],
    ):
        res = call("evalb-record", *args, "--archive", folder)
        assert res.code == 2
        assert len(res.lines) == 1
        assert res.lines[0].startswith(f"error: --archive {folder} exists and is not an evalb archive"), (
            res.err
        )
    assert snapshot(folder) == {"cat.jpg": b"\xff\xd8"}


def test_score_with_an_unknown_model_says_so(archive: Path) -> None:
    res = call("evalb-score", "--archive", archive, "--model", "NOSUCH")
    assert res.code == 2
    assert len(res.lines) == 1 and res.lines[0].startswith(f"error: no run in {archive} with model 'NOSUCH'")
