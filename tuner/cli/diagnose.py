"""``ecntune diagnose EXPERIMENT``: find what congestion-control tuning cannot fix.

Checks bottom-up (physical, host, IP, RDMA, fabric, collectives) and prints each finding with
its layer, where it was read, the evidence, the likely cause and the action; then the checks
that could not run. Writes ``<results_dir>/diagnosis.json`` and logs it to MLflow when tracking
is on. Reads only. Exit codes: 0 no finding, 1 findings, 2 bad input, 3 could not check.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tuner.cli import handle_errors

if TYPE_CHECKING:
    from rich.console import Console

    from tuner.diagnose.finding import Diagnosis

EXIT_FINDINGS, EXIT_NOT_CHECKED = 1, 3


def render(console: Console, diag: Diagnosis, title: str) -> None:
    from rich.table import Table

    if diag.findings:
        table = Table(title=title, show_lines=True)
        for col in ("layer", "where", "evidence", "cause", "action"):
            table.add_column(col, overflow="fold")
        for f in diag.findings:
            mark = "[bold red]" if f.dominant else "[yellow]"
            table.add_row(f"{mark}{f.layer}[/]\n{f.check}", f.where, f.evidence, f.cause,
                          f.action)
        console.print(table)
    else:
        console.print(f"{title}: no finding")
    _table(console, "versions per host", ("host", "firmware", "driver"),
           [(h, row.get("firmware", "?"), row.get("driver", "?"))
            for h, row in diag.versions.items()])
    _table(console, "OS per switch", ("switch", "platform", "OS"),
           [(n, row.get("platform", "?"), row.get("os", "?"))
            for n, row in diag.switch_versions.items()])
    _table(console, "NCCL per all_reduce part (busbw GB/s)",
           ("part", "NCCL", "chosen", "as chosen", "Ring", "Tree"),
           [(p, row["nccl"], row["chosen"], *(row.get(f"busbw {k} (GB/s)", "-")
                                               for k in ("as chosen", "Ring", "Tree")))
            for p, row in diag.nccl.items()])
    if diag.not_checked:
        nt = Table(title="not checked")
        for col in ("layer", "check", "where", "reason"):
            nt.add_column(col, overflow="fold")
        for n in diag.not_checked:
            nt.add_row(n.layer, n.check, n.where, n.reason)
        console.print(nt)


def _table(console: Console, title: str, cols: tuple[str, ...], rows: list[tuple[str, ...]]
           ) -> None:
    from rich.table import Table

    if rows:
        table = Table(title=title)
        for col in cols:
            table.add_column(col)
        for row in rows:
            table.add_row(*row)
        console.print(table)


@click.command("diagnose")
@click.argument("experiment", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--sample-s", type=click.FloatRange(0, 60), default=2.0, show_default=True,
              help="Seconds between the two reads of error counters and carrier changes.")
@click.option("--load", is_flag=True,
              help="SSH: run one ib_write_bw flow per host (to the next host, line rate) "
                   "during the counter window, so errors that show only at load show.")
@click.option("--bw-s", type=click.IntRange(0, 60), default=2, show_default=True,
              help="SSH: seconds of the single-QP ib_write_bw test (one flow per host to the "
                   "next, all at once, no rate limit); 0 skips it.")
@click.option("--collectives/--no-collectives", default=True, show_default=True,
              help="SSH: run each all_reduce part of the workload three times (as the job "
                   "runs it, with NCCL_DEBUG naming NCCL's algorithm, then NCCL_ALGO=Ring and "
                   "=Tree) and compare.")
@click.option("--json", "as_json", is_flag=True, help="Print diagnosis.json instead of tables.")
@handle_errors
def command(experiment: Path, sample_s: float, load: bool, bw_s: int, collectives: bool,
            as_json: bool) -> None:
    """Find what tuning cannot fix on EXPERIMENT's fabric, bottom-up: link speed, FEC, CRC
    errors, flaps, optics, the switches' canary ports; PCIe link, NUMA/IRQ placement, GPU-NIC
    affinity; MTU end to end; RDMA port, GID, RoCE ToS, single-QP bandwidth; fabric; NCCL's
    algorithm against Ring and Tree measured apart; versions per host, OS per switch.

    Reads only (--load, the bandwidth test and the collectives add traffic, change no
    setting). Exit 0: no
    finding; 1: findings; 2: bad input; 3: nothing could be checked (e.g. every host
    unreachable).
    """
    from rich.console import Console

    from tuner.cluster import build_cluster
    from tuner.diagnose.run import diagnose, save
    from tuner.experiment import load_experiment
    from tuner.input_checks import check_inputs

    source = str(experiment)
    exp = load_experiment(experiment)
    check_inputs(exp, source)
    cluster = build_cluster(exp, source)
    with cluster:
        diag, checked = diagnose(exp, cluster, sample_s, load, bw_s, collectives)
    out = save(exp, diag)
    if as_json:
        click.echo(out.read_text(), nl=False)
    else:
        render(Console(), diag, f"diagnosis of {exp.name} ({diag.backend})")
        click.echo(f"written: {out}", err=True)
    if not checked:
        click.echo("ecntune: could not check: no host answered and no fabric check ran",
                   err=True)
        sys.exit(EXIT_NOT_CHECKED)
    if diag.findings:
        sys.exit(EXIT_FINDINGS)
