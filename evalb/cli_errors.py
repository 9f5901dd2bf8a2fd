"""The one place where evalb's errors become a one-line message and an exit code (no tracebacks)."""

from __future__ import annotations

import sys

import typer

from evalb.errors import EvalbError

INTERRUPTED = "error: interrupted; what was recorded is kept (rerun to resume)"


def new_app(help: str) -> typer.Typer:
    """A typer app configured the evalb way (plain errors, no rich tracebacks, no completion noise)."""
    return typer.Typer(help=help, add_completion=False, pretty_exceptions_enable=False, no_args_is_help=True)


def run_cli(app: typer.Typer, prog_name: str | None = None) -> None:
    """Run a typer app as a console script: EvalbError -> `error: ...` on stderr and its exit code.
    Usage errors from the command line itself are typer's (exit 2)."""
    try:
        app(prog_name=prog_name)
    except EvalbError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        sys.exit(130)
    except SystemExit as e:
        # typer turns Ctrl-C inside a command into a silent Exit(130): say it in one line
        if e.code == 130:
            print(INTERRUPTED, file=sys.stderr)
        raise
    except BrokenPipeError:
        sys.exit(1)
