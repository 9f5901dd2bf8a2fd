"""Where the notebooks find their archive: `EVALB_ARCHIVE`, a relative path taken from where Jupyter started."""

from __future__ import annotations

import os
from pathlib import Path

from evalb import paths


def start_dir() -> Path:
    """The directory Jupyter was started in: the shell's `$PWD`, which the kernel inherits unchanged
    (its own working directory is the notebook's, `notebooks/`); the working directory otherwise."""
    pwd = os.environ.get("PWD")
    if pwd and Path(pwd).is_absolute() and Path(pwd).is_dir():
        return Path(pwd)
    return Path.cwd()


def archive_path() -> Path:
    """`EVALB_ARCHIVE` (relative to where Jupyter was started), else the repo's `archive/`."""
    value = os.environ.get("EVALB_ARCHIVE")
    if not value:
        return paths.REPO_ROOT / "archive"
    return (start_dir() / Path(value).expanduser()).resolve()
