"""``ecntune preflight EXPERIMENT``: the baseline checks before touching congestion control.

Prints a pass/warn/fail table with the evidence for every line. ``gate`` is what ``run`` calls
before it changes anything: a ``fail`` raises ``SafetyAbort`` (exit code 3) and nothing is
applied.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tuner.cli import handle_errors

if TYPE_CHECKING:
    from rich.console import Console

    from safety.preflight import CheckResult, PreflightSpec
    from tuner.cluster.base import Cluster
    from tuner.experiment import Experiment

STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red"}


def spec_of(exp: Experiment) -> PreflightSpec:
    """The experiment's ``preflight:`` section (defaults when the file has none)."""
    from safety.preflight import PreflightSpec

    spec = getattr(exp, "preflight", None)
    return spec if isinstance(spec, PreflightSpec) else PreflightSpec()


def check(exp: Experiment, cluster: Cluster) -> list[CheckResult]:
    from safety.preflight import run_checks
    from tuner.canary_layout import coverage_checks
    from tuner.preflight_facts import collect
    from tuner.ssh.exec_plan import plan_checks
    from tuner.ssh.exec_trust import exec_checks
    from tuner.ssh.plan import workload_checks

    spec = spec_of(exp)
    return (run_checks(collect(exp, cluster, spec), spec) + workload_checks(exp, cluster)
            + exec_checks(exp, cluster) + coverage_checks(exp, cluster)
            + plan_checks(exp, cluster))


def render(console: Console, results: list[CheckResult], title: str) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=escape(title), show_lines=False)
    for col in ("check", "target", "status", "evidence"):
        table.add_column(col, overflow="fold")
    for r in results:
        # evidence holds paths and YAML (`[/opt/x]`), never markup
        table.add_row(escape(r.check), escape(r.target), f"[{STYLE[r.status]}]{r.status}[/]",
                      escape(r.evidence))
    console.print(table)


def unreachable(exp: Experiment, cluster: Cluster, results: list[CheckResult],
                source: str) -> None:
    """A target pre-flight could not reach is an input problem (exit 2): name its entry."""
    from tuner.errors import ConfigError
    from tuner.input_checks import inventory_source

    inv = getattr(getattr(cluster, "inner", cluster), "inventory", None)
    if inv is None:
        return
    where = inventory_source(exp, source)
    lines = []
    for r in results:
        if r.check != "facts" or "connect" not in r.evidence:
            continue
        for i, h in enumerate(inv.hosts):
            if h.name == r.target:
                lines.append(f"{where}: hosts[{i}] ({h.name}).address: {h.address}:{h.port} "
                             "unreachable -- fix the address/port or remove the host "
                             f"({r.evidence.removeprefix('facts not collected: ')})")
    if lines:
        raise ConfigError("\n".join(lines))


def inputs(exp: Experiment, cluster: Cluster, source: str) -> None:
    """Local checks of the inventory (key files, known_hosts, no secrets in files)."""
    from tuner.input_checks import check_inputs

    check_inputs(exp, source, getattr(getattr(cluster, "inner", cluster), "inventory", None))


def gate(exp: Experiment, cluster: Cluster, console: Console | None = None,
         source: str = "experiment") -> list[CheckResult]:
    """Run pre-flight before a study; raise ``SafetyAbort('preflight', ...)`` on any fail
    (``ConfigError`` when the cause is the input: bad inventory, unreachable host)."""
    from safety.preflight import failures, summary
    from tuner.errors import SafetyAbort

    inputs(exp, cluster, source)
    if not spec_of(exp).enabled:
        return []
    results = check(exp, cluster)
    unreachable(exp, cluster, results, source)
    if console is not None and failures(results):
        render(console, results, f"pre-flight of {exp.name}: FAILED, nothing was changed")
    if failures(results):
        raise SafetyAbort("preflight", f"{summary(results)} (nothing was changed; "
                                       f"`ecntune preflight` shows every check)")
    return results


@click.command("preflight")
@click.argument("experiment", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON lines.")
@click.option("--enable-counters", is_flag=True,
              help="SSH: turn on SONiC's WRED/ECN queue counters (`counterpoll wredqueue "
                   "enable`) where they are off; the only change pre-flight makes.")
@handle_errors
def command(experiment: Path, as_json: bool, enable_counters: bool) -> None:
    """Check the canary of EXPERIMENT before tuning: MTU, PFC priority, DSCP trust, DCQCN
    enable and algorithm, RoCE MTU, links, error counters, versions, blast radius (from the
    switches' own configuration), PFC threshold, counter polling, CNP queue, shared RoCE priority,
    the congestion points the canary's traffic crosses (and tuned ports it never reaches);
    over SSH, who could change the nccl-tests binaries, and every command line the study will
    run per host (`executes` rows).

    Reads only; changes nothing (but --enable-counters). Exit 0 when no check fails
    (warnings allowed), 3 when one does; `ecntune run` refuses to start in that case.
    """
    from rich.console import Console

    from safety.preflight import failures, summary, worst
    from tuner.cluster import build_cluster
    from tuner.errors import SafetyAbort
    from tuner.experiment import load_experiment
    from tuner.input_checks import check_inputs

    source = str(experiment)
    exp = load_experiment(experiment)
    check_inputs(exp, source)
    cluster = build_cluster(exp, source)
    with cluster:
        inputs(exp, cluster, source)
        inner = getattr(cluster, "inner", cluster)
        if enable_counters and hasattr(inner, "switch_facts"):
            from tuner.preflight_facts import enable_counters as turn_on

            for name in turn_on(inner):
                click.echo(f"{name}: counterpoll wredqueue enable", err=True)
        results = check(exp, cluster)
        unreachable(exp, cluster, results, source)
    if as_json:
        for r in results:
            click.echo(json.dumps(r.model_dump()))
    else:
        render(Console(), results, f"pre-flight of {exp.name}: {worst(results).upper()}")
    if failures(results):
        raise SafetyAbort("preflight", summary(results))

