"""``ecntune`` command line. The only place that prints for the user and picks exit codes.

Exit codes:
  0  success
  1  unexpected internal error (a bug: please report it with the traceback)
  2  bad input: experiment/inventory file, arguments, unparsable tool output
  3  the study stopped on an apply, measurement or safety failure (canary restored);
     `export` without a confirmed winner, or refusing a trial that is not it
  4  the canary could NOT be restored: targets may be dirty, run ``ecntune recover``
  5  attention: ``watch`` advises a re-tune / ``verify`` found drift from what was promoted
  130 interrupted (Ctrl-C / SIGTERM), canary restored

Each sub-command lives in its own module under ``tuner/cli/`` and exposes ``command``
(a click command); ``COMMANDS`` lists them. Heavy imports (optuna, mlflow, paramiko) happen
inside the command functions so ``ecntune --help`` stays fast.
"""

from __future__ import annotations

import errno
import importlib
import logging
import sys
from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import click

from tuner import __version__
from tuner.errors import (
    ConfigError,
    ParseError,
    RollbackError,
    TunerError,
)

EXIT_OK, EXIT_BUG, EXIT_INPUT, EXIT_FAILED, EXIT_DIRTY, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130

# Module names under tuner/cli/ whose ``command`` is registered on the group.
COMMANDS: tuple[str, ...] = ("run", "resume", "show", "export", "parse", "preflight", "recover",
                             "report", "history", "ui", "watch", "verify", "promote", "retune",
                             "worker", "diagnose", "calibrate")

F = TypeVar("F", bound=Callable[..., Any])


def exit_code_for(exc: BaseException) -> int:
    """Map an exception to the documented exit code."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, RollbackError):
        return EXIT_DIRTY
    if isinstance(exc, ConfigError | ParseError):
        return EXIT_INPUT
    if isinstance(exc, TunerError):
        return EXIT_FAILED
    return EXIT_BUG


def handle_errors(fn: F) -> F:
    """Turn library exceptions into one clear line on stderr and the documented exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (TunerError, KeyboardInterrupt) as exc:
            code = exit_code_for(exc)
            kind = type(exc).__name__ if not isinstance(exc, KeyboardInterrupt) else "Interrupted"
            click.echo(f"ecntune: {kind}: {exc}", err=True)
            sys.exit(code)
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:
                raise
            # a path given on the command line or in a file that the file system refuses
            name = str(exc.filename)
            shown = name if len(name) <= 80 else f"{name[:60]}... ({len(name)} characters)"
            click.echo(f"ecntune: ConfigError: {shown}: file name too long for the file "
                       "system -- shorten the path", err=True)
            sys.exit(EXIT_INPUT)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ecntune")
@click.option("--large", is_flag=True,
              help="Read experiment and inventory files up to 64 MB (default 1 MB).")
@click.option("--i-know", "i_know", is_flag=True,
              help="Accept safety limits past their bounds (still finite): each is printed "
                   "and logged to MLflow (tag ecntune.i_know).")
def main(large: bool, i_know: bool) -> None:
    """Closed-loop ECN/DCQCN auto-tuner for RoCE fabrics.

    Tunes switch ECN thresholds and NIC DCQCN parameters on a canary slice, measures NCCL bus
    bandwidth and tail latency against PFC, rolls back on any safety violation, and logs every
    trial to MLflow. By default it runs on rocesim, a simulated RoCE fabric.
    """
    click.get_current_context().call_on_close(_show_rocesim_notes())
    if large:  # for this command only (tests run several in one process)
        from tuner.input_checks import set_input_limit

        set_input_limit(True)
        click.get_current_context().call_on_close(lambda: set_input_limit(False))
    if i_know:
        from tuner.input_checks import set_i_know

        set_i_know(True)
        click.get_current_context().call_on_close(lambda: set_i_know(False))


class _Echo(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"ecntune: {record.getMessage()}", err=True)


def _show_rocesim_notes() -> Callable[[], None]:
    """Show rocesim's notes on its compile on stderr, for this command only: that it compiles
    (the first run on a machine would otherwise start with seconds of silence) and a failed
    second compile process. Returns the undo."""
    log, echo = logging.getLogger("rocesim.compile"), _Echo()
    level = log.level
    log.addHandler(echo)
    log.setLevel(logging.INFO)

    def undo() -> None:
        log.removeHandler(echo)
        log.setLevel(level)

    return undo


for _name in COMMANDS:
    main.add_command(importlib.import_module(f"tuner.cli.{_name}").command)
