"""evalb's own exception types: each carries a one-line message and the fix, shown without a traceback.

Library code raises these; the CLI layer (cli/app.py) is the one place that turns them into a line
on stderr and an exit code (the table in docs/cli.md): HarnessError is 3, BudgetError 4, every other EvalbError 2.
"""

from __future__ import annotations


class EvalbError(Exception):
    """A user-facing error: `str(err)` is one line naming the thing; `hint` says how to fix it."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        msg = " ".join(str(self).split())
        hint = " ".join(self.hint.split()) if self.hint else ""
        return f"{msg} ({hint})" if hint else msg


class UsageError(EvalbError):
    """The command line or an input file is wrong."""


class ConfigurationError(EvalbError):
    """The environment cannot do what was asked (a judge that cannot run: no credentials, binary
    missing; a missing tool or setting); nothing was written (exit 2)."""


class ScenarioError(UsageError):
    """A scenario id is unknown or a scenario file does not parse."""


class PolicyError(UsageError):
    """A scripted policy name is unknown or its parameters are off."""


class ArchiveError(EvalbError):
    """The archive cannot be read or written (bad path, read-only, full disk, newer schema)."""


class ClientError(ConfigurationError):
    """The Claude Code client is missing, or credentials for a real model are absent."""


class ConfinementError(ConfigurationError):
    """The sandbox confinement (bubblewrap) is unavailable and the user did not opt out."""


class FixtureError(ConfigurationError):
    """The fixture, plugin or graph does not hold what the eval needs."""


class HarnessError(EvalbError):
    """Reps failed in the harness itself (outcome `harness_error`); the rest of the grid was recorded."""


class BudgetError(EvalbError):
    """A grid stopped on its --budget-usd before every slot was recorded; what was recorded is kept
    (exit 4)."""


class NotAnArchiveError(ArchiveError, UsageError):
    """The path given as an archive is missing, or is not an evalb archive (exit 2)."""
