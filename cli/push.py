"""`evalb archive push` and `evalb archive pull`: a local archive to and from S3 object storage.

cli/main.py registers them in the `evalb archive` sub-app (cli/archive.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from evalb.errors import UsageError


def push(
    local: Annotated[Path, typer.Argument(help="The local archive directory to upload.")],
    dest: Annotated[str, typer.Argument(help="Where to: s3://bucket/prefix.")],
    jobs: Annotated[int, typer.Option("--jobs", help="Uploads in flight at once.")] = 8,
) -> None:
    """Upload the committed runs (then judgements and scores) of LOCAL to s3://bucket/prefix.

    Objects are immutable and the runs file of a run goes last, as on disk: a push killed at any
    point leaves no half-visible run, and a rerun uploads only what is missing. Many workers may
    push into one prefix at once. Credentials: the standard AWS variables; endpoint of an
    S3-compatible store: EVALB_S3_ENDPOINT (or AWS_ENDPOINT_URL).
    """
    from evalb import objectstore

    if not objectstore.is_s3(dest):
        raise UsageError(
            f"{dest} is not an s3:// address", hint="write the destination as s3://bucket/prefix"
        )
    if objectstore.is_s3(local):
        raise UsageError(f"{local} is remote; push takes a local archive", hint="evalb archive pull it first")
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    res = objectstore.push(local, dest, jobs=jobs)
    typer.echo(res.line())


def pull(
    src: Annotated[str, typer.Argument(help="The archive to download: s3://bucket/prefix.")],
    local: Annotated[Path, typer.Argument(help="A local folder: new, empty, or a pull of the same archive.")],
    jobs: Annotated[int, typer.Option("--jobs", help="Downloads in flight at once.")] = 8,
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="Nothing there yet (no archive.json) is not an error.")
    ] = False,
) -> None:
    """Download the committed runs of s3://bucket/prefix into LOCAL (only what LOCAL lacks).

    LOCAL is then an ordinary archive: record into it to resume a shard, or merge and score it.
    """
    from evalb import objectstore
    from evalb.archive import Archive

    if not objectstore.is_s3(src):
        raise UsageError(f"{src} is not an s3:// address", hint="write the source as s3://bucket/prefix")
    if jobs < 1:
        raise UsageError("--jobs must be at least 1")
    from evalb.errors import NotAnArchiveError

    Archive(local).refuse_foreign()
    try:
        res = objectstore.mirror(src, local, jobs=jobs)
    except NotAnArchiveError:
        if not if_exists:
            raise
        typer.echo(f"nothing to pull: {objectstore.S3Url.parse(src)} holds no archive yet")
        return
    typer.echo(
        f"pulled {res.fetched} object(s) from {objectstore.S3Url.parse(src)} into {local} "
        f"({res.cached} already there)"
    )
