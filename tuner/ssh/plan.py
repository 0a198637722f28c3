"""What one SSH measurement runs, as pure data: argument lists, probe pairs, background flows,
the sizing of the measured pass and the probe/collective overlap.

Every command is built as an argument list and joined with ``shlex.quote`` on every word
(``join``), so no inventory or experiment value reaches a remote shell unquoted. The experiment
is the one rocesim runs: the collective parts at once, background flows between the canary hosts
(incast: the first host receives from the next ``fan_in``; permutation: each host sends to the
next one), ``pairs`` probe pairs, one sample per pair every ``interval_us``. The hosts' order
(rank order, probe pairs, background roles) is the replicate's ``Placement``; without one, the
inventory's order (replicate 0).
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.errors import MeasurementError
from tuner.ssh.placement import Placement, for_replicate
from tuner.ssh.shell import UnsafeValue, check

if TYPE_CHECKING:
    from safety.preflight import CheckResult
    from tuner.inventory import HostEntry, Inventory
    from tuner.workload import BackgroundPart, CollectivePart, ProbePart, Workload

BINARIES = {"all_reduce": "all_reduce_perf", "alltoall": "alltoall_perf",
            "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf"}
PROBE_PORT = 18515  # perftest's default port; probe pair k listens on PROBE_PORT + k
BW_PORT = 18715  # background flow k listens on BW_PORT + k
RTT_GUESS_US = 10.0  # per-sample round trip assumed when planning (loaded RTTs run longer)
# Collectives run this many planned probe durations after the first row, plus the inventory's
# launcher.probe_start_s for starting the probe pairs.
WINDOW_FACTOR = 3.0
MAX_ITERATIONS = 10_000_000


def join(argv: list[str]) -> str:
    """One shell line from an argument list: every word quoted, control characters refused."""
    for word in argv:
        if not isinstance(word, str) or not word or any(ord(c) < 32 or ord(c) == 127
                                                        for c in word):
            raise UnsafeValue(f"command word {word!r} is empty or holds a control character")
    return " ".join(shlex.quote(w) for w in argv)


def _in_order(inv: Inventory, names: tuple[str, ...]) -> list[HostEntry]:
    by_name = {h.name: h for h in inv.hosts}
    return [by_name[n] for n in names]


def rank_hosts(inv: Inventory, place: Placement | None = None) -> list[HostEntry]:
    """The canary hosts in the placement's NCCL rank order."""
    return _in_order(inv, (place or for_replicate(inv, 0)).ranks)


def hostlist(inv: Inventory, place: Placement | None = None) -> tuple[int, str]:
    """``(np, hostlist)`` for the mpirun template: every canary host in the placement's rank
    order, gpus_per_host slots."""
    gpus = inv.launcher.gpus_per_host
    names = [check("host", h.mpi_host or h.address) for h in rank_hosts(inv, place)]
    hl = ",".join(f"{n}:{gpus}" if gpus > 1 else n for n in names)
    return len(names) * gpus, hl


def part_env(part: CollectivePart) -> dict[str, str]:
    """NCCL variables a workload part asks for; fields left at their default are not sent."""
    env: dict[str, str] = {}
    if part.nccl_algo:
        env["NCCL_ALGO"] = part.nccl_algo
    if part.nccl_proto:
        env["NCCL_PROTO"] = part.nccl_proto
    if "channels" in part.model_fields_set:
        env["NCCL_MIN_NCHANNELS"] = str(part.channels)
    if "qps_per_connection" in part.model_fields_set:
        env["NCCL_IB_QPS_PER_CONNECTION"] = str(part.qps_per_connection)
    return env


def rails_env(inv: Inventory) -> dict[str, str]:
    """What NCCL must be told so the collectives use every rail the way the probes do:

    * ``NCCL_IB_HCA``: every rail's ``<device>:<port>`` (``=``: exact names, so ``mlx5_1``
      does not also select ``mlx5_10``; NCCL env docs, NCCL_IB_HCA);
    * ``NCCL_IB_GID_INDEX``: the GID index of the data addresses, when every rail has the
      same one (one variable for every device; otherwise NCCL's own RoCE v2 selection);
    * ``NCCL_IB_TC`` and ``NCCL_IB_FIFO_TC``: the inventory's ``roce_tos``, so data and the
      CTS/FIFO control messages (NCCL_IB_FIFO_TC, NVIDIA/nccl PR #1194; unset they follow
      NCCL_IB_TC) travel in the tuned lossless class.

    ``launcher.nccl_env`` wins over each of these (and pre-flight checks its NCCL_IB_HCA)."""
    entries = [r for h in inv.hosts for r in h.rail_entries()]
    devs: list[str] = []
    for r in entries:
        dev = f"{check('rdma_device', r.rdma_device)}:{int(r.rdma_port)}"
        if dev not in devs:
            devs.append(dev)
    tos = str(int(inv.launcher.roce_tos))
    env = {"NCCL_IB_HCA": "=" + ",".join(devs), "NCCL_IB_TC": tos, "NCCL_IB_FIFO_TC": tos}
    gids = {int(r.gid_index) for r in entries}
    if len(gids) == 1:
        env["NCCL_IB_GID_INDEX"] = str(gids.pop())
    return env


