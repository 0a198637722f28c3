"""Every command the SSH backend would run for an inventory, target by target.

``python -m tuner.ssh.catalog INVENTORY.yaml`` prints them (Markdown) so an operator can read,
before anything runs, exactly what the tool will execute on each host and switch and whether
under ``sudo -n``. Example values stand in for what a study decides (the knob values written;
the message sizes of the workload). docs/real-cluster.md shows this output for its example
inventory, and a test keeps the two in step.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from tuner.drivers import NIC_LAYOUTS, NvueDriver, SonicDriver, detect_command, switch_driver
from tuner.drivers._sonic_reload import QOS_TEMPLATE, render_command
from tuner.drivers.nvue import CONFIRM_YES, REVISIONS
from tuner.drivers.sonic import CNP_WATERMARK, show
from tuner.inventory import Inventory, load_inventory
from tuner.settings import DcqcnSettings, EcnSettings
from tuner.ssh.exec_trust import probe_command, resolve_command
from tuner.ssh.plan import background_flows, binary_path, gpu_sets, nccl_command, probe_flows
from tuner.ssh.rails import command as rails_command
from tuner.ssh.shell import wrap
from tuner.workload import BackgroundPart, CollectivePart, ProbePart

LOW = EcnSettings(kmin_bytes=100_000, kmax_bytes=400_000, pmax_percent=10)
TUNED = DcqcnSettings(rpg_time_reset=150, rpg_ai_rate=10, min_time_between_cnps=4)
# Measurement processes and NIC counter reads never run under sudo (tuner/ssh/measure.py
# ``_Run.start``, tuner/drivers/_mlx5.py ``counters``): sudo is for device settings and switches.
UNPRIVILEGED = False
EXAMPLE_OPS = ("all_reduce", "alltoall")  # the example measurement's collectives


@dataclass(frozen=True)
class Planned:
    """One command for one target: what it is for, the command, and how it is sent."""

    target: str
    purpose: str
    command: str
    sudo: bool

    def wire(self, timeout_s: float) -> str:
        """The exact line sent over SSH (``timeout`` wrapper, ``sudo -n`` if asked)."""
        return wrap(self.command, timeout_s, sudo=self.sudo)


def _preflight(h: object) -> str:
    from tuner.preflight_facts import host_command

    return host_command(h)  # type: ignore[arg-type]


def _nvue_confirm(sw: NvueDriver, name: str, sudo: bool) -> list[Planned]:
    """NVUE's commit-confirm around a trial (``safety.nvue_confirm_s``, default 600 s)."""
    sw.confirm_s = 600
    trial = sw.write_command(EcnSettings(), LOW)
    sw.confirm_s, sw.confirm_base = None, EcnSettings()
    back = sw.write_command(LOW, EcnSettings())
    sw.confirm_base = None
    return [
        Planned(name, "a trial's write (dead-man timers on): as above, applied with NVUE's "
                "commit-confirm (example values)", trial, sudo),
        Planned(name, "after every measurement of a trial: is the apply still waiting for "
                "confirmation (state `confirm`)?", REVISIONS, sudo),
        Planned(name, "put a trial back: NVUE's own rollback, the plain write only if nothing "
                "waits any more", back, sudo),
        Planned(name, "keep a winner (`--keep-best`, at the end)", CONFIRM_YES, sudo),
    ]


