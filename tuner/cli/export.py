"""``ecntune export [STUDY]``: the winning settings as the commands an operator would run.

Formats (syntax from shared/reference/INDEX.md section 3):

* ``mlx5``: MLNX_OFED sysfs writes, ``echo N > /sys/class/net/<if>/ecn/roce_rp/<knob>``
  (``roce_np/`` for ``min_time_between_cnps``), per canary host; runtime only, as root;
* ``sonic``: ``sudo ecnconfig -p AZURE_LOSSLESS -gmin <bytes> -gmax <bytes> -gdrop <0-100>``
  (the profile must exist; ecnconfig validates the merged values, min < max);
* ``cumulus``: ``nv set qos congestion-control default-global traffic-class 3
  min-threshold|max-threshold|probability ...`` then ``nv config apply``.
"""

from __future__ import annotations

import click

from tuner.cli import handle_errors
from tuner.settings import NIC_KNOBS, SWITCH_KNOBS

NP_KNOBS = ("min_time_between_cnps",)  # ecn/roce_np/; every other NIC knob is in roce_rp/
FORMATS = ("mlx5", "sonic", "cumulus")


def _hosts(nics: list[str]) -> dict[str, list[str]]:
    """``{"host0": ["mlx5_0"]}`` from NIC target names ``host0/mlx5_0``."""
    out: dict[str, list[str]] = {}
    for n in nics:
        host, _, dev = n.partition("/")
        out.setdefault(host if dev else "<host>", []).append(dev or host)
    return out


def mlx5_commands(values: dict[str, int], nics: list[str], knobs: list[str]) -> list[str]:
    """Shell lines writing ``knobs`` (NIC ones) through the MLNX_OFED sysfs tree, per host."""
    chosen = [k for k in knobs if k in NIC_KNOBS]
    lines = ["# mlx5 DCQCN (MLNX_OFED sysfs, runtime: not persistent across reboot; as root)"]
    if not chosen:
        return [*lines, "# no NIC knob differs from the baseline"]
    for host, devs in _hosts(nics).items():
        lines.append(f"# on {host}")
        for dev in devs:
            lines.append(f"IF=$(ls /sys/class/infiniband/{dev}/device/net/ | head -n1)")
            for k in chosen:
                sub = "roce_np" if k in NP_KNOBS else "roce_rp"
                lines.append(f"echo {values[k]} > /sys/class/net/$IF/ecn/{sub}/{k}")
    return lines


def sonic_commands(values: dict[str, int], switches: list[str]) -> list[str]:
    lines = ["# SONiC WRED/ECN on the lossless queues (profile AZURE_LOSSLESS must exist)"]
    for sw in switches:
        lines.append(f"# on {sw}")
        lines.append(f"sudo ecnconfig -p AZURE_LOSSLESS -gmin {values['kmin_bytes']} "
                     f"-gmax {values['kmax_bytes']} -gdrop {values['pmax_percent']}")
    return lines


def cumulus_commands(values: dict[str, int], switches: list[str], tc: int = 3) -> list[str]:
    base = f"nv set qos congestion-control default-global traffic-class {tc}"
    lines = ["# Cumulus Linux NVUE ECN on the RoCE traffic class"]
    for sw in switches:
        lines += [f"# on {sw}", f"{base} min-threshold {values['kmin_bytes']}",
                  f"{base} max-threshold {values['kmax_bytes']}",
                  f"{base} probability {values['pmax_percent']}", f"{base} ecn enable",
                  "nv config apply"]
    return lines


