"""``ecntune calibrate EXPERIMENT``: the twin fitted to the canary (tuner/calibrate.py).

Reads the canary switches' buffer configuration and measures the canary as it is
(``--replicates`` paired placements; nothing is applied, the results folder is locked as for
a run), takes what the switches report, fits what they do not on the twin against the
measured baseline, prints both and the residuals, and writes
``<results_dir>/twin-calibration.json``. ``ecntune run`` then builds the screen's and the twin
search's twin with those values (recorded with the study and in MLflow).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from tuner.cli import handle_errors

NAMES = {"busbw_gbytes_per_s": "busbw GB/s", "p50_us": "probe p50 µs", "p99_us": "probe p99 µs",
         "marks_per_s": "ECN marks/s", "pause_us_per_s": "PFC pause µs/s"}


@click.command("calibrate")
@click.argument("experiment", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--replicates", default=3, show_default=True, type=click.IntRange(1, 20),
              help="Placements the canary's baseline (and the twin) is measured on.")
@handle_errors
def command(experiment: Path, replicates: int) -> None:
    """Fit the twin (screen.fabric) to the canary's measured baseline; read-only."""
    from safety.lock import hold
    from tuner import calibrate as cal
    from tuner.cluster import build_cluster
    from tuner.cluster.sim import SimCluster
    from tuner.errors import ConfigError
    from tuner.experiment import load_experiment
    from tuner.input_checks import check_inputs, with_source

    source = str(experiment)
    exp = load_experiment(experiment)
    check_inputs(exp, source)
    prio = exp.safety.roce_priority

    def twin(values: dict[str, Any]) -> SimCluster:
        return SimCluster(cal.with_values(spec, values), switches, dict(exp.current),
                          name="twin", field=field)

    try:  # a twin that cannot be built fails here, before the canary is measured
        spec = cal.twin_spec(exp)
        switches, field = cal.twin_canary(exp)
        twin({})
    except ConfigError as exc:
        raise with_source(exc, source) from None
    with hold(exp.results_path, "calibrate"):
        ssh = exp.fabric.backend == "ssh"
        with build_cluster(exp, source) as cluster:
            facts = cluster.describe().facts
            inner: Any = getattr(cluster, "inner", cluster)  # the SSH cluster in its dead-man
            nics, uplinks = (inner.nic_speeds(), inner.uplink_speeds()) if ssh else ({}, {})
            canary = [cluster.measure(exp.workload, replicate=r) for r in range(replicates)]
        measured = cal.metrics(canary, prio)
        # what the gear reports replaces the declaration
        readings: list[tuple[Mapping[str, float], str]] = [
            cal.reported(facts),
            cal.link_speed("nic_gbps", nics, "NIC", "ethtool Speed"),
            cal.link_speed("uplink_gbps", uplinks, "uplink", "CONFIG_DB PORT speed"),
        ] if ssh else []
        taken: dict[str, float] = {}
        origin: dict[str, str] = {}
        notes: list[str] = []
        for values, where in readings:
            taken.update(values)
            origin.update(dict.fromkeys(values, where))
            if where and not values:  # read, but not taken: say why
                notes.append(where)
        source = "; ".join(dict.fromkeys(origin.values()))

        def simulate(values: dict[str, float]) -> cal.Metrics:
            t = twin({k: type(getattr(spec.topology, k))(v) for k, v in values.items()})
            return cal.metrics([t.measure(exp.workload, replicate=r) for r in range(replicates)],
                               prio)

        declared = {k: getattr(spec.topology, k) for k in sorted({*taken, *cal.FREE})}
        free = {k: span for k, span in cal.FREE.items() if k not in taken}
        bounds = {k: cal.field_bounds(type(spec.topology), k) for k in free}
        f = replace(cal.fit(simulate, measured, {**declared, **taken}, free, bounds=bounds),
                    declared=declared, taken=dict(taken), source=source,
                    twin_declared=simulate(declared))
        bad = cal.problems(spec, f.overrides())
        if bad:  # a reading past what the twin takes: run would refuse the file
            raise ConfigError(f"{experiment}: the twin cannot take the calibration ({bad}); "
                              "nothing was saved")
        path = cal.save(exp.results_path, f, exp.name)
    click.echo(f"twin fitted to the canary's baseline ({replicates} placements, "
               f"{f.evaluations + 1} twin runs)")
    click.echo(f"  {'parameter':<16}{'declared':>14}{'now':>14}{'factor':>9}   from")
    for k, v in f.overrides().items():
        how = (f"the canary: {origin[k]}" if k in taken
               else "kept as declared: no measured metric moves with it"
               if k in f.unidentified else "fitted to the measurements")
        click.echo(f"  {k:<16}{_value(declared[k]):>14}{_value(v):>14}"
                   f"{_factor(k, v, declared[k]):>9}   {how}")
    click.echo(f"  {'metric':<16}{'canary':>12}{'twin declared':>15}{'twin fitted':>13}"
               "   residual ln(twin/canary) declared -> fitted")
    before, after = f.residuals_declared, f.residuals_fitted
    for k, name in NAMES.items():
        if k not in measured:
            continue
        res = (f"{before[k]:+.2f} -> {after[k]:+.2f}" if k in before and k in after
               else "(at its floor on both: not fitted)")
        click.echo(f"  {name:<16}{measured[k]:>12.3g}{f.twin_declared.get(k, 0):>15.3g}"
                   f"{f.twin_fitted.get(k, 0):>13.3g}   {res}")
    click.echo("  (each side raised to its metric's floor first, so that 0 compares: "
               + ", ".join(_floor(NAMES[k], cal.FLOORS[k]) for k in NAMES) + ")")
    for note in notes:
        click.echo(f"  note: {note}")
    click.echo(f"written to {path}; `ecntune run` builds the twin with the fitted values")


def _floor(name: str, floor: float) -> str:
    """"busbw GB/s", 0.01 -> "busbw 0.01 GB/s"."""
    what, unit = name.rsplit(" ", 1)
    return f"{what} {floor:g} {unit}"


def _value(v: float) -> str:
    """Whole quantities (bytes, µs of delay) as written in the experiment file."""
    return f"{v:,.0f}" if float(v).is_integer() else f"{v:g}"


def _factor(key: str, now: float, declared: float) -> str:
    """A ratio for sizes; ``pfc_alpha_log2`` is already a log."""
    return f"{now / declared:.2f}x" if key != "pfc_alpha_log2" and declared > 0 else "-"