def catalog(inv: Inventory) -> list[Planned]:
    """The commands of detect/read/write/counters per target and of one measurement."""
    out: list[Planned] = []
    for host in inv.hosts:
        out.append(Planned(host.name, "check the rails against sysfs, read-only (once, before "
                           "any write): each device exists, owns its netdev; its PCI function "
                           "and the GID index (RoCE v2) of its data address",
                           rails_command(host), UNPRIVILEGED))
        out.append(Planned(host.name, "pre-flight facts, read-only (`ecntune preflight`, start "
                           "of `ecntune run`; each tool may fail alone)", _preflight(host),
                           host.sudo))
        out.append(Planned(host.name, "pre-flight, read-only (executables): who could change "
                           "the nccl-tests binaries the workload runs (example: all_reduce, "
                           "alltoall): the login user's uid, owner and mode of each binary and "
                           "every directory up to /, where each resolves to",
                           probe_command([binary_path(inv, op) for op in EXAMPLE_OPS]),
                           UNPRIVILEGED))
        programs = [inv.launcher.mpirun.split()[0], inv.launcher.perftest_bin,
                    inv.launcher.bw_bin]
        out.append(Planned(host.name, "pre-flight, read-only (executables): where the login "
                           "user's PATH finds the programs a measurement runs by name (then "
                           "`stat` as above of each, and of the PATH entries searched before it)",
                           resolve_command([p for p in programs if "/" not in p]),
                           UNPRIVILEGED))
        for h in host.rail_entries():
            layouts = list(NIC_LAYOUTS) if h.nic_layout == "auto" else [h.nic_layout]
            rail = f"{h.rdma_device} " if host.rails else ""
            if not h.pci:  # a rail without pci: the rails check reads it before any of these
                out.append(Planned(h.name, f"{rail}PCI address not in the inventory", "# "
                                   "detect and the debugfs layout use the PCI function the "
                                   "rails check read", h.sudo))
                layouts = [lay for lay in layouts if lay != "debugfs"]
            elif h.nic_layout == "auto":
                out.append(Planned(h.name, f"{rail}detect the mlx5 layout (once per "
                                   "connection)", detect_command(h), h.sudo))
            for layout in layouts:
                drv = NIC_LAYOUTS[layout](None, h)  # type: ignore[arg-type]
                tag = f"{rail}[{layout}] "
                out += [
                    Planned(h.name, tag + "read DCQCN (snapshot, read-back)",
                            drv.read_command(), h.sudo),
                    Planned(h.name, tag + "write DCQCN: state before, the knobs that differ "
                            "(example: 3 knobs), read-back", drv.write_command(DcqcnSettings(),
                                                                                TUNED), h.sudo),
                    Planned(h.name, tag + "counters (ethtool -S + hw_counters)",
                            drv.counters_command(), UNPRIVILEGED),
                ]
    for s in inv.switches:
        sw = switch_driver(None, s)  # type: ignore[arg-type]
        out += [
            Planned(s.name, "pre-flight and describe(), read-only: QoS configuration (blast "
                    "radius, CNP queue; SONiC: the RoCE DSCP's queue, ECN counter "
                    "capability), PFC threshold, counter polling", sw.facts_command(),
                    s.sudo),
            Planned(s.name, "read ECN (snapshot, read-back)", sw.read_command(), s.sudo),
            Planned(s.name, "write ECN, lowering thresholds (example values)",
                    sw.write_command(EcnSettings(), LOW), s.sudo),
            Planned(s.name, "write ECN, raising thresholds (example values)",
                    sw.write_command(LOW, EcnSettings()), s.sudo),
        ]
        if isinstance(sw, SonicDriver):
            out.append(Planned(s.name, "pre-flight, read-only (pfc_priority): the ports' "
                               "lossless priorities", show("show pfc priority"), s.sudo))
            out += [Planned(s.name, "counters (the four run at once, one channel each)", cmd,
                            s.sudo) for cmd in sw.counters_commands()]
            out.append(Planned(s.name, "pre-flight, read-only (qos_reload): what `config qos "
                               "reload` / `config load_minigraph` would write back, the HWSKU's "
                               "qos.json.j2 (named by CONFIG_DB DEVICE_METADATA|localhost; "
                               "example platform and HWSKU) rendered to stdout", render_command(
                                   QOS_TEMPLATE.format(platform="x86_64-mlnx_msn2700-r0",
                                                       hwsku="ACS-MSN2700")), s.sudo))
            out.append(Planned(s.name, "after the baseline: the CNP queue's watermark "
                               "(cnp_starvation)", CNP_WATERMARK, s.sudo))
            out.append(Planned(s.name, "only with `ecntune preflight --enable-counters`: poll "
                               "the WRED/ECN queue counters", sw.enable_counters_command(),
                               s.sudo))
        else:
            out.append(Planned(s.name, "counters", sw.counters_command(), s.sudo))
            out += _nvue_confirm(sw, s.name, s.sudo)
    la = inv.launcher
    parts = [CollectivePart(op="all_reduce", size_bytes=4_194_304, iterations=5),
             CollectivePart(op="alltoall", size_bytes=1_048_576, iterations=5)]
    probe = ProbePart(size_bytes=64, pairs=2, interval_us=50)
    for flow in background_flows(inv, [BackgroundPart(pattern="incast", load=0.3, fan_in=1)],
                                 600):
        out.append(Planned(flow.server, "background flow server (example: incast at 30 % of "
                           "line rate; runs through the measurement, stopped at its end)",
                           flow.server_cmd, UNPRIVILEGED))
        out.append(Planned(flow.client, "background flow client", flow.client_cmd, UNPRIVILEGED))
    gpus = gpu_sets(inv, len(parts))
    for i, part in enumerate(parts):
        out.append(Planned(la.host, f"nccl-tests part {i}, timed pass (example workload: "
                           "all_reduce 4 MiB and alltoall 1 MiB, started at once, each on its "
                           "own GPUs: CUDA_VISIBLE_DEVICES); started with `echo $$; exec ...` "
                           "so it can be stopped",
                           nccl_command(inv, part, gpus=gpus[i]), UNPRIVILEGED))
    for i, part in enumerate(parts):
        out.append(Planned(la.host, f"nccl-tests part {i}, measured pass: `-n` sized from the "
                           f"timed pass (example: 2000), `-N {la.nccl_cycles}` result rows",
                           nccl_command(inv, part, 2000, la.nccl_cycles, gpus=gpus[i]),
                           UNPRIVILEGED))
    for flow in probe_flows(inv, probe):
        out.append(Planned(flow.server, "latency probe server (example: 2 pairs, one sample "
                           "every 50 µs; pair k on rail k of both hosts, `-x` the GID index "
                           "read from sysfs), started once every part printed a row",
                           flow.server_cmd, UNPRIVILEGED))
        out.append(Planned(flow.client, "latency probe client", flow.client_cmd, UNPRIVILEGED))
    out.append(Planned("(any measurement host)", "stop a measurement process on a safety "
                       "abort or at the end (PID printed by `echo $$`)",
                       "kill -TERM <pid> 2>/dev/null || true", UNPRIVILEGED))
    return out


def render(inv: Inventory) -> str:
    """Markdown: targets with the same commands share one list; each command as run remotely.

    Every line is sent as ``[sudo -n ]timeout --kill-after=5 <command_timeout_s> bash -c
    '<command>'`` (``tuner.ssh.shell.wrap``).
    """
    by_target: dict[str, list[Planned]] = {}
    for p in catalog(inv):
        by_target.setdefault(p.target, []).append(p)
    groups: dict[tuple[tuple[str, str, bool], ...], list[str]] = {}
    for target, plans in by_target.items():
        key = tuple((p.purpose, p.command, p.sudo) for p in plans)
        groups.setdefault(key, []).append(target)
    lines: list[str] = []
    for key, targets in groups.items():
        lines += ["", f"#### {', '.join(targets)}", ""]
        for purpose, command, sudo in key:
            lines += [f"- {purpose}{' — under `sudo -n`' if sudo else ''}:", "", "  ```sh",
                      f"  {command}", "  ```"]
    return "\n".join(lines).lstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tuner.ssh.catalog INVENTORY.yaml", file=sys.stderr)
        return 2
    sys.stdout.write(render(load_inventory(args[0])))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
