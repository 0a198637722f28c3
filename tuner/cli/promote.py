"""``ecntune promote STUDY --to GROUP``: roll a confirmed winner out to an inventory group in
waves. A dry run by default (every command per target, read-only); ``--apply`` executes.

Only the confirmed winner (``load_winner``): there is no option to pick another trial.

Exit codes: 0 every wave promoted (or the dry run printed), 3 the study has no confirmed winner,
or a wave was rolled back on a safety violation or failed to apply (its targets restored and
verified), or refused because a switch marked ``promote_in_maintenance`` is in production,
4 a wave could not be restored (dead-man timers still heal it), 2 bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from tuner.cli import EXIT_FAILED, handle_errors


@click.command("promote")
@click.argument("study", metavar="STUDY|RESULTS_DIR")
@click.option("--to", "group", required=True, help="Inventory group to promote to.")
@click.option("--inventory", type=click.Path(dir_okay=False, path_type=Path),
              help="Inventory with the group (default: the study's ssh inventory).")
@click.option("--waves", default="canary,10,50,100", show_default=True,
              help="Wave plan: 'canary' then cumulative percentages of the group.")
@click.option("--gate-s", default=30.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds each wave is watched against the safety limits before the next.")
@click.option("--apply", "do_apply", is_flag=True, help="Execute (default: dry run).")
@click.option("--persist", is_flag=False, flag_value="boot-unit", default=None,
              type=click.Choice(["boot-unit", "mlxconfig"]),
              help="Also save each wave to the boot-time configuration (hosts: a boot unit, "
                   "or mlxconfig) and verify it from there.")
@click.option("--storage", help="Optuna storage URL (default sqlite:///<results>/optuna.db).")
@click.option("--results", help="results_dir of the study (default: results).")
@click.option("--record", default="results/promoted.jsonl", show_default=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="The promoted record (what is where, by which study, since when).")
@handle_errors
def command(study: str, group: str, inventory: Path | None, waves: str, gate_s: float,
            do_apply: bool, persist: str | None, storage: str | None,
            results: str | None, record: Path) -> None:
    """Promote STUDY's confirmed winner to GROUP: canary, 10 %, 50 %, all.

    Each wave is journalled (promote-journal.jsonl next to the record), guarded by dead-man
    timers, applied all-or-nothing with read-back and watched for --gate-s seconds; a safety
    violation rolls the wave back and stops. A promotion that was killed is put back on its
    previous settings by the next `promote --apply` before anything else.
    """
    from safety.journal import Journal
    from tuner.cli.verify import load_fleet_inventory
    from tuner.errors import ConfigError
    from tuner.lifecycle.fleet import Fleet
    from tuner.lifecycle.promote import plan_target, promote_waves, recover_open, render_plan
    from tuner.lifecycle.promoted import PromotedRecord
    from tuner.lifecycle.waves import parse_waves, plan_waves
    from tuner.lifecycle.winner import load_winner

    spec = parse_waves(waves)
    win = load_winner(study, storage, results)  # NoWinner (exit 3) without a confirmed one
    exp = win.experiment
    if inventory is None and exp.fabric.backend != "ssh":
        raise ConfigError(f"study {win.study} ran on the {exp.fabric.backend} backend: give the "
                          "production inventory with --inventory")
    inv = load_fleet_inventory(inventory, None) if inventory is not None else None
    if inv is None:
        from tuner.cluster.ssh import SshCluster

        inv = SshCluster.from_fabric(exp.fabric).inventory
    journal = Journal(record.parent / "promote-journal.jsonl")
    with Fleet(inv, group) as fleet:
        if do_apply:
            for entry_id in recover_open(fleet, journal):
                click.echo(f"an interrupted promotion ({entry_id}) was put back on its "
                           "previous settings (verified)")
        plan = plan_waves(fleet.keys, win.canary, spec)
        live, failed = fleet.read_settings()
        if failed:
            raise ConfigError("cannot read " + "; ".join(f"{k}: {e}" for k, e in
                                                          sorted(failed.items())))
        plans = {k: plan_target(fleet.driver(k), v, win.values, persist)  # type: ignore[arg-type]
                 for k, v in {**live.switches, **live.nics}.items()}
        from objectives.verdict import winner_line

        click.echo(f"promote study {win.study} trial {win.trial} ({winner_line(win.check)}) "
                   f"to {group} ({len(fleet.keys)} targets, {len(plan)} waves)"
                   + ("" if do_apply else "; DRY RUN: nothing is changed, --apply executes"))
        from tuner.lifecycle.maintenance import read_command

        held = {s.name: read_command(s.platform) for s in fleet.switches
                if s.promote_in_maintenance}
        for line in render_plan(plan, plans, held):
            click.echo(line)
        if not do_apply:
            return
        from tuner.signals import SignalGuard

        guard = SignalGuard()  # a signal waits until a wave's restore is complete
        guard.install()
        try:
            results_ = promote_waves(
                fleet, plan, win.values, study=win.study, limits=exp.safety, gate_s=gate_s,
                journal=journal, record=PromotedRecord(record),
                persist=persist,  # type: ignore[arg-type]
                on_wave=lambda r: click.echo(
                    f"wave {r.wave.index} ({r.wave.name}): {r.outcome} in {r.seconds:.1f} s"
                    + (f"; persisted {len(r.persisted)}" if r.persisted else "")
                    + (f": {r.detail}" if r.detail and not r.ok else "")),
                shield=guard.shield, check=guard.check)
        finally:
            guard.uninstall()
    if not all(r.ok for r in results_) or len(results_) < len(plan):
        last = results_[-1]
        where = ("nothing of that wave was changed" if last.outcome.startswith("refused")
                 else "that wave is back on its previous settings")
        click.echo(f"ecntune promote: STOPPED at wave {last.wave.index}: {last.outcome}; "
                   f"{where}, earlier waves keep the winner", err=True)
        sys.exit(EXIT_FAILED)
    click.echo(f"ecntune promote: {group} holds study {win.study}'s winner "
               f"(record: {record})")