def hca_missing(inv: Inventory) -> list[str]:
    """Rail devices a ``launcher.nccl_env`` NCCL_IB_HCA leaves out (NCCL would not use them)."""
    hca = inv.launcher.nccl_env.get("NCCL_IB_HCA")
    if hca is None:
        return []
    exact = hca.startswith("=")
    if hca.lstrip("=").startswith("^"):
        return []  # an exclusion list: judged by NCCL, not here
    names = [x.split(":")[0] for x in hca.lstrip("=").split(",") if x]
    out = []
    for r in (r for h in inv.hosts for r in h.rail_entries()):
        ok = (r.rdma_device in names if exact
              else any(r.rdma_device.startswith(n) for n in names))
        if not ok and f"{r.name}/{r.rdma_device}" not in out:
            out.append(f"{r.name}/{r.rdma_device}")
    return out


def gpu_sets(inv: Inventory, nparts: int) -> list[str | None]:
    """``CUDA_VISIBLE_DEVICES`` of each of ``nparts`` collective parts run at once: part i
    gets the i-th ``gpus_per_host`` GPUs (of the inventory's own CUDA_VISIBLE_DEVICES list,
    else 0, 1, ...), so concurrent parts never share a GPU; one part: None (left alone)."""
    if nparts <= 1:
        return [None] * nparts
    g = inv.launcher.gpus_per_host
    own = inv.launcher.nccl_env.get("CUDA_VISIBLE_DEVICES")
    pool = [x for x in own.split(",") if x] if own else [str(i) for i in range(nparts * g)]
    return [",".join(pool[i * g:(i + 1) * g]) or None for i in range(nparts)]


def binary_path(inv: Inventory, op: str) -> str:
    """The nccl-tests binary of collective ``op`` (pre-flight checks who can change it)."""
    return check("path", f"{inv.launcher.nccl_tests_dir.rstrip('/')}/{BINARIES[op]}")


def nccl_argv(inv: Inventory, part: CollectivePart, iterations: int | None = None,
              cycles: int = 1, place: Placement | None = None,
              gpus: str | None = None) -> list[str]:
    """``env NCCL_...=... <launcher words> [-x NCCL_...] <dir>/<op>_perf -b S -e S ...``.

    The template is split into words before ``{np}``/``{hostlist}`` are filled in, so a value
    can never add a word; ``cycles`` > 1 adds nccl-tests ``-N`` (one result row per cycle).
    """
    la = inv.launcher
    np_, hl = hostlist(inv, place)
    words = [w.replace("{np}", str(np_)).replace("{hostlist}", hl) for w in la.mpirun.split()]
    env = {check("env_name", k): check("env_value", v)
           for k, v in {**rails_env(inv), **la.nccl_env, **part_env(part),
                        **({"CUDA_VISIBLE_DEVICES": gpus} if gpus else {})}.items()}
    argv = (["env", *(f"{k}={v}" for k, v in env.items())] if env else []) + words
    if words and words[0].rsplit("/", 1)[-1] in ("mpirun", "mpiexec"):
        for k in env:
            argv += ["-x", k]
    n = int(part.iterations if iterations is None else iterations)
    argv += [binary_path(inv, part.op),
             "-b", str(int(part.size_bytes)), "-e", str(int(part.size_bytes)), "-f", "2",
             "-g", "1", "-n", str(n), "-w", str(int(la.warmup_iters)), "-c", "1"]
    if cycles > 1:
        argv += ["-N", str(int(cycles))]
    return argv


def nccl_command(inv: Inventory, part: CollectivePart, iterations: int | None = None,
                 cycles: int = 1, place: Placement | None = None,
                 gpus: str | None = None) -> str:
    """The shell line of ``nccl_argv`` (each part runs as its own remote process)."""
    return join(nccl_argv(inv, part, iterations, cycles, place, gpus))


@dataclass(frozen=True)
class Flow:
    """A perftest server/client pair: the server listens on ``port``; the client connects."""

    server: str
    server_cmd: str
    client: str
    client_cmd: str
    port: int


