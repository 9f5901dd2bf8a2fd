"""Fixtures of tests/deploy: the loopback S3 server (tests/deploy/s3server.py)."""

from tests.deploy.s3server import s3, s3_server

__all__ = ["s3", "s3_server"]
