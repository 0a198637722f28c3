"""``ecntune parse KIND FILE|-``: run one tool-output parser and print the model as JSON.

Useful to check what ecntune reads from a switch or NIC (and for the emulated cluster's stand-in
tools to test their output). Unparsable input exits with code 2 and the quoted line.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import click

from tuner.cli import handle_errors

# kind -> name of the parser in objectives.parsers (resolved lazily).
KINDS: dict[str, str] = {
    "nccl": "parse_nccl_tests",
    "nccl-debug": "parse_nccl_debug",
    "perftest": "parse_perftest",
    "ethtool": "parse_ethtool_stats",
    "ethtool-info": "parse_ethtool_info",
    "hwcounters": "parse_hw_counters",
    "mlnx_qos": "parse_mlnx_qos",
    "mlxconfig": "parse_mlxconfig_query",
    "pfcstat": "parse_pfcstat",
    "ecnconfig": "parse_ecnconfig",
    "queuecounters": "parse_queue_counters",
    "wredcounters": "parse_wredcounters",
    "pfcwd": "parse_pfcwd_stats",
    "pfcwd-config": "parse_pfcwd_config",
    "watermark": "parse_watermark",
    "nvue": "parse_nvue",
}


# Kinds whose pasted logs are often cut off: lenient unless --strict.
LENIENT = {"nccl"}


def _parser(kind: str, text: str) -> Callable[..., Any]:
    from objectives import parsers

    if kind == "pfcwd" and "DETECTION TIME" in text:
        return parsers.parse_pfcwd_config  # `pfcwd` reads either view
    return getattr(parsers, KINDS[kind])  # type: ignore[no-any-return]


@click.command("parse")
@click.argument("kind", type=click.Choice(sorted(KINDS)))
@click.argument("source", type=click.File("r", encoding="utf-8", errors="replace"))
@click.option(
    "--allow-truncated",
    is_flag=True,
    help="Accept a cut-off last line / missing footer (for excerpts, not for live runs; "
    "the default for nccl).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="nccl: refuse a log cut off before its footer (what a trial measurement requires).",
)
@handle_errors
def command(kind: str, source: Any, allow_truncated: bool, strict: bool) -> None:
    """Parse tool output in SOURCE (a file, or - for stdin) and print it as JSON.

    Pasted nccl-tests logs may be cut off: the complete rows are parsed and the JSON says
    "truncated": true (--strict refuses them instead).
    """
    if strict and allow_truncated:
        raise click.UsageError("--strict and --allow-truncated contradict each other")
    text = source.read()
    fn = _parser(kind, text)
    kwargs = {}
    if "allow_truncated" in inspect.signature(fn).parameters:
        kwargs["allow_truncated"] = allow_truncated or (kind in LENIENT and not strict)
    elif allow_truncated:
        raise click.UsageError(f"{kind} has no --allow-truncated mode")
    elif strict:
        raise click.UsageError(f"{kind} has no --strict mode (it is always strict)")
    result = fn(text, **kwargs)
    sys.stdout.write(result.model_dump_json(indent=2) + "\n")
