"""Archives on S3-compatible object storage: push a local archive's committed runs, mirror one back.

An archive at `s3://bucket/prefix` has the local layout as object keys (`prefix/archive.json`,
`prefix/runs/<run_id>.parquet`, ...). Objects are immutable: a key is written once and never
changed or deleted, so many pushers can share a prefix and a reader's cache never goes stale.

Push (`push`) uploads a local archive's committed runs in three waves: every artifacts and events
file of a committed run, then the runs files (the commit marker, as on disk), then the judgements
and scores files. A push killed at any moment leaves at worst events without a runs object, which
no reader counts. An object already present with the same bytes (MD5 = single-part ETag) is
skipped, so a rerun uploads only what is missing; one present with other bytes is a conflict,
refused and never overwritten.

Read (`mirror`): readers get a local cache mirror (`EVALB_S3_CACHE`, default
`~/.cache/evalb/s3/<bucket>/<prefix>`), synced incrementally (objects already cached are not
fetched again), then opened read-only like any archive. Listings go judgements and scores first,
runs next, events and artifacts last, so every score and every run listed refers to runs whose
files were uploaded before; writes to the cache go the other way (events, runs, scores), so a
reader of the cache meets the same commit order as on disk. A run pushed while a mirror syncs is
either wholly in it or not at all. Why a mirror rather than reading Parquet over HTTP: an archive
is many small immutable files, which a cache fetches once; DuckDB's httpfs extension would be
downloaded at run time; and every reader in evalb works on it unchanged (docs/scaling.md).

Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
AWS_SESSION_TOKEN, AWS_PROFILE, an instance or pod role); the endpoint of an S3-compatible store
from EVALB_S3_ENDPOINT, else boto3's own AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import fcntl
import hashlib
import json
import os
import re
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalb.errors import ArchiveError, NotAnArchiveError, UsageError

ENDPOINT_ENV = "EVALB_S3_ENDPOINT"
CACHE_ENV = "EVALB_S3_CACHE"
#: Upload/download threads per push or mirror.
DEFAULT_JOBS = 8
#: Listing order of a mirror (commit order reversed) and write order of a push.
PUSH_WAVES: tuple[tuple[str, ...], ...] = (("artifacts", "events"), ("runs",), ("judgements", "scores"))
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_RUN_ID = re.compile(r"^[0-9a-f]{32}$")
#: Files of a compacted batch (evalb/compact.py): live only through the archive's mutable
#: compaction manifest, which immutable objects cannot carry; push refuses them.

if TYPE_CHECKING:
    from evalb.archive import Archive


def is_s3(path: object) -> bool:
    """Whether an --archive value names object storage (`s3://`; typer's Path turns it into `s3:/`)."""
    return str(path).startswith("s3:/")


@dataclass(frozen=True)
class S3Url:
    bucket: str
    prefix: str  # no leading or trailing slash; may be empty

    @classmethod
    def parse(cls, value: object) -> S3Url:
        text = str(value)
        rest = text[len("s3://") :] if text.startswith("s3://") else text[len("s3:/") :]
        bucket, _, prefix = rest.partition("/")
        prefix = "/".join(p for p in prefix.split("/") if p)
        if not _BUCKET.match(bucket) or any(p in (".", "..") for p in prefix.split("/")):
            raise UsageError(
                f"{text} is not a valid S3 archive address", hint="write it as s3://bucket/prefix"
            )
        return cls(bucket, prefix)

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def client() -> Any:
    """A boto3 S3 client from the standard AWS configuration, at EVALB_S3_ENDPOINT when set."""
    import boto3
    from botocore.config import Config

    endpoint = os.environ.get(ENDPOINT_ENV) or None
    # S3-compatible stores: path-style addresses, and checksums only where the API requires them
    # (several stores refuse the trailing checksums boto3 sends by default since 1.36)
    extra: dict[str, Any] = (
        {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
        if endpoint
        else {}
    )
    config = Config(
        retries={"max_attempts": 8, "mode": "standard"},
        s3={"addressing_style": "path"} if endpoint else {},
        max_pool_connections=32,
        **extra,
    )
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return boto3.client("s3", endpoint_url=endpoint, config=config, region_name=region)


def _s3_error(what: str, url: S3Url, e: Exception) -> ArchiveError:
    """One clear error for a failed S3 call (credentials, bucket, endpoint, access)."""
    from botocore import exceptions as bx

    if isinstance(e, bx.NoCredentialsError | bx.PartialCredentialsError):
        return ArchiveError(
            f"cannot {what} {url}: no AWS credentials",
            hint="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
        )
    if isinstance(e, bx.EndpointConnectionError | bx.ConnectionError):
        return ArchiveError(
            f"cannot {what} {url}: the endpoint does not answer ({e})",
            hint=f"check {ENDPOINT_ENV} / AWS_ENDPOINT_URL and the network",
        )
    if isinstance(e, bx.ClientError):
        code = e.response.get("Error", {}).get("Code", "")
        if code == "NoSuchBucket":
            return ArchiveError(f"cannot {what} {url}: no bucket {url.bucket!r}", hint="create it first")
        if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
            return ArchiveError(
                f"cannot {what} {url}: access denied ({code})", hint="check the AWS credentials"
            )
        return ArchiveError(f"cannot {what} {url}: {code or e}")
    if isinstance(e, bx.BotoCoreError):
        return ArchiveError(f"cannot {what} {url}: {e}")
    raise e


def list_objects(s3: Any, url: S3Url, sub: str) -> dict[str, tuple[int, str]]:
    """`rel path -> (size, etag)` of the objects under `prefix/sub/` (one level, .parquet only)."""
    out: dict[str, tuple[int, str]] = {}
    base = url.key(sub) + "/"
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=url.bucket, Prefix=base):
            for obj in page.get("Contents", []):
                name = obj["Key"][len(base) :]
                suffix = ".json" if sub == COMPACTION else ".parquet"
                if "/" in name or not name.endswith(suffix) or name.startswith("."):
                    continue
                out[f"{sub}/{name}"] = (int(obj["Size"]), str(obj["ETag"]).strip('"'))
    except Exception as e:
        raise _s3_error("list", url, e) from e
    return out


def _md5(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- push ---------------------------------------------------------------------------------------
@dataclass
class PushResult:
    url: str
    runs: int = 0  # committed runs in the local archive
    uploaded: list[str] = field(default_factory=list)
    skipped: int = 0  # objects already present with the same bytes

    def line(self) -> str:
        return (
            f"pushed {len(self.uploaded)} object(s) to {self.url} "
            f"({self.runs} committed run(s); {self.skipped} already there)"
        )


def _marker_body(local_marker: dict[str, Any]) -> dict[str, Any]:
    return {
        "format": local_marker["format"],
        "schema_version": local_marker["schema_version"],
        "created_at": dt.datetime.now(dt.UTC).isoformat(),
        "migrations": local_marker.get("migrations", []),
        "created_by": "evalb archive push",
    }


def _check_marker(remote: dict[str, Any], local: dict[str, Any], url: S3Url) -> None:
    if remote.get("format") != local["format"] or remote.get("schema_version") != local["schema_version"]:
        raise ArchiveError(
            f"{url} holds an archive of schema v{remote.get('schema_version')}, the local one is "
            f"v{local['schema_version']}",
            hint="push to another prefix, or migrate both to one schema",
        )


def _ensure_marker(s3: Any, url: S3Url, local: dict[str, Any]) -> None:
    """Create `archive.json` if absent (first pusher wins, If-None-Match), else check it matches."""
    from botocore import exceptions as bx

    key = url.key("archive.json")
    body = (json.dumps(_marker_body(local), indent=2) + "\n").encode()
    try:
        s3.put_object(Bucket=url.bucket, Key=key, Body=body, IfNoneMatch="*")
        return
    except bx.ClientError as e:
        code = e.response.get("Error", {}).get("Code", "")
        if code not in ("PreconditionFailed", "412", "ConditionalRequestConflict"):
            raise _s3_error("write to", url, e) from e
    except Exception as e:
        raise _s3_error("write to", url, e) from e
    _check_marker(read_marker(s3, url), local, url)


def read_marker(s3: Any, url: S3Url) -> dict[str, Any]:
    """The remote `archive.json`; NotAnArchiveError when there is none."""
    from botocore import exceptions as bx

    try:
        raw = s3.get_object(Bucket=url.bucket, Key=url.key("archive.json"))["Body"].read()
    except bx.ClientError as e:
        if e.response.get("Error", {}).get("Code", "") in ("NoSuchKey", "404"):
            raise NotAnArchiveError(
                f"{url} is not an evalb archive (no archive.json)",
                hint="push an archive there first with evalb archive push, or pass the right address",
            ) from e
        raise _s3_error("read", url, e) from e
    except Exception as e:
        raise _s3_error("read", url, e) from e
    try:
        data = json.loads(raw)
    except ValueError as e:
        raise ArchiveError(f"{url}/archive.json is not JSON") from e
    if not isinstance(data, dict) or data.get("format") != "evalb-archive":
        raise ArchiveError(f"{url}/archive.json is not an evalb archive marker")
    return data


#: A compacted archive's compaction folder (evalb/compact.py): the batches' covers lists, then the
#: manifest that publishes them, pushed after every table file, in that order.
COMPACTION = "compaction"
COMPACTION_MANIFEST = "manifest.json"


def compaction_files(root: Path) -> list[list[Path]]:
    """The compaction folder's files to push after the tables: [covers lists], [manifest] (two
    waves: the manifest names batches whose files and covers lists must already be there)."""
    folder = root / COMPACTION
    manifest = folder / COMPACTION_MANIFEST
    if not manifest.is_file():
        return []
    covers = sorted(p for p in folder.glob("*.covers.json") if not p.name.startswith("."))
    return [covers, [manifest]]


def push_plan(root: Path) -> list[list[Path]]:
    """The local files to push, in waves (`PUSH_WAVES`): per-run files of committed runs only (a
    run is committed once its runs file exists), and the judgements and scores files; for a
    compacted archive (evalb archive merge writes one) also the live batches' files, which
    `Archive.files` lists, and then its compaction folder (`compaction_files`), manifest last."""
    from evalb.archive import Archive

    arch = Archive(root)
    compaction = compaction_files(arch.root)  # listed first: whatever it names is listed after
    # Listed in reverse commit order while recorders may be writing: scores and judgements first
    # (they refer only to runs committed before), then runs, then the events and artifacts of
    # those runs only (a run committed after the runs listing waits for the next push).
    listed: dict[str, list[Path]] = {}
    for table in ("judgements", "scores", "runs", "artifacts", "events"):
        listed[table] = [Path(f) for f in arch.files(table)]
    committed = {f.stem for f in listed["runs"] if _RUN_ID.match(f.stem)}
    return [
        [
            f
            for table in tables
            for f in listed[table]
            if table not in ("artifacts", "events") or not _RUN_ID.match(f.stem) or f.stem in committed
        ]
        for tables in PUSH_WAVES
    ] + compaction


def push(
    local: Path | str,
    dest: object,
    *,
    jobs: int = DEFAULT_JOBS,
    s3: Any = None,
    after_upload: Callable[[str], None] | None = None,
) -> PushResult:
    """Upload the committed runs (and judgements and scores) of the archive at `local` to `dest`.

    Safe to rerun and to run from many workers into one prefix at once: keys are unique per run or
    per scoring pass, objects already there with the same bytes are skipped, and `archive.json` is
    written by the first pusher only (every later one checks its schema matches). `after_upload`
    is called with each key uploaded (tests use it to stop a push half way)."""
    from evalb.archive import Archive

    arch = Archive.open(local)
    url = S3Url.parse(dest)
    s3 = s3 or client()
    local_marker = arch.read_marker()
    waves = push_plan(arch.root)
    result = PushResult(url=str(url), runs=sum(1 for p in waves[1] if _RUN_ID.match(p.stem)))
    _ensure_marker(s3, url, local_marker)
    remote: dict[str, tuple[int, str]] = {}
    for tables in (*PUSH_WAVES, (COMPACTION,)):
        for table in tables:
            remote.update(list_objects(s3, url, table))
    conflicts: list[str] = []

    def upload(path: Path) -> str | None:
        rel = f"{path.parent.name}/{path.name}"
        md5 = _md5(path)
        have = remote.get(rel)
        if have is not None:
            if have[1] == md5 or ("-" in have[1] and have[0] == path.stat().st_size):
                return None
            conflicts.append(rel)
            return None
        with open(path, "rb") as fh:
            try:
                s3.put_object(
                    Bucket=url.bucket,
                    Key=url.key(rel),
                    Body=fh,
                    ContentMD5=base64.b64encode(bytes.fromhex(md5)).decode(),
                )
            except Exception as e:
                raise _s3_error("write to", url, e) from e
        if after_upload is not None:
            after_upload(rel)
        return rel

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        for wave in waves:  # each wave is wholly uploaded before the next starts
            for rel in pool.map(upload, wave):
                if rel is None:
                    result.skipped += 1
                else:
                    result.uploaded.append(rel)
            if conflicts:
                more = f" and {len(conflicts) - 1} more" if len(conflicts) > 1 else ""
                raise ArchiveError(
                    f"{url} already holds {sorted(conflicts)[0]}{more} with other content; nothing "
                    "was overwritten",
                    hint="push to a new prefix (objects there are immutable)",
                )
    result.skipped -= len(conflicts)
    return result


# --- mirror (read) ------------------------------------------------------------------------------
def cache_dir(url: S3Url) -> Path:
    """Where the mirror of `url` lives: $EVALB_S3_CACHE, else $XDG_CACHE_HOME or ~/.cache, /evalb/s3."""
    base = os.environ.get(CACHE_ENV)
    if base:
        root = Path(base)
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = (Path(xdg) if xdg else Path.home() / ".cache") / "evalb" / "s3"
    return root / url.bucket / (url.prefix or "_")


def _download(s3: Any, url: S3Url, rel: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        body = s3.get_object(Bucket=url.bucket, Key=url.key(rel))["Body"]
        with open(tmp, "wb") as fh:  # get_object, not download_file: far less overhead per small file
            for chunk in body.iter_chunks(1 << 20):
                fh.write(chunk)
        os.replace(tmp, dest)
    except Exception as e:
        with contextlib.suppress(OSError):
            tmp.unlink()
        if isinstance(e, OSError):
            raise ArchiveError(f"cannot write the S3 cache {dest.parent}: {e.strerror}") from e
        raise _s3_error("read", url, e) from e


@dataclass
class MirrorResult:
    root: Path
    fetched: int = 0
    cached: int = 0


def mirror(
    src: object, dest: Path | None = None, *, jobs: int = DEFAULT_JOBS, s3: Any = None
) -> MirrorResult:
    """Bring `src` (s3://...) into the local folder `dest` (default: its cache), incrementally:
    only committed runs (listed after the scores and judgements that may refer to them), and only
    objects not there yet. The result is an ordinary archive directory."""
    url = S3Url.parse(src)
    s3 = s3 or client()
    root = dest if dest is not None else cache_dir(url)
    marker = read_marker(s3, url)
    if dest is not None and (dest / "archive.json").is_file():
        from evalb.archive import Archive

        mine = Archive(dest).schema_version()
        if mine != marker.get("schema_version"):
            raise ArchiveError(
                f"{dest} has archive schema v{mine}, {url} v{marker.get('schema_version')}",
                hint="pull into a new folder",
            )
    try:
        (root / "locks").mkdir(parents=True, exist_ok=True)  # locks/ is an archive's own entry
        lock_fd = os.open(root / "locks" / "mirror.lock", os.O_CREAT | os.O_RDWR, 0o644)
    except OSError as e:
        raise ArchiveError(f"cannot write the S3 cache {root}: {e.strerror}", hint=f"set {CACHE_ENV}") from e
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # one sync of a cache at a time
        # listings in reverse commit order: whatever is listed refers only to what is listed after
        listed = {
            t: list_objects(s3, url, t)
            for t in (COMPACTION, "judgements", "scores", "runs", "artifacts", "events")
        }
        committed = {Path(rel).stem for rel in listed["runs"]}
        result = MirrorResult(root)
        todo: list[list[tuple[str, Path]]] = []
        for tables in PUSH_WAVES:  # written in commit order
            wave = []
            for table in tables:
                for rel, (size, _) in sorted(listed[table].items()):
                    stem = Path(rel).stem
                    if table in ("artifacts", "events") and _RUN_ID.match(stem) and stem not in committed:
                        continue
                    target = root / rel
                    if target.is_file() and target.stat().st_size == size:
                        result.cached += 1
                        continue
                    wave.append((rel, target))
            todo.append(wave)
        manifest = f"{COMPACTION}/{COMPACTION_MANIFEST}"
        for last in (False, True):  # the covers lists, then the manifest that publishes the batches
            todo.append(
                [
                    (rel, root / rel)
                    for rel, (size, _) in sorted(listed[COMPACTION].items())
                    if (rel == manifest) == last
                    and not ((root / rel).is_file() and (root / rel).stat().st_size == size)
                ]
            )
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            for wave in todo:
                list(pool.map(lambda item: _download(s3, url, *item), wave))
                result.fetched += len(wave)
        _write_marker(root, marker)
        return result
    finally:
        os.close(lock_fd)


def _write_marker(root: Path, marker: dict[str, Any]) -> None:
    path = root / "archive.json"
    body = json.dumps(marker, indent=2) + "\n"
    if path.is_file() and path.read_text() == body:
        return
    tmp = root / f".archive.json.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
    tmp.write_text(body)
    os.replace(tmp, path)


def open_archive(src: object) -> Archive:
    """The archive at `src` (s3://...) for reading: its cache mirror synced, then opened read-only."""
    from evalb.archive import Archive
    from evalb.schema import SCHEMA_VERSION

    url, s3 = S3Url.parse(src), client()
    version = int(read_marker(s3, url).get("schema_version", 0))
    if version > SCHEMA_VERSION:
        raise ArchiveError(
            f"{url} has archive schema v{version}, newer than this evalb (v{SCHEMA_VERSION})",
            hint="upgrade evalb",
        )
    if version < SCHEMA_VERSION:
        raise ArchiveError(
            f"{url} has archive schema v{version}; this evalb reads v{SCHEMA_VERSION}",
            hint="evalb archive pull it, evalb-record migrate --archive the copy, push that to a new prefix",
        )
    return Archive.open(mirror(url, s3=s3).root)


def iter_keys(s3: Any, url: S3Url) -> Iterable[str]:
    """Every key under the archive's prefix (tests and docs)."""
    base = url.key("")
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=url.bucket, Prefix=base):
        for obj in page.get("Contents", []):
            yield obj["Key"][len(base) :]
