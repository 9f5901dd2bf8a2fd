"""The reference plugin's CLIs: create, list, search, supersede; the output contract other code parses."""

from __future__ import annotations

import re
from pathlib import Path

from tests.world.conftest import BIN, graph_json_for, run_cli, write_graph

LINE = re.compile(
    r"^ADR-(\d{4})\t(Accepted|Superseded)\t([^\t]+)\tdocs/adr/(\d{4})-[a-z0-9-]+\.md(?:\t(.+))?$"
)


def lines(out: str) -> list[re.Match]:
    ms = [LINE.match(line) for line in out.splitlines()]
    assert all(ms), f"line not in the contract format: {out!r}"
    return ms  # type: ignore[return-value]


def new(project: Path, title: str, *args: str) -> str:
    r = run_cli("adr-new", title, *args, cwd=project)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_bins_are_executable_stdlib_python(project: Path) -> None:
    for name in ("adr-init", "adr-new", "adr-list", "adr-search"):
        p = BIN / name
        assert p.stat().st_mode & 0o111, f"{name} not executable"
        assert p.read_text().startswith("#!/usr/bin/env python3\n")
    lib = (BIN.parent / "lib" / "os_adr.py").read_text()
    imported = set(re.findall(r"^(?:from|import) ([a-z_]+)", lib, re.M))
    assert imported <= {
        "__future__",
        "argparse",
        "json",
        "os",
        "re",
        "sys",
        "collections",
        "datetime",
        "pathlib",
    }


def test_init_creates_dir_and_index_once(project: Path) -> None:
    r = run_cli("adr-init", cwd=project)
    assert r.returncode == 0 and r.stdout.strip() == "Initialised docs/adr/"
    assert (project / "docs/adr/README.md").is_file()
    again = run_cli("adr-init", cwd=project)
    assert again.returncode == 0 and "Already initialised" in again.stdout


def test_new_writes_format_index_and_contract_line(project: Path) -> None:
    run_cli("adr-init", cwd=project)
    out = new(
        project,
        "Use Postgres for subscriptions",
        "--governs",
        "lib/a.rb",
        "./lib/b.rb",
        "--context",
        "Why.",
        "--decision",
        "We use it.",
        "--consequences",
        "Ops.",
        "--date",
        "2025-03-04T10:00:00Z",
    )
    assert out == "Created docs/adr/0001-use-postgres-for-subscriptions.md (ADR-0001)\n"
    text = (project / "docs/adr/0001-use-postgres-for-subscriptions.md").read_text()
    front, body = text.split("\n---\n", 1)
    assert front.splitlines()[1:] == [
        'id: "0001"',
        'title: "Use Postgres for subscriptions"',
        "status: Accepted",
        "date: 2025-03-04T10:00:00Z",
        "supersedes: []",
        "superseded_by: null",
        'governs: ["lib/a.rb", "lib/b.rb"]',
    ]
    assert "# ADR-0001: Use Postgres for subscriptions" in body
    assert body.index("## Context") < body.index("## Decision") < body.index("## Consequences")
    assert "We use it." in body
    assert (
        "[ADR-0001](0001-use-postgres-for-subscriptions.md)" in (project / "docs/adr/README.md").read_text()
    )
    second = new(project, "Second one")
    assert second.startswith("Created docs/adr/0002-second-one.md (ADR-0002)")


def test_new_without_date_uses_utc_now(project: Path) -> None:
    new(project, "Dated now")
    text = next((project / "docs/adr").glob("0001-*.md")).read_text()
    assert re.search(r"^date: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", text, re.M)


def test_supersede_marks_old_record(project: Path) -> None:
    new(project, "Fixed retry interval", "--governs", "lib/d.rb", "--date", "2024-01-01T00:00:00Z")
    out = new(project, "Exponential backoff", "--supersedes", "ADR-0001", "--date", "2024-02-01T00:00:00Z")
    assert out.splitlines()[0] == "Created docs/adr/0002-exponential-backoff.md (ADR-0002)"
    old = (project / "docs/adr/0001-fixed-retry-interval.md").read_text()
    assert "status: Superseded" in old and 'superseded_by: "0002"' in old
    assert 'supersedes: ["0001"]' in (project / "docs/adr/0002-exponential-backoff.md").read_text()
    ms = lines(run_cli("adr-list", cwd=project).stdout)
    assert [(m[1], m[2], m[5]) for m in ms] == [
        ("0001", "Superseded", "superseded by ADR-0002"),
        ("0002", "Accepted", None),
    ]
    assert "Superseded by ADR-0002" in (project / "docs/adr/README.md").read_text()


