"""A real S3-compatible server on loopback for the tests (moto's server mode, the one the AWS
SDKs' own tests use), and the environment a client needs to reach it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from evalb.archive import Archive

ROOT = Path(__file__).resolve().parents[2]
GOLDEN_V1 = ROOT / "tests" / "core" / "golden" / "archive-v1"
MOTO = ROOT / ".venv" / "bin" / "moto_server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class S3Server:
    endpoint: str
    env: dict[str, str]  # what a client process needs: endpoint, fake credentials, a cache

    def client(self):  # type: ignore[no-untyped-def]
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )

    def bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """moto_server on a free loopback port for the session."""
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([MOTO, "-H", "127.0.0.1", "-p", str(port)], stdout=fh, stderr=fh)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"moto_server did not start: {log.read_text()[-2000:]}") from None
            time.sleep(0.1)
    endpoint = f"http://127.0.0.1:{port}"
    env = {
        "EVALB_S3_ENDPOINT": endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    try:
        yield S3Server(endpoint, env)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def s3(s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """The session's server, with this process's environment pointing at it and a fresh cache."""
    for k, v in s3_server.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("EVALB_S3_CACHE", str(tmp_path / "s3cache"))
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(k, raising=False)
    return S3Server(s3_server.endpoint, {**s3_server.env, "EVALB_S3_CACHE": str(tmp_path / "s3cache")})


def golden_archive(dest: Path) -> Path:
    """tests/core/golden's v1 archive (two recorded and scored runs), migrated to this schema."""
    shutil.copytree(GOLDEN_V1, dest)
    Archive.create_or_open(dest)
    return dest


def child_env(server: S3Server, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    return {**env, **server.env, **extra}


def widened_archive(dest: Path, copies: int) -> Path:
    """The golden archive with each run copied `copies` times under new run ids (and new slots), all
    three run files each: many small committed runs to push."""
    import uuid

    import polars as pl

    root = golden_archive(dest)
    originals = sorted(p.stem for p in (root / "runs").glob("*.parquet"))
    for k in range(copies):
        for rid in originals:
            new = uuid.uuid5(uuid.NAMESPACE_OID, f"{rid}-{k}").hex
            for table in ("artifacts", "events", "runs"):
                df = pl.read_parquet(root / table / f"{rid}.parquet").with_columns(run_id=pl.lit(new))
                if table == "runs":
                    df = df.with_columns(slot=pl.col("slot") + f"-copy{k}")
                df.write_parquet(root / table / f"{new}.parquet")
    return root
