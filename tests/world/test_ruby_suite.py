"""The fixture's own minitest suite passes with plain Debian ruby (no bundler, no gems)."""

from __future__ import annotations

import shutil
import subprocess

from evalb import paths


def test_fixture_ruby_suite_passes() -> None:
    ruby = shutil.which("ruby")
    assert ruby, "ruby is required (apt-get install ruby)"
    r = subprocess.run(
        [
            ruby,
            "-w",
            "-Ilib",
            "-Itest",
            "-e",
            'Dir.glob("test/*_test.rb").sort.each { |f| require_relative f }',
        ],
        cwd=paths.FIXTURE_PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert " 0 failures, 0 errors" in r.stdout
    assert int(r.stdout.split(" runs,")[0].split()[-1]) >= 20
    assert "warning:" not in r.stderr