def _perftest_base(inv: Inventory, binary: str, h: HostEntry, tos: int, port: int) -> list[str]:
    # --tclass sets the GRH traffic class of a verbs QP; -T needs rdma_cm (-R) and is refused
    # without it by perftest ("TOS only valid for rdma_cm based QP and RawEth QP").
    return [check("binary", binary), "-d", check("rdma_device", h.rdma_device),
            "-i", str(int(h.rdma_port)), "-x", str(int(h.gid_index)), f"--tclass={int(tos)}",
            "-p", str(int(port)), "-F"]


def _peer(h: HostEntry) -> str:
    return check("host", h.data_address or h.address)


def on_rail(a: HostEntry, b: HostEntry, k: int) -> tuple[HostEntry, HostEntry]:
    """Flow ``k`` between two hosts runs on rail ``k mod rails`` of both (rail-aligned: rail
    r of one host talks to rail r of the other), so the flows spread over every rail."""
    ra, rb = a.rail_entries(), b.rail_entries()
    n = min(len(ra), len(rb))
    return ra[k % n], rb[k % n]


def probe_pairs(inv: Inventory, pairs: int, place: Placement | None = None
                ) -> list[tuple[HostEntry, HostEntry]]:
    """``pairs`` (server, client) pairs among the latency hosts (default: every canary host) in
    the placement's probe order: every ordered pair once, nearest neighbours first, then round
    again."""
    hosts = _in_order(inv, (place or for_replicate(inv, 0)).probe_hosts)
    if len(hosts) < 2:
        raise MeasurementError("latency probes need two canary hosts")
    order = [(hosts[i], hosts[(i + off) % len(hosts)])
             for off in range(1, len(hosts)) for i in range(len(hosts))]
    return [order[k % len(order)] for k in range(int(pairs))]


def probe_flows(inv: Inventory, probe: ProbePart, place: Placement | None = None
                ) -> list[Flow]:
    """One ``ib_write_lat`` pair per probe pair, ``interval_us`` as perftest's
    ``--latency_gap`` (µs between posts), ``perftest_iterations`` samples each."""
    la = inv.launcher
    gap = int(round(probe.interval_us))
    out = []
    for k, (sh, ch) in enumerate(probe_pairs(inv, probe.pairs, place)):
        s, c = on_rail(sh, ch, k)
        port = PROBE_PORT + k
        extra = ["-s", str(int(probe.size_bytes)), "-n", str(int(la.perftest_iterations))]
        if gap > 0:
            extra.append(f"--latency_gap={gap}")
        out.append(Flow(s.name, join(_perftest_base(inv, la.perftest_bin, s, la.roce_tos, port)
                                     + extra),
                        c.name, join(_perftest_base(inv, la.perftest_bin, c, la.roce_tos, port)
                                     + extra + [_peer(s)]), port))
    return out


def background_pairs(inv: Inventory, part: BackgroundPart, place: Placement | None = None
                     ) -> list[tuple[HostEntry, HostEntry]]:
    """(receiver, sender) pairs of one background part over the canary hosts in rank order, as
    rocesim (which places its background by the replicate's seed too)."""
    hosts = rank_hosts(inv, place)
    if part.pattern == "incast":
        fan_in = min(part.fan_in, len(hosts) - 1)
        return [(hosts[0], s) for s in hosts[1:1 + fan_in]]
    return [(hosts[(i + 1) % len(hosts)], hosts[i]) for i in range(len(hosts))]


def background_flows(inv: Inventory, parts: list[BackgroundPart], duration_s: float,
                     place: Placement | None = None) -> list[Flow]:
    """``ib_write_bw`` flows for the background parts: one QP each (``-q 1``, one flow as in
    rocesim), ``-D`` seconds (the tuner stops them when the collectives end), rate-limited in
    software to ``load`` x the sender's line rate, in the RoCE or the declared other class."""
    la = inv.launcher
    seconds = max(1, int(math.ceil(duration_s)))
    out: list[Flow] = []
    for part in parts:
        tos = la.roce_tos if part.priority == "roce" else la.other_tos
        if tos is None:
            raise MeasurementError("background part with priority 'other' needs "
                                   "launcher.other_tos in the inventory")
        for rh, sh in background_pairs(inv, part, place):
            recv, send = on_rail(rh, sh, len(out))
            port = BW_PORT + len(out)
            rate = max(0.001, round(part.load * send.nic_gbps, 3))
            extra = ["-q", "1", "-D", str(seconds), "-s", "65536", "--report_gbits",
                     f"--rate_limit={rate:g}", "--rate_units=g", "--rate_limit_type=SW"]
            out.append(Flow(recv.name, join(_perftest_base(inv, la.bw_bin, recv, tos, port)
                                            + extra),
                            send.name, join(_perftest_base(inv, la.bw_bin, send, tos, port)
                                            + extra + [_peer(recv)]), port))
    return out


