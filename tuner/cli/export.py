"""``ecntune export [STUDY]``: the winning settings as the commands an operator would run.

The commands are the drivers' own (``tuner.drivers``): the same min < max-safe order, the same
paths and names. With an SSH study the inventory (from the study's experiment) decides each
target: a switch gets its own platform's commands for its ``wred_profile`` (SONiC) or
``default-global`` (NVUE) and its ``lossless_queue``; a host gets the files of its ``nic_layout``
(OFED sysfs or upstream debugfs). Without an inventory (a simulated study) ``--format`` picks
the platforms and the defaults are used (``AZURE_LOSSLESS``, traffic class 3, OFED sysfs).

Formats, one name each (the inventory's names): ``mlx5`` (DCQCN files of the host's layout,
runtime only, as root), ``sonic`` (the host-facing ports' lossless queue bound to their own
WRED profile, written whole by one ``sonic-db-cli HSET``; the production profile and the
uplinks are left alone: the study tuned the host-facing role only), ``nvue`` (the host-facing
ports bound to their own congestion-control profile, ``nv set interface <swp> qos
congestion-control profile <name>``, then ``nv config apply``; ``default-global``, which every
other port uses, uplinks included, is left alone).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from tuner.cli import handle_errors
from tuner.settings import NIC_KNOBS, SWITCH_KNOBS, EcnSettings

if TYPE_CHECKING:
    from tuner.inventory import HostEntry, Inventory
    from tuner.study import TrialOutcome

NP_KNOBS = ("min_time_between_cnps",)  # ecn/roce_np/; every other NIC knob is in roce_rp/
FORMATS = ("mlx5", "sonic", "nvue")


@dataclass(frozen=True)
class SwitchTarget:
    """A switch as export sees it: ``platform`` None when no inventory says (sim study).

    ``ports`` are its host-facing ports (the inventory's canary and other ports): the role the
    study tuned. ``role_profile`` is the profile they get; every other port (uplinks
    included) keeps ``profile``."""

    name: str
    platform: str | None = None
    profile: str = "AZURE_LOSSLESS"
    queue: int = 3
    ports: tuple[str, ...] = ()
    role_profile: str = "ECNTUNE_CANARY"


def _hosts(nics: list[str]) -> dict[str, list[str]]:
    """``{"host0": ["mlx5_0"]}`` from NIC target names ``host0/mlx5_0``."""
    out: dict[str, list[str]] = {}
    for n in nics:
        host, _, dev = n.partition("/")
        out.setdefault(host if dev else "<host>", []).append(dev or host)
    return out


def _mlx5_host(entry: HostEntry, values: dict[str, int], chosen: list[str]) -> list[str]:
    """The driver's files for the host's layout (both, behind the driver's detection, when the
    inventory says ``auto``)."""
    from tuner.drivers import NIC_LAYOUTS, detect_command

    layouts = list(NIC_LAYOUTS) if entry.nic_layout == "auto" else [entry.nic_layout]
    out = [f"# on {entry.name} ({entry.rdma_device}, {entry.nic_layout} layout)"]
    if len(layouts) > 1:
        out.append(f"LAYOUT=$({detect_command(entry)})")
    for layout in layouts:
        drv = NIC_LAYOUTS[layout](None, entry)  # type: ignore[arg-type]
        lines = [f"printf '%s\\n' {int(values[k])} > "
                 f"{shlex.quote(drv.folder() + '/' + drv.names[k])}" for k in chosen]
        if len(layouts) > 1:
            out += [f'if [ "$LAYOUT" = {layout} ]; then', *("  " + ln for ln in lines), "fi"]
        else:
            out += lines
    return out


def mlx5_commands(values: dict[str, int], nics: list[str], knobs: list[str],
                  hosts: list[HostEntry] | None = None) -> list[str]:
    """Shell lines writing ``knobs`` (NIC ones), per host, in the files of its layout."""
    chosen = [k for k in NIC_KNOBS if k in knobs]
    lines = ["# mlx5 DCQCN (runtime: not persistent across reboot; as root)"]
    if not chosen:
        return [*lines, "# no NIC knob differs from the baseline"]
    if hosts:
        for entry in hosts:
            lines += _mlx5_host(entry, values, chosen)
        return lines
    for host, devs in _hosts(nics).items():  # no inventory: MLNX_OFED sysfs
        lines.append(f"# on {host}")
        for dev in devs:
            lines.append(f"IF=$(ls /sys/class/infiniband/{dev}/device/net/ | head -n1)")
            for k in chosen:
                sub = "roce_np" if k in NP_KNOBS else "roce_rp"
                lines.append(f"echo {values[k]} > /sys/class/net/$IF/ecn/{sub}/{k}")
    return lines


def _ecn(values: dict[str, int]) -> EcnSettings:
    return EcnSettings(kmin_bytes=int(values["kmin_bytes"]), kmax_bytes=int(values["kmax_bytes"]),
                       pmax_percent=int(values["pmax_percent"]))


def _ports_line(sw: SwitchTarget, example: str = "Ethernet0 Ethernet4") -> str:
    """``HOST_PORTS`` from the inventory, or a line that stops the script until it is set."""
    from tuner.ssh.shell import check

    if sw.ports:
        return "HOST_PORTS=" + shlex.quote(" ".join(check("switch_port", p) for p in sw.ports))
    return (': "${HOST_PORTS:?set HOST_PORTS to the host-facing ports of this switch, e.g. '
            f"'{example}' (uplinks excluded)}}\"")


def sonic_commands(values: dict[str, int], baseline: dict[str, int], sw: SwitchTarget,
                   back_out: bool = False) -> list[str]:
    """The host-facing ports' lossless queue gets its own WRED profile (``role_profile``: the
    stock field set of ``profile`` with the winner's thresholds, written in one ``HSET``, so
    min < max holds throughout); every other port, uplinks included, keeps ``profile``.
    ``back_out`` (the change request's way back) rebinds ``profile`` and drops the copy."""
    from tuner.drivers.sonic import DB, stock_profile
    from tuner.ssh.shell import q

    target = _ecn(values)
    if not back_out and baseline and target == _ecn(baseline):
        return [f"# on {sw.name}: ECN unchanged"]
    queue, role = int(sw.queue), q("wred_profile", sw.role_profile)
    key = q("db_key", f"WRED_PROFILE|{sw.role_profile}")

    def bind(name: str) -> str:
        return (f'for p in $HOST_PORTS; do sudo {DB} HSET "QUEUE|$p|{queue}" wred_profile '
                f"{name}; done")

    if back_out:
        return [f"# on {sw.name}: the host-facing ports' lossless queue {queue} back to WRED "
                f"profile {sw.profile}; {sw.role_profile} removed", _ports_line(sw),
                bind(q("wred_profile", sw.profile)), f"sudo {DB} DEL {key}"]
    fields = " ".join(f"{q('db_field', k)} {q('db_value', v)}"
                      for k, v in stock_profile(target).items())
    return [f"# on {sw.name}: WRED profile {sw.role_profile} (the stock AZURE_LOSSLESS fields, "
            f"every colour alike, with the new thresholds) on the lossless queue {queue} of the "
            f"host-facing ports only; every other port, uplinks included, keeps {sw.profile}",
            _ports_line(sw), f"sudo {DB} HSET {key} {fields}", bind(role)]


def nvue_commands(values: dict[str, int], baseline: dict[str, int], sw: SwitchTarget,
                  back_out: bool = False) -> list[str]:
    """The host-facing ports get their own congestion-control profile (``role_profile``),
    as the NVUE driver gives the canary ports: it replaces default-global on those ports, so
    it carries default-global's other traffic classes (NVUE's factory TC 0 row here: an
    export is text, not a read of the switch), with the winner's thresholds on the tuned
    class; every other port, uplinks included, keeps default-global, which is never written.
    ``back_out`` unbinds the ports and removes the profile."""
    from tuner.drivers.nvue import GLOBAL, clone_rows, clone_steps, nv_set_steps
    from tuner.ssh.shell import q

    target = _ecn(values)
    if not back_out and baseline and target == _ecn(baseline):
        return [f"# on {sw.name}: ECN unchanged"]
    role = q("wred_profile", sw.role_profile)
    ports = _ports_line(sw, "swp1 swp2")
    if back_out:
        return [f"# on {sw.name}: the host-facing ports back to default-global; "
                f"{sw.role_profile} removed", ports,
                'for p in $HOST_PORTS; do nv unset interface "$p" qos congestion-control; '
                "done", f"nv unset qos congestion-control {role}", "nv config apply"]
    start = _ecn(baseline) if baseline else target
    return [f"# on {sw.name}: congestion-control profile {sw.role_profile} on the host-facing "
            f"ports only, traffic-class {sw.queue} with the new thresholds; every other port, "
            "uplinks included, keeps default-global, which is not written",
            f"# {sw.role_profile} replaces default-global on these ports, so it carries "
            "default-global's other classes: NVUE's factory TC 0 below; copy any other class "
            "this switch's default-global sets (nv show qos congestion-control default-global)",
            ports, *clone_steps(sw.role_profile, clone_rows(sw.name, {}, GLOBAL, sw.queue)),
            *nv_set_steps(sw.role_profile, sw.queue, start, target),
            f'for p in $HOST_PORTS; do nv set interface "$p" qos congestion-control profile '
            f"{role}; done", "nv config apply"]


def render(values: dict[str, int], baseline: dict[str, int], switches: list[Any],
           nics: list[str], formats: tuple[str, ...] = FORMATS, only_changed: bool = True,
           hosts: list[HostEntry] | None = None, back_out: bool = False) -> str:
    """The export text (pure). ``switches``: names or ``SwitchTarget``s; a switch whose
    platform is known gets only that platform's commands. ``back_out``: ``values`` are the
    baseline the switches return to (the change request's way back)."""
    knobs = [k for k in values if not only_changed or values[k] != baseline.get(k)]
    targets = [s if isinstance(s, SwitchTarget) else SwitchTarget(s) for s in switches]
    out: list[str] = []
    if "mlx5" in formats:
        out += mlx5_commands(values, nics, knobs, hosts)
    ecn_changed = any(k in SWITCH_KNOBS for k in knobs)
    for fmt, title in (("sonic", "SONiC WRED/ECN of the host-facing ports (sonic-db-cli)"),
                       ("nvue", "Cumulus Linux NVUE ECN of the host-facing ports")):
        mine = [t for t in targets if t.platform in (None, fmt)]
        if fmt not in formats or not mine:
            continue
        out += ["", f"# {title}"]
        if not ecn_changed:
            out.append("# ECN thresholds unchanged")
            continue
        for sw in mine:
            out += (sonic_commands(values, baseline, sw, back_out) if fmt == "sonic"
                    else nvue_commands(values, baseline, sw, back_out))
    return "\n".join(out).strip("\n") + "\n"


def inventory_of(experiment_yaml: str | None) -> Inventory | None:
    """The SSH inventory of the study's experiment, if it has one and it can be read now."""
    import yaml

    from tuner.errors import ConfigError
    from tuner.inventory import load_inventory, parse_inventory

    try:
        fabric = (yaml.safe_load(experiment_yaml or "") or {}).get("fabric") or {}
    except yaml.YAMLError:
        return None
    if fabric.get("backend") != "ssh":
        return None
    try:
        if fabric.get("inventory_file"):
            path = os.path.expandvars(os.path.expanduser(str(fabric["inventory_file"])))
            return None if "$" in path else load_inventory(path)
        return parse_inventory(fabric.get("inventory"), "fabric.inventory")
    except ConfigError:
        return None


def _why(st: Any, o: TrialOutcome) -> str:
    """``verdict (detail)`` of a trial, its stored detail without the verdict's own code."""
    from tuner import optuna_io, study_store

    t = next(t for t in optuna_io.trials(st) if t.number == o.number)
    detail = study_store.tags(t).detail.removeprefix(
        o.verdict.partition(":")[2] + ": ")
    return f"{o.verdict} ({detail})" if detail else o.verdict


def _not_confirmed(st: Any, o: TrialOutcome) -> str:
    """Why ``o`` (completed, feasible, not the winner) is not the confirmed winner."""
    from tuner import study as studies

    conf = studies.confirmation(st)
    if conf is None:
        return "was not confirmed: no confirmation ran (interrupted study, or " \
               "budget.confirm_repeats 0)"
    check = next((c for c in conf.candidates if c.trial == o.number), None)
    if check is None:
        ran = ", ".join(str(c.trial) for c in conf.candidates) or "none"
        return f"was not among the confirmed candidates (re-measured: trials {ran})"
    if check.confirmed:
        return "was confirmed but is not the winner (another confirmed trial did better)"
    return "was not confirmed: " + (f"{check.problem} on its confirmation repeats"
                                    if check.problem else "its paired change on the "
                                    "confirmation's placements was not clearly above 0")


def gate(st: Any, o: TrialOutcome, unconfirmed: bool) -> str:
    """Whether trial ``o`` of study ``st`` may be exported: ``""`` for the confirmed winner, a
    warning for what ``--unconfirmed`` lets through, ``NoWinner`` (exit 3) otherwise.

    The baseline and any trial that did not complete (rejected, screened, rolled back, pruned,
    failed) are refused even with ``--unconfirmed``: they were never applied or never measured
    to the end within the limits, so there is no evidence they are even safe. An infeasible
    trial completed but broke a guardrail: ``--unconfirmed`` exports it with that named.
    """
    from tuner import study as studies
    from tuner.errors import NoWinner

    n = o.number
    if o.is_baseline:
        raise NoWinner(f"trial {n} is the baseline (what the canary held before the study): "
                       "nothing to change; export the confirmed winner (no --trial)")
    if o.state != "COMPLETE":
        raise NoWinner(f"trial {n} is {_why(st, o)} and did not complete ({o.state}): it "
                       "was never measured to the end within the limits, so it is not "
                       "exported, not even with --unconfirmed")
    win = studies.winner(st)
    if win is not None and win.number == n and o.feasible:
        return ""
    if not o.feasible:
        broken = ", ".join(k for k, v in o.constraints.items() if v > 0)
        reason = (f"trial {n} is {_why(st, o)}: it broke the {broken} "
                  f"guardrail{'s' if ', ' in broken else ''} on its own measurements")
    else:
        reason = f"trial {n} {_not_confirmed(st, o)}"
    if not unconfirmed:
        raise NoWinner(f"{reason}; pass --unconfirmed to export it anyway")
    return f"{reason}; exported because of --unconfirmed: review before use"


@click.command("export")
@click.argument("study", metavar="[STUDY|RESULTS_DIR]", required=False)
@click.option("--trial", "trial_no", type=int,
              help="Trial to export (default: the confirmed winner); another trial needs "
                   "--unconfirmed.")
@click.option("--format", "fmt", type=click.Choice(["all", *FORMATS]), default="all",
              show_default=True,
              help="mlx5 (host DCQCN files), sonic (ecnconfig), nvue (nv set); with an SSH "
                   "inventory each target gets its own platform's lines only.")
@click.option("--all-knobs", is_flag=True,
              help="Write every NIC (mlx5) knob, not only those that differ from the "
                   "baseline, and the switch ECN commands even when the thresholds are "
                   "unchanged (switch commands always carry the whole ECN profile).")
@click.option("--storage", help="Optuna storage URL (default sqlite:///<results>/optuna.db).")
@click.option("--results", help="results_dir of the study (default: results).")
@click.option("--unconfirmed", is_flag=True,
              help="Export a completed trial that is not the confirmed winner (default: the "
                   "best candidate), marked UNCONFIRMED. Never the baseline or a trial that "
                   "did not complete.")
@click.option("--change-request", "change_request", type=click.Path(file_okay=False),
              help="Write change-request.md/.html for the confirmed winner into this folder "
                   "(docs/lifecycle.md).")
@click.option("--group", default="", help="With --change-request: the inventory group.")
@handle_errors
def command(study: str | None, trial_no: int | None, fmt: str, all_knobs: bool,
            storage: str | None, results: str | None, unconfirmed: bool,
            change_request: str | None, group: str) -> None:
    """Print STUDY's confirmed winner (default: newest study) as device commands; exit 3
    when nothing was confirmed or --trial names another trial (``--unconfirmed`` exports a
    completed, non-baseline one anyway, marked UNCONFIRMED; see ``gate``).

    Nothing is executed: review the lines, then run them on the hosts and switches named in
    the comments (the canary first).
    """
    from tuner.errors import ConfigError

    if change_request is not None:
        from pathlib import Path

        from tuner.lifecycle import change_request as cr

        if trial_no is not None or unconfirmed:  # it is the confirmed winner's, never another's
            raise ConfigError("--change-request writes the confirmed winner's request: drop "
                              "--trial and --unconfirmed")

        for path in cr.write(cr.from_study(study, storage, results, group),
                             Path(change_request)):
            click.echo(f"wrote {path}")
        return
    from tuner import optuna_io, study_store
    from tuner import study as studies
    from tuner.cli.resume import locate
    from tuner.errors import NoWinner

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
    warning = gate(st, chosen, unconfirmed)
    if warning:
        click.echo(f"ecntune export: WARNING: {warning}", err=True)
    canary = study_store.info(st).canary
    formats = FORMATS if fmt == "all" else (fmt,)
    inv = inventory_of(study_store.info(st).experiment_yaml)
    switches: list[Any] = list(canary.get("switches", []))
    hosts = None
    if inv is not None:
        switches = [SwitchTarget(s.name, s.platform, s.wred_profile, s.lossless_queue,
                                 (*s.canary_ports, *s.other_ports), s.canary_profile)
                    for s in inv.switches]
        hosts = list(inv.hosts)
    if warning:  # in the commands file too: whoever runs it later must see it
        click.echo(f"# UNCONFIRMED: {warning}")
    click.echo(f"# study {st.study_name}, trial {chosen.number} ({chosen.verdict}, score "
               f"{chosen.score if chosen.score is not None else float('nan'):.4f})"
               + ("" if inv is not None else "; no SSH inventory: default names"))
    click.echo(render(chosen.values, base.values if base else {}, switches,
                      canary.get("nics", []), formats, only_changed=not all_knobs,
                      hosts=hosts), nl=False)
