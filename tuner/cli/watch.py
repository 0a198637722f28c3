"""``ecntune watch EXPERIMENT``: has the traffic mix moved away from the one the settings were
tuned for? Read-only: it samples counters, compares them with the recorded profile and reports.

Exit codes: 0 the mix is unchanged, 5 a re-tune is advised, 2 bad input, 3 counters unreadable.
The decision rule is explained in ``tuner/lifecycle/profile.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from tuner.cli import handle_errors

if TYPE_CHECKING:
    from tuner.experiment import Experiment
    from tuner.lifecycle.watch import CounterSource

EXIT_RETUNE = 5
RECORD_SEED, WATCH_SEED = 0, 1000  # simulated windows: independent seed streams


def _source(exp: Experiment, traffic: Path | None, group: str, settings: dict[str, int],
            seed: int, probe: bool = False) -> tuple[CounterSource, object]:
    """The counter source for the experiment's fabric, and what to close afterwards."""
    from tuner.experiment import load_experiment

    if exp.fabric.backend == "sim":
        from tuner.cluster.sim import SimCluster
        from tuner.lifecycle.watch import SimSource
        from tuner.settings import Settings

        workload = load_experiment(traffic).workload if traffic else exp.workload
        cluster = SimCluster(exp.fabric, exp.canary.switches, exp.current, name=exp.name)
        desc = cluster.describe()
        deployed = Settings.uniform(desc.canary_switches, desc.canary_nics, settings) \
            if settings else None
        return SimSource(cluster, workload, deployed, first_seed=seed), cluster
    if traffic is not None:
        raise click.UsageError("--traffic only applies to the simulated backend (a real "
                               "fabric carries its own traffic)")
    from tuner.cluster.ssh import SshCluster
    from tuner.lifecycle.fleet import Fleet
    from tuner.lifecycle.watch import SshSource
    from tuner.workload import ProbePart

    inv = SshCluster.from_fabric(exp.fabric).inventory  # validated, $VARS expanded
    fleet = Fleet(inv, group)
    part = (exp.workload.probes or [ProbePart()])[0] if probe else None
    try:
        return SshSource(fleet, part), fleet
    except BaseException:
        fleet.close()
        raise


@click.command("watch")
@click.argument("experiment", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--record", "do_record", is_flag=True,
              help="Sample now and save the profile (do this right after deploying settings).")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Profile file (default: <results_dir>/traffic-profile.json).")
@click.option("--group", default="all", show_default=True,
              help="Inventory group whose hosts and switches are read (ssh backend).")
@click.option("--traffic", type=click.Path(dir_okay=False, path_type=Path),
              help="Simulated backend only: take the production traffic from this "
                   "experiment file's workload (a mix change on the same fabric).")
@click.option("--intervals", default=12, show_default=True, type=click.IntRange(3, 10_000),
              help="Intervals per window (12 gives ~97 % power against a doubling of one "
                   "counter at 30 % noise).")
@click.option("--interval-s", default=30.0, show_default=True, type=click.FloatRange(0.1),
              help="Seconds between counter reads (ssh); one workload run per interval (sim).")
@click.option("--alpha", default=0.01, show_default=True,
              type=click.FloatRange(0, 1, min_open=True, max_open=True),
              help="Chance of a false alarm per check when the mix did not change.")
@click.option("--min-ratio", default=1.5, show_default=True, type=click.FloatRange(1.0),
              help="Smallest change of a counter rate (factor) worth a re-tune.")
@click.option("--probe", is_flag=True,
              help="ssh backend: also run one ib_write_lat probe per interval between the "
                   "inventory's latency hosts (the simulated backend always has its probes).")
@click.option("--textfile", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the verdict here in Prometheus text format (node-exporter textfile "
                   "collector directory, name ending in .prom).")
@handle_errors
def command(experiment: Path, do_record: bool, profile_path: Path | None, group: str,
            traffic: Path | None, intervals: int, interval_s: float, alpha: float,
            min_ratio: float, probe: bool, textfile: Path | None) -> None:
    """Watch production counters for a traffic-mix change that calls for a re-tune.

    First record the profile under the deployed settings (--record), then run it periodically
    (cron, systemd timer): it samples ECN marks, CNPs, PFC paused time and bytes per priority
    over --intervals intervals and prints one status line. It never changes anything.
    """
    from tuner.experiment import load_experiment
    from tuner.lifecycle.profile import (
        PROFILE_FILE,
        compare,
        load_profile,
        prometheus_text,
        write_textfile,
    )
    from tuner.lifecycle.watch import common, record, sample

    exp = load_experiment(experiment)
    path = profile_path or exp.results_path / PROFILE_FILE
    if do_record:
        source, closer = _source(exp, traffic, group, exp.current, RECORD_SEED, probe)
        try:
            settings = _live_settings(source)
            prof = record(source, intervals, interval_s, study=exp.name, settings=settings)
        finally:
            closer.close()  # type: ignore[attr-defined]
        prof.save(path)
        click.echo(f"profile of {prof.n} intervals ({len(prof.samples)} counters) recorded "
                   f"under the live settings: {path}")
        return
    prof = load_profile(path)
    source, closer = _source(exp, traffic, group, prof.settings, WATCH_SEED, probe)
    try:
        live = _live_settings(source)
        rows, mean_s = sample(source, intervals, interval_s, prof.priority, prof.lossless_queue,
                              prof.ports or None)
    finally:
        closer.close()  # type: ignore[attr-defined]
    verdict = compare(prof, common(rows), mean_s, alpha=alpha, min_ratio=min_ratio)
    for f in verdict.features:
        click.echo(f"  {f.feature:<28} profile {f.baseline_rate:>11.4g}/s  now "
                   f"{f.current_rate:>11.4g}/s  x{f.ratio:<8.3g} p={f.p_value:.2g}"
                   + ("  MOVED" if f.moved else ""))
    drift = sorted(k for k in set(live) | set(prof.settings)
                   if live.get(k) != prof.settings.get(k))
    if drift and prof.settings:
        click.echo(f"  note: live settings differ from the profile's in {', '.join(drift)}: "
                   "counters depend on them (run `ecntune verify`)", err=True)
    if textfile is not None:
        write_textfile(textfile, prometheus_text(verdict, prof, time.time()))
    click.echo(f"ecntune watch: {verdict.status_line()}")
    if verdict.retune_advised:
        sys.exit(EXIT_RETUNE)


def _live_settings(source: CounterSource) -> dict[str, int]:
    """The (flat) settings the sampled targets hold now; read-only."""
    cluster = getattr(source, "cluster", None)
    if cluster is not None:
        return dict(cluster.read_back().flat())
    live, _ = source.fleet.read_settings()  # type: ignore[attr-defined]
    return dict(live.flat())
