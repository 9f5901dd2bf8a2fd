"""evalb's own exception types: each carries a one-line message and the fix, shown without a traceback."""

from __future__ import annotations


class EvalbError(Exception):
    """A user-facing error: `str(err)` is one line naming the thing; `hint` says how to fix it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def one_line(self) -> str:
        msg = str(self).replace("\n", " ").strip()
        return f"{msg} ({self.hint})" if self.hint else msg


class UsageError(EvalbError):
    """The command line or an input file is wrong (exit 2)."""

    exit_code = 2


class ScenarioError(UsageError):
    """A scenario id is unknown or a scenario file does not parse."""


class PolicyError(UsageError):
    """A scripted policy name is unknown or its parameters are off."""


class ArchiveError(EvalbError):
    """The archive cannot be read or written (bad path, read-only, full disk, newer schema)."""


class ClientError(EvalbError):
    """The Claude Code client is missing, or credentials for a real model are absent."""


class ConfinementError(EvalbError):
    """The sandbox confinement (bubblewrap) is unavailable and the user did not opt out."""


class FixtureError(EvalbError):
    """The fixture, plugin or graph does not hold what the eval needs."""


class HarnessError(EvalbError):
    """Reps failed in the harness itself (outcome `harness_error`); the rest of the grid was recorded."""


class ConfigurationError(UsageError):
    """The set-up cannot work at all (e.g. a judge that cannot run: no credentials, binary missing);
    nothing was written (exit 2)."""


class NotAnArchiveError(ArchiveError, UsageError):
    """The path given as an archive is missing, or is not an evalb archive (exit 2)."""
