"""What a study will execute on the canary, as pre-flight prints it (``executes`` rows).

The lines come from the builders the measurement and the drivers use (``tuner.ssh.plan``,
``Driver.commands``), never from a second copy of their text: per host, the perftest servers
and clients of the background and the probe, its rails check, and on the launcher host the
nccl-tests runs (``env ... mpirun ... -x ... <nccl_tests_dir>/<op>_perf ...``); per device,
the read, the form of a write (the values are the trial's), the counter read, the lock check
and, with dead-man timers on, the timer's arm (its restore is the write back, in the form
above), renewal and disarm; marked ``sudo -n`` where the inventory runs that target under
sudo. Each line is what ``tuner.ssh.shell.wrap`` then wraps in its timeout (``timeout
--kill-after=5 T bash -c LINE``). Measurement lines are replicate 0's placement (other
replicates reorder ``-H`` and the probe pairs); the measured pass's ``-n`` is sized from the
timed pass at run time. URL credentials and values of variables named like a secret are shown
as ``<redacted>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tuner.ssh.placement import Placement, for_replicate
from tuner.ssh.plan import (
    background_flows,
    gpu_sets,
    nccl_command,
    probe_flows,
    unsupported,
)

if TYPE_CHECKING:
    from safety.preflight import CheckResult
    from tuner.inventory import Inventory
    from tuner.workload import Workload

SEP = " $ "  # between a row's role and its command line
_ASSIGN = re.compile(r"\b([A-Z_][A-Z0-9_]*)=([^\s']+)")


@dataclass(frozen=True)
class Line:
    """One command line a target will run: where, as whom, why."""

    host: str
    role: str
    command: str
    sudo: bool = False


def measurement_lines(inv: Inventory, workload: Workload, place: Placement | None = None
                      ) -> list[Line]:
    """The lines ``tuner.ssh.measure.run_measurement`` starts, in its order: background,
    collectives (timed pass, then measured pass, with a probe; one pass without), probes."""
    place = place or for_replicate(inv, 0)
    la = inv.launcher
    out: list[Line] = []
    for f in background_flows(inv, workload.background, float(workload.time_limit_s), place):
        out += [Line(f.server, f"background server, port {f.port}", f.server_cmd),
                Line(f.client, f"background client, port {f.port}", f.client_cmd)]
    parts = workload.collectives
    probe = workload.probes[0] if workload.probes else None
    gpus = gpu_sets(inv, len(parts))
    for p, g in zip(parts, gpus, strict=True):
        what = f"{p.op} {p.size_bytes} B"
        if probe is None:
            out.append(Line(la.host, what, nccl_command(inv, p, None, 1, place, g)))
            continue
        out += [Line(la.host, f"{what}, timed pass", nccl_command(inv, p, None, 1, place, g)),
                Line(la.host, f"{what}, measured pass (-n sized from the timed pass, at least "
                              f"{p.iterations})",
                     nccl_command(inv, p, None, la.nccl_cycles, place, g))]
    if probe is not None:
        for f in probe_flows(inv, probe, place):
            out += [Line(f.server, f"probe server, port {f.port}", f.server_cmd),
                    Line(f.client, f"probe client, port {f.port}", f.client_cmd)]
    return out


def rails_lines(inv: Inventory) -> list[Line]:
    """Per host, the read-only check of its rails against sysfs (``tuner.ssh.rails``), run
    once before anything is written; never under sudo."""
    from tuner.ssh import rails

    return [Line(h.name, "rails check against sysfs, read-only, before any write",
                 rails.command(h)) for h in inv.hosts]


def device_lines(inv: Inventory, drivers: dict[str, Any]) -> list[Line]:
    """Per device driver: its read, the form of its writes and its counter read."""
    where = _targets(inv)
    out = []
    for key, drv in drivers.items():
        host, sudo = where[key]
        cmds = drv.commands()
        for i, cmd in enumerate(cmds):
            role = ("read" if i == 0 else "counters" if i == len(cmds) - 1 and i > 1
                    else "write (form: the values are each trial's)")
            out.append(Line(host, f"{key} {role}", cmd, sudo))
    return out


def deadman_lines(inv: Inventory, drivers: dict[str, Any], cluster: Any) -> list[Line]:
    """Per device, the lock check and the commands of its dead-man timer
    (``tuner.cluster.deadman``, built by ``safety.deadman.DeadmanTimer``; the token in them is
    drawn per change)."""
    from safety.deadman import DeadmanTimer
    from tuner.cluster.deadman import NVUE_ROLLBACK
    from tuner.drivers.nvue import NvueDriver

    where = _targets(inv)
    out = []
    for key, drv in drivers.items():
        host, sudo = where[key]
        timer = DeadmanTimer.new(key, cluster.directory, cluster.who)
        nvue = isinstance(drv, NvueDriver) and cluster.nvue_confirm_s > 0
        restore = NVUE_ROLLBACK if nvue else drv.commands()[1]
        out.append(Line(host, f"{key} lock check, at the snapshot and before a change "
                              "(another tuner's change?)", timer.holder_command(), sudo))
        if cluster.timeout_s <= 0:  # `deadman_timeout_s: 0`: the locks, no timers
            continue
        out += [
            Line(host, f"{key} dead-man arm, before a trial's write (restores within "
                       f"{cluster.timeout_s:g} s unless renewed: "
                       f"{'NVUE rollback' if nvue else 'the write back, form as above'})",
                 timer.arm_command([restore], cluster.timeout_s), sudo),
            Line(host, f"{key} dead-man renew, every {cluster.renew_every_s:g} s",
                 timer.renew_command(cluster.timeout_s), sudo),
            Line(host, f"{key} dead-man disarm, once the restore is verified",
                 f"{timer.disarm_command()}; {timer.cleanup_command()}", sudo)]
    return out


def _targets(inv: Inventory) -> dict[str, tuple[str, bool]]:
    """Device key -> (the host or switch it runs on, whether under sudo)."""
    where = {r.nic: (h.name, h.sudo) for h in inv.hosts for r in h.rail_entries()}
    where.update({s.name: (s.name, s.sudo) for s in inv.switches})
    return where


def shown(command: str) -> str:
    """``command`` with URL credentials and secret-named variables' values redacted."""
    from tuner.tracking import REDACTED, SECRET_KEY, scrub

    return _ASSIGN.sub(lambda m: f"{m[1]}={REDACTED}" if SECRET_KEY.search(m[1]) else m[0],
                       scrub(command))


