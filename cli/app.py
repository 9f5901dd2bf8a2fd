"""The one error boundary: every console script is a typer app built by `new_app` and run by `run_app`.

Every exception a command raises passes through `exit_code_for`, which maps it to the one table of
exit codes (`EXIT_CODES`, documented in docs/cli.md and README), and is said in one line on stderr:
`error: <what> (<hint>)`. Set EVALB_TRACEBACK=1 to see the traceback of an unexpected error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn, TextIO

import typer
from typer._click import exceptions as click_exc

from evalb.errors import BudgetError, EvalbError, HarnessError

#: The exit codes of every evalb console script (docs/cli.md and README repeat this table).
EXIT_CODES: dict[int, str] = {
    0: "success; for evalb-score, every valid run passes (expected failures aside)",
    1: "a check failed: some valid run fails (evalb-score), a case or threshold fails, a manifest changed",
    2: "usage or configuration error; nothing was recorded or written",
    3: "harness error: a rep failed in the harness, or evalb itself failed; what was recorded is kept",
    4: "a grid stopped on its --budget-usd before every slot was recorded; what was recorded is kept",
    130: "interrupted (Ctrl-C, SIGTERM); what was recorded is kept",
}

INTERRUPTED = "error: interrupted; what was recorded is kept (rerun to resume)"
TRACEBACK_ENV = "EVALB_TRACEBACK"


def exit_code_for(exc: BaseException) -> int:
    """The table's exit code for an exception that ended a command."""
    if isinstance(exc, KeyboardInterrupt | typer.Abort | BrokenPipeError):
        return 130
    if isinstance(exc, HarnessError):
        return 3
    if isinstance(exc, BudgetError):
        return 4
    if isinstance(exc, EvalbError | click_exc.UsageError):
        return 2
    return 3


def error_line(exc: BaseException) -> str:
    """The one line on stderr for an exception (prefix `error: `, the fix in parentheses)."""
    if isinstance(exc, EvalbError):
        return f"error: {exc.one_line()}"
    if isinstance(exc, click_exc.UsageError):
        what = " ".join(exc.format_message().split()).rstrip(".")
        where = exc.ctx.command_path if exc.ctx is not None else ""
        return f"error: {what} (see '{where} --help')" if where else f"error: {what}"
    if exit_code_for(exc) == 130:
        return INTERRUPTED
    what = " ".join(str(exc).split())
    return (
        f"error: evalb failed unexpectedly: {type(exc).__name__}: {what} "
        f"(a bug in evalb; set {TRACEBACK_ENV}=1 to see where)"
    )


def new_app(help: str, *, no_args_is_help: bool = True) -> typer.Typer:
    """A typer app configured the evalb way (plain errors, no rich tracebacks, no completion noise)."""
    return typer.Typer(
        help=help, add_completion=False, pretty_exceptions_enable=False, no_args_is_help=no_args_is_help
    )


#: The library packages: they never print; they warn through `logging`, and the CLI prints.
LIBRARY_LOGGERS: tuple[str, ...] = ("evalb", "runner", "analysis")


class WarningLines(logging.Handler):
    """Prints a library warning as one `warning: …` line on the stderr of the moment (so typer's
    in-process runner, which swaps sys.stderr, sees it too)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            print(f"warning: {' '.join(record.getMessage().split())}", file=sys.stderr, flush=True)
        except Exception:  # a warning never ends a command
            self.handleError(record)


def install_warnings() -> None:
    """Route the library packages' warnings to stderr as `warning: …` lines (once per process)."""
    for name in LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        logger.setLevel(logging.WARNING)
        if not any(isinstance(h, WarningLines) for h in logger.handlers):
            logger.addHandler(WarningLines())


def invoke(
    app: typer.Typer, prog_name: str, args: Sequence[str] | None = None, err: TextIO | None = None
) -> int:
    """Run `app` with `args` (default: the process's) through the boundary; the exit code."""
    err = err or sys.stderr
    install_warnings()
    try:
        rv = app(prog_name=prog_name, args=None if args is None else list(args), standalone_mode=False)
    except click_exc.NoArgsIsHelpError as e:
        typer.echo(e.format_message(), err=True)
        return 2
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except BaseException as e:
        if os.environ.get(TRACEBACK_ENV) == "1" and not isinstance(e, EvalbError | click_exc.UsageError):
            raise
        if not isinstance(e, BrokenPipeError):
            print(error_line(e), file=err)
        return exit_code_for(e)
    code = rv if isinstance(rv, int) else 0
    if code == 130:  # typer turns Ctrl-C inside a command into Exit(130)
        print(INTERRUPTED, file=err)
    return code


def run_app(app: typer.Typer, prog_name: str) -> NoReturn:
    """Run a console script: its exit code from the table, its error in one line."""
    code = invoke(app, prog_name)
    with contextlib.suppress(BrokenPipeError):
        sys.stdout.flush()
    sys.exit(code)
