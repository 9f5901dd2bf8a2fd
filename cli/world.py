"""`evalb sandbox`, `evalb build-graph`, `evalb manifest [diff FILE | show RUN_ID]`: thin commands over the world library."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from cli.app import new_app
from evalb import paths
from evalb.errors import ArchiveError, UsageError

app = new_app("The eval's world: sandboxes, the fixture's code graph, the integrity manifest.")
manifest_app = typer.Typer(
    help="Print the content hashes of the frozen parts as JSON (`manifest diff FILE` compares, "
    "`manifest show RUN_ID` prints the one a run was recorded with).",
    add_completion=False,
    pretty_exceptions_enable=False,
    invoke_without_command=True,
)
PluginDirOpt = Annotated[
    Path | None, typer.Option("--plugin-dir", help="Plugin to hash (default: the reference os-adr).")
]
app.add_typer(manifest_app, name="manifest")


def _jsonable(obj: object) -> dict:
    data = asdict(obj)  # type: ignore[call-overload]
    data.pop("initial_tree", None)  # the recorder's own record of the sandbox, not for printing
    return {k: str(v) if isinstance(v, Path) else v for k, v in data.items()}


@app.command("sandbox")
def sandbox_cmd(
    variant: Annotated[str, typer.Argument(help="Scenario variant, e.g. R2 or R4-nograph.")],
    dest: Annotated[Path, typer.Argument(help="Directory to create (must not exist or be empty).")],
    plugin_dir: Annotated[
        Path | None, typer.Option("--plugin-dir", help="Plugin under test (default: the reference os-adr).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the sandbox info as JSON.")] = False,
) -> None:
    """Build a fresh git-initialised sandbox of the fixture for one scenario variant."""
    from evalb import sandbox

    info = sandbox.build_sandbox(variant, dest, plugin_dir=plugin_dir)
    if as_json:
        typer.echo(json.dumps(_jsonable(info), indent=2))
    else:
        typer.echo(
            f"sandbox {info.variant} at {info.path} (graph: {'yes' if info.graph else 'no'}, "
            f"commit {info.head_commit[:12]}, {info.seconds:.3f} s)"
        )


@app.command("build-graph")
def build_graph_cmd(
    project: Annotated[Path, typer.Option("--project", help="Project to graph.")] = paths.FIXTURE_PROJECT,
) -> None:
    """Rebuild the fixture's graphify-out/ from scratch and check the R4 one-hop invariant."""
    from evalb import graph

    info = graph.build_graph(project)
    typer.echo(
        f"graph {info.graph_json}: {info.nodes} nodes, {info.links} links; "
        f"{graph.R4_CHANGED} is {info.r4_hops} hop from {graph.R4_GOVERNED} (ok); {info.seconds:.1f} s"
    )


def _plugin_dir(plugin_dir: Path | None) -> Path | None:
    if plugin_dir is not None and not plugin_dir.is_dir():
        raise UsageError(
            f"--plugin-dir {plugin_dir} is not a directory", hint="pass the plugin's root directory"
        )
    return plugin_dir


@manifest_app.callback()
def manifest_cmd(ctx: typer.Context, plugin_dir: PluginDirOpt = None) -> None:
    """Print the frozen-part hashes as JSON."""
    from evalb import manifest

    ctx.obj = _plugin_dir(plugin_dir)
    if ctx.invoked_subcommand is None:
        typer.echo(json.dumps(manifest.frozen_manifest(plugin_dir=plugin_dir), indent=2, sort_keys=True))


@manifest_app.command("diff")
def manifest_diff_cmd(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="A saved manifest (JSON), e.g. from `manifest show`.")],
    plugin_dir: PluginDirOpt = None,
) -> None:
    """Say which frozen parts changed since FILE; exit 1 if any did."""
    from evalb import manifest

    chosen = _plugin_dir(plugin_dir) or ctx.obj
    old = manifest.load_manifest(file)
    changed = manifest.diff_manifests(old, manifest.frozen_manifest(plugin_dir=chosen))
    if not changed:
        typer.echo("unchanged: no frozen part differs from the saved manifest")
        return
    for part in changed:
        typer.echo(f"changed: {part}")
    raise typer.Exit(1)


@manifest_app.command("show")
def manifest_show_cmd(
    run_id: Annotated[str, typer.Argument(help="A run id, or a unique prefix of one (8+ characters).")],
    archive: Annotated[Path, typer.Option("--archive", help="Archive directory.")] = paths.DEFAULT_ARCHIVE,
) -> None:
    """Print the manifest RUN_ID was recorded with (JSON), to save and `manifest diff` against."""
    typer.echo(json.dumps(stored_manifest(archive, run_id), indent=2, sort_keys=True))


def stored_manifest(archive: Path, run_id: str) -> dict[str, str]:
    """The frozen-part manifest stored with one run (a unique id prefix is enough)."""
    from evalb.archive import Archive, read_table

    if not Archive(archive).exists():
        raise ArchiveError(f"{archive} is not an evalb archive (no archive.json)", hint="pass --archive DIR")
    if len(run_id) < 8:
        raise UsageError(f"run id {run_id!r} is too short", hint="give at least 8 characters of it")
    runs = read_table(archive, "runs", columns=["run_id", "manifest_json"])
    hits = [r for r in runs.iter_rows(named=True) if r["run_id"].startswith(run_id)]
    if len(hits) != 1:
        what = "no run" if not hits else f"{len(hits)} runs"
        raise UsageError(
            f"{what} in {archive} with id {run_id!r}", hint="see the run ids with evalb-score --archive"
        )
    if not hits[0]["manifest_json"]:
        raise UsageError(f"run {hits[0]['run_id']} has no stored manifest (imported without one)")
    data = json.loads(hits[0]["manifest_json"])
    return data.get("manifest", data) if isinstance(data, dict) else data