def rows(lines: list[Line]) -> list[CheckResult]:
    from safety.preflight import CheckResult

    return [CheckResult(check="executes",
                        target=f"{ln.host} ({'sudo -n' if ln.sudo else 'login user'})",
                        status="pass", evidence=f"{ln.role}{SEP}{shown(ln.command)}")
            for ln in lines]


def plan_checks(exp: object, cluster: object) -> list[CheckResult]:
    """Pre-flight ``executes`` rows of an SSH canary (nothing for the simulator)."""
    inner: Any = getattr(cluster, "inner", cluster)
    inv = getattr(inner, "inventory", None)
    workload = getattr(exp, "workload", None)
    if inv is None or workload is None:
        return []
    from safety.preflight import CheckResult
    from tuner.cluster.deadman import DeadmanCluster
    from tuner.errors import TunerError

    lines: list[Line] = []
    try:  # a workload the backend cannot generate fails pre-flight in ``workload`` already
        lines += measurement_lines(inv, workload) if not unsupported(inv, workload) else []
        lines += rails_lines(inv) + device_lines(inv, inner.drivers())
        if isinstance(cluster, DeadmanCluster):
            lines += deadman_lines(inv, inner.drivers(), cluster)
    except TunerError as exc:
        return [*rows(lines), CheckResult(check="executes", target="ssh", status="warn",
                                          evidence=f"not every command is listed: {exc}")]
    return rows(lines)