def render(values: dict[str, int], baseline: dict[str, int], switches: list[str],
           nics: list[str], formats: tuple[str, ...] = FORMATS, only_changed: bool = True
           ) -> str:
    """The export text (pure; ``show``-independent so tests can pin it)."""
    knobs = [k for k in values if not only_changed or values[k] != baseline.get(k)]
    out: list[str] = []
    if "mlx5" in formats:
        out += mlx5_commands(values, nics, knobs)
    ecn_changed = any(k in SWITCH_KNOBS for k in knobs)
    if "sonic" in formats:
        out += [""] + (sonic_commands(values, switches) if ecn_changed or not only_changed
                       else ["# SONiC: ECN thresholds unchanged"])
    if "cumulus" in formats:
        out += [""] + (cumulus_commands(values, switches) if ecn_changed or not only_changed
                       else ["# Cumulus: ECN thresholds unchanged"])
    return "\n".join(out).strip("\n") + "\n"


@click.command("export")
@click.argument("study", metavar="[STUDY|RESULTS_DIR]", required=False)
@click.option("--trial", "trial_no", type=int, help="Trial to export (default: the best).")
@click.option("--format", "fmt", type=click.Choice(["all", *FORMATS]), default="all",
              show_default=True)
@click.option("--all-knobs", is_flag=True,
              help="Write every knob, not only those that differ from the baseline.")
@click.option("--storage", help="Optuna storage URL (default sqlite:///<results>/optuna.db).")
@click.option("--results", help="results_dir of the study (default: results).")
@click.option("--unconfirmed", is_flag=True,
              help="Without a confirmed winner, print the best candidate anyway.")
@click.option("--change-request", "change_request", type=click.Path(file_okay=False),
              help="Write change-request.md/.html for the confirmed winner into this folder "
                   "(docs/lifecycle.md).")
@click.option("--group", default="", help="With --change-request: the inventory group.")
@handle_errors
def command(study: str | None, trial_no: int | None, fmt: str, all_knobs: bool,
            storage: str | None, results: str | None, unconfirmed: bool,
            change_request: str | None, group: str) -> None:
    """Print STUDY's confirmed winner (default: newest study) as device commands; exit 3
    when nothing was confirmed (``--unconfirmed`` prints the best candidate anyway).

    Nothing is executed: review the lines, then run them on the hosts and switches named in
    the comments (the canary first).
    """
    if change_request is not None:
        from pathlib import Path

        from tuner.lifecycle import change_request as cr

        for path in cr.write(cr.from_study(study, storage, results, group),
                             Path(change_request)):
            click.echo(f"wrote {path}")
        return
    from tuner import optuna_io
    from tuner import study as studies
    from tuner.cli.resume import locate
    from tuner.errors import ConfigError, NoWinner

    url, study = locate(study, storage, results)
    names = optuna_io.study_names(url)
    if not names:
        raise ConfigError(f"no studies in {url}")
    st = optuna_io.load_study(study or names[-1], url)
    outcomes = {o.number: o for o in studies.outcomes(st)}
    base = studies.baseline(st)
    if trial_no is None:
        chosen = studies.winner(st)
        if chosen is None and unconfirmed:
            chosen = studies.best_unconfirmed(st)
        if chosen is None:
            raise NoWinner(f"study {st.study_name} has no confirmed winner: nothing beat the "
                           "baseline on paired repeats (see `ecntune show`). Keep the current "
                           "settings, or pass --unconfirmed to print the best candidate anyway")
    else:
        if trial_no not in outcomes:
            raise ConfigError(f"--trial: value {trial_no} -- study has trials "
                              f"0..{max(outcomes) if outcomes else -1}")
        chosen = outcomes[trial_no]
        if chosen.state != "COMPLETE":
            raise ConfigError(f"--trial: value {trial_no} -- trial is {chosen.state} "
                              f"({chosen.verdict}); only completed trials are safe to export")
    canary = st.user_attrs.get("canary", {})
    formats = FORMATS if fmt == "all" else (fmt,)
    click.echo(f"# study {st.study_name}, trial {chosen.number} ({chosen.verdict}, score "
               f"{chosen.score if chosen.score is not None else float('nan'):.4f})")
    click.echo(render(chosen.values, base.values if base else {}, canary.get("switches", []),
                      canary.get("nics", []), formats, only_changed=not all_knobs), nl=False)
