"""``ecntune verify GROUP``: does the fleet still hold what was promoted? Read-only.

Reads the live settings of every target of the inventory group that has a line in the promoted
record (``results/promoted.jsonl``) and lists every value that differs: target, knob, live
value, expected value, when it was promoted and by which study.

Exit codes: 0 everything matches, 5 drift found, 3 a target could not be read, 2 bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tuner.cli import EXIT_FAILED, handle_errors

EXIT_DRIFT = 5


def load_fleet_inventory(inventory: Path | None, experiment: Path | None):  # noqa: ANN201
    """The inventory from --inventory, or from an experiment's ssh ``fabric:``."""
    from tuner.errors import ConfigError
    from tuner.inventory import load_inventory

    if (inventory is None) == (experiment is None):
        raise click.UsageError("give exactly one of --inventory and --experiment")
    if inventory is not None:
        return load_inventory(inventory)
    from tuner.cluster.ssh import SshCluster
    from tuner.experiment import load_experiment

    exp = load_experiment(experiment)  # type: ignore[arg-type]
    if exp.fabric.backend != "ssh":
        raise ConfigError(f"{experiment}: fabric.backend is {exp.fabric.backend}; a fleet is "
                          "an ssh inventory")
    return SshCluster.from_fabric(exp.fabric).inventory


@click.command("verify")
@click.argument("group")
@click.option("--inventory", type=click.Path(dir_okay=False, path_type=Path),
              help="Inventory file with the group under groups:.")
@click.option("--experiment", type=click.Path(dir_okay=False, path_type=Path),
              help="Or an experiment file whose fabric names the inventory.")
@click.option("--record", default="results/promoted.jsonl", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The promoted record written by ecntune promote.")
@click.option("--boot", type=click.Choice(["boot-unit", "mlxconfig"]),
              help="Also read the boot-time configuration of every target recorded as "
                   "persisted (hosts: this method; switches: their saved configuration).")
@handle_errors
def command(group: str, inventory: Path | None, experiment: Path | None, record: Path,
            boot: str | None) -> None:
    """Report every target of GROUP whose live settings differ from what was promoted."""
    from tuner.lifecycle.fleet import Fleet
    from tuner.lifecycle.promoted import PromotedRecord
    from tuner.lifecycle.verify import verify_group

    inv = load_fleet_inventory(inventory, experiment)
    rec = PromotedRecord(record)
    expected = rec.expected()
    with Fleet(inv, group) as fleet:
        report = verify_group(fleet, expected, boot)  # type: ignore[arg-type]
    click.echo(f"verify {group}: {len(report.checked)} target(s) read against {rec.path}")
    for d in report.drift:
        click.echo(f"  {d.target:<16} {d.knob:<28} {d.source} {d.live!s:<10} expected "
                   f"{d.expected!s:<10} ({d.event} {d.since} by study {d.study})")
    for target, err in report.unreadable.items():
        click.echo(f"  {target:<16} UNREADABLE: {err}", err=True)
    if report.never_promoted:
        click.echo(f"  never promoted (not checked): {', '.join(report.never_promoted)}")
    targets = sorted({d.target for d in report.drift})
    if report.drift:
        click.echo(f"ecntune verify: DRIFT: {len(report.drift)} value(s) on {len(targets)} "
                   f"target(s) differ from what was promoted: {', '.join(targets)}")
        sys.exit(EXIT_DRIFT)
    if report.unreadable:
        click.echo(f"ecntune verify: UNKNOWN: {len(report.unreadable)} target(s) unreadable")
        sys.exit(EXIT_FAILED)
    click.echo("ecntune verify: OK: every checked target holds what was promoted")