def unsupported(inv: Inventory, workload: Workload) -> list[str]:
    """Parts the SSH backend cannot generate, each with the reason (pre-flight refuses them)."""
    out = []
    for i, part in enumerate(workload.parts):
        where = f"workload.parts[{i}] ({part.kind})"
        if part.kind == "background":
            if part.priority == "other" and inv.launcher.other_tos is None:
                out.append(f"{where}: priority 'other' needs launcher.other_tos (the ToS of "
                           "that class) in the inventory")
            if len(inv.hosts) < 2:
                out.append(f"{where}: needs two canary hosts")
        if part.kind == "probe":
            if i != workload.parts.index(workload.probes[0]):
                out.append(f"{where}: one probe part per workload on SSH (rocesim uses the "
                           "first one too)")
            hosts = inv.launcher.latency_hosts or [h.name for h in inv.hosts]
            if len(hosts) < 2:
                out.append(f"{where}: needs two canary hosts")
    nparts, g = len(workload.collectives), inv.launcher.gpus_per_host
    own = inv.launcher.nccl_env.get("CUDA_VISIBLE_DEVICES")
    if nparts > 1 and own is not None and len([x for x in own.split(",") if x]) < nparts * g:
        out.append(f"launcher.nccl_env.CUDA_VISIBLE_DEVICES: {nparts} collective parts run at "
                   f"once with gpus_per_host {g} each: they need {nparts * g} GPUs per host, "
                   f"{own!r} lists fewer (parts must not share a GPU)")
    missing = hca_missing(inv)
    if missing:
        out.append(f"launcher.nccl_env.NCCL_IB_HCA: leaves out the rails {', '.join(missing)}: "
                   "nccl-tests must use every rail (drop it: ecntune lists every rail)")
    return out


def planned_probe_s(inv: Inventory, probe: ProbePart) -> float:
    """How long a probe pair should take: samples x (gap + a guessed round trip)."""
    return inv.launcher.perftest_iterations * (probe.interval_us + RTT_GUESS_US) / 1e6


def sized_iterations(part: CollectivePart, t_iter_us: float, cycle_s: float) -> int:
    """Iterations per cycle so one cycle lasts ``cycle_s`` at the time per iteration measured
    by the timed pass (a cycle runs ``-n`` out-of-place and ``-n`` in-place iterations); never
    fewer than the workload asks for."""
    if not t_iter_us > 0 or not math.isfinite(t_iter_us):
        return int(part.iterations)
    n = math.ceil(cycle_s * 1e6 / (2 * t_iter_us))
    return int(min(MAX_ITERATIONS, max(part.iterations, n)))


def cycle_s(inv: Inventory, probe: ProbePart) -> float:
    """One cycle of the measured pass: the rows after the first span WINDOW_FACTOR planned
    probe durations, the probe's start-up and ``probe_delay_s``."""
    window = (WINDOW_FACTOR * planned_probe_s(inv, probe) + inv.launcher.probe_start_s
              + inv.launcher.probe_delay_s)
    return window / (inv.launcher.nccl_cycles - 1)


def overlap(probe: tuple[float, float], traffic: tuple[float, float]) -> float:
    """Share of a probe's samples taken inside the traffic window (samples are spread evenly
    over the probe's run); 0 for a probe that ran outside it."""
    p0, p1 = probe
    c0, c1 = traffic
    if p1 <= p0:
        return 1.0 if c0 <= p0 <= c1 else 0.0
    return max(0.0, min(p1, c1) - max(p0, c0)) / (p1 - p0)


def workload_checks(exp: object, cluster: object) -> list[CheckResult]:
    """Pre-flight lines (check ``workload``) for an SSH canary: a part this backend cannot
    generate fails pre-flight, so nothing is changed for a study that could not measure."""
    from safety.preflight import CheckResult

    inv = getattr(getattr(cluster, "inner", cluster), "inventory", None)
    workload = getattr(exp, "workload", None)
    if inv is None or workload is None:
        return []
    problems = unsupported(inv, workload)
    if problems:
        return [CheckResult(check="workload", target="ssh", status="fail", evidence=p)
                for p in problems]
    return [CheckResult(check="workload", target="ssh", status="pass",
                        evidence=f"{len(workload.parts)} parts, each generated on the canary "
                                 "(nccl-tests, ib_write_bw, ib_write_lat)")]