def test_user_mistakes_exit_2_with_one_line(project: Path) -> None:
    for args in (["T", "--date", "2025-03-04 10:00"], ["T", "--supersedes", "0042"], ["   "]):
        r = run_cli("adr-new", *args, cwd=project)
        assert r.returncode == 2, args
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not list(project.glob("docs/adr/0*.md"))


def test_empty_results_say_no_adrs_found(project: Path) -> None:
    r = run_cli("adr-list", cwd=project)
    assert r.returncode == 0 and r.stdout.startswith("No ADRs found") and len(r.stdout.splitlines()) == 1
    new(project, "Something")
    for args in (["--topic", "zebra"], ["--file", "lib/none.rb"]):
        r = run_cli("adr-search", *args, cwd=project)
        assert r.returncode == 0 and r.stdout.startswith("No ADRs found") and len(r.stdout.splitlines()) == 1


def test_search_topic_case_insensitive_accepted_first(project: Path) -> None:
    new(project, "Retry at a fixed interval", "--decision", "Every 30 seconds.")
    new(project, "Log format", "--decision", "JSON lines.")
    new(project, "Exponential backoff for RETRIES", "--supersedes", "0001")
    ms = lines(run_cli("adr-search", "--topic", "retry", cwd=project).stdout)
    assert [(m[1], m[2]) for m in ms] == [("0003", "Accepted"), ("0001", "Superseded")]
    assert ms[1][5] == "superseded by ADR-0003"
    assert [m[1] for m in lines(run_cli("adr-search", "--topic", "JSON", cwd=project).stdout)] == ["0002"]


def test_search_file_direct_and_root_option(project: Path, tmp_path: Path) -> None:
    new(project, "Sign requests", "--governs", "lib/relay/signer.rb")
    new(project, "Whole dir", "--governs", "lib/relay/")
    r = run_cli("adr-search", "--root", str(project), "--file", "lib/relay/signer.rb", cwd=tmp_path)
    assert [m[1] for m in lines(r.stdout)] == ["0001", "0002"]
    assert all(m[5] is None for m in lines(r.stdout))
    absolute = run_cli("adr-search", "--file", str(project / "lib/relay/signer.rb"), cwd=project)
    assert [m[1] for m in lines(absolute.stdout)] == ["0001", "0002"]
    sub = project / "lib"
    sub.mkdir()
    assert "ADR-0001" in run_cli("adr-list", cwd=sub).stdout  # finds docs/adr/ in a parent


def test_search_file_follows_graph_one_hop_only(project: Path) -> None:
    new(project, "Retry policy", "--governs", "lib/delivery.rb")
    new(project, "Far away", "--governs", "lib/far.rb")
    without = run_cli("adr-search", "--file", "lib/reports.rb", cwd=project)
    assert without.stdout.startswith("No ADRs found")
    write_graph(
        project, graph_json_for([("lib/reports.rb", "lib/delivery.rb"), ("lib/delivery.rb", "lib/far.rb")])
    )
    ms = lines(run_cli("adr-search", "--file", "lib/reports.rb", cwd=project).stdout)
    assert [(m[1], m[5]) for m in ms] == [("0001", "via graph: lib/reports.rb -> lib/delivery.rb")]


def test_fixture_r4_search_needs_the_graph(tmp_path: Path, fixture_graph: Path) -> None:
    from evalb.sandbox import build_sandbox

    with_graph = build_sandbox("R4", tmp_path / "r4")
    ms = lines(run_cli("adr-search", "--file", "lib/relay/reports.rb", cwd=with_graph.path).stdout)
    hits = {m[1]: m[5] for m in ms}
    assert hits["0003"] == "via graph: lib/relay/reports.rb -> lib/relay/delivery.rb"
    assert ms[0][2] == "Accepted"
    no_graph = build_sandbox("R4-nograph", tmp_path / "r4ng")
    r = run_cli("adr-search", "--file", "lib/relay/reports.rb", cwd=no_graph.path)
    assert r.returncode == 0 and "ADR-0003" not in r.stdout
    direct = lines(run_cli("adr-search", "--file", "lib/relay/delivery.rb", cwd=no_graph.path).stdout)
    assert [m[1] for m in direct] == ["0003", "0001"]
