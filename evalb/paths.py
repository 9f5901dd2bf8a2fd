"""Where evalb's own files live: the repo's fixture, scenarios, reference plugin and pinned client."""

from __future__ import annotations

import os
from pathlib import Path

#: The repository root (this package is installed editable from it).
REPO_ROOT = Path(os.environ.get("EVALB_HOME", Path(__file__).resolve().parents[1]))
FIXTURE_DIR = REPO_ROOT / "fixture"
FIXTURE_PROJECT = FIXTURE_DIR / "project"
REFERENCE_PLUGIN = FIXTURE_DIR / "plugin" / "os-adr"
SCENARIOS_DIR = REPO_ROOT / "scenarios"
JUDGE_RUBRIC = REPO_ROOT / "judge-rubric.md"
RULES_DIR = REPO_ROOT / "analysis" / "rules"
TOOLS_DIR = REPO_ROOT / ".tools"
PINNED_CLIENT_VERSION_FILE = REPO_ROOT / ".claude-code-version"
PINNED_CLIENT = (
    TOOLS_DIR / "claude-code" / "node_modules" / "@anthropic-ai" / "claude-code" / "bin" / "claude.exe"
)
DEFAULT_ARCHIVE = Path("archive")


def pinned_client_version() -> str:
    """The Claude Code version the project pins (and `scripts/setup` installs)."""
    return PINNED_CLIENT_VERSION_FILE.read_text().strip()


def client_binary() -> Path:
    """The client to run: `$EVALB_CLAUDE_BIN` if set, else the project's pinned install."""
    override = os.environ.get("EVALB_CLAUDE_BIN")
    return Path(override) if override else PINNED_CLIENT
