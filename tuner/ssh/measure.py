"""One measurement on the SSH backend, the same experiment rocesim runs.

1. Background parts start first (``ib_write_bw`` flows between canary hosts) and run until the
   end, as rocesim's open-ended background flows.
2. With a probe, a timed pass runs every collective part at once with the workload's
   iterations; its result rows give each part's time per iteration under this load.
3. The measured pass runs the parts at once again, sized from the timed pass so that after
   the first result row (nccl-tests ``-N``: one row per cycle) the collectives still run for
   several planned probe durations.
4. The probe pairs (``ib_write_lat``) start once every part has printed a row: traffic flows.
5. The overlap (share of probe samples taken while every collective ran) is recorded; below
   ``launcher.min_probe_overlap`` the measurement fails: a probe of an idle fabric is not
   "latency under load".

Counters are read before and after; the live monitor is fed while anything runs. Command lines
come from the pure ``tuner.ssh.plan``, in the replicate's placement (``tuner.ssh.placement``:
rank order and probe pairs), which a note of the measurement names.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from objectives.measurement import CollectiveResult, LatencyResult, Measurement
from tuner.drivers._mlx5 import expected_counters
from tuner.errors import MeasurementError, ParseError, SafetyAbort
from tuner.ssh import placement
from tuner.ssh.plan import (
    BINARIES,
    Flow,
    background_flows,
    cycle_s,
    gpu_sets,
    hostlist,
    nccl_command,
    overlap,
    probe_flows,
    sized_iterations,
    unsupported,
)
from tuner.ssh.transport import CommandError, RemoteProcess

if TYPE_CHECKING:
    from objectives.measurement import Counters
    from tuner.cluster.base import Monitor
    from tuner.cluster.ssh import SshCluster
    from tuner.inventory import Inventory
    from tuner.ssh.placement import Placement
    from tuner.workload import CollectivePart, Workload

log = logging.getLogger(__name__)

_WARN = re.compile(r"NCCL WARN.*$", re.M)
_TAG = re.compile(r"^\[\d+,\d+\]<stdout>:")
_ROW = re.compile(r"^\s*\d+\s+\d+\s+\S")


@dataclass
class _Part:
    """One running collective part and when its result rows appeared (local monotonic)."""

    part: CollectivePart
    proc: RemoteProcess
    rows: list[float] = field(default_factory=list)

    def update(self, now: float) -> None:
        seen = sum(1 for ln in self.proc.output_so_far().splitlines()
                   if _ROW.match(_TAG.sub("", ln)))
        self.rows += [now] * (seen - len(self.rows))


@dataclass
class _Probe:
    flow: Flow
    server: RemoteProcess
    client: RemoteProcess
    ended: float | None = None


def _stop(*procs: RemoteProcess | None) -> None:
    for p in procs:
        if p is not None:
            try:
                p.kill()
            except Exception as exc:  # noqa: BLE001 - stopping is best effort, keep going
                log.warning("could not stop %s: %s", p.command[:60], exc)


class _Run:
    """The processes of one measurement, the monitor feed and the deadline."""

    def __init__(self, cluster: SshCluster, monitor: Monitor | None, limit: float) -> None:
        self.cluster = cluster
        self.monitor = monitor
        self.limit = limit
        self.t0 = time.monotonic()
        self.procs: list[RemoteProcess] = []
        self.interval = max(0.05, float(monitor.interval_s)) if monitor is not None else 0.5
        self.next_poll = self.t0 + self.interval

    def start(self, host: str, command: str) -> RemoteProcess:
        # Never under sudo, whatever the host's ``sudo``: nccl-tests/mpirun and perftest run as
        # the login user, with PATH and LD_LIBRARY_PATH as that user's SSH session has them
        # (sudo's secure_path would hide HPC-X and CUDA builds, and root mpirun needs
        # root-to-root SSH between hosts); RDMA devices need no root.
        proc = self.cluster.pool[host].start(command, timeout_s=self.limit, sudo=False)
        self.procs.append(proc)
        return proc

    def tick(self) -> float:
        """Pump every process once, feed the monitor when due, enforce the time limit."""
        now = time.monotonic()
        if now - self.t0 > self.limit + 15:
            raise MeasurementError(f"measurement exceeded time_limit_s={self.limit:.0f} s")
        if now >= self.next_poll:
            if self.monitor is not None:
                self.monitor.poll(self.cluster.counters(), now - self.t0)
            self.next_poll = time.monotonic() + self.interval
        time.sleep(0.02)
        return time.monotonic()

    def stop_all(self) -> None:
        _stop(*reversed(self.procs))


def run_measurement(cluster: SshCluster, workload: Workload, monitor: Monitor | None,
                    place: Placement | None = None) -> Measurement:
    """Background, timed pass, measured pass with the probe under load, counters; on the
    placement ``place`` (default: replicate 0's, the inventory's order)."""
    cluster.resolve_rails()  # PCI addresses and GID indices of every rail, read from sysfs
    inv = cluster.inventory
    place = place or placement.for_replicate(inv, 0)
    problems = unsupported(inv, workload)
    if problems:
        raise MeasurementError("; ".join(problems))
    limit = float(workload.time_limit_s)
    run = _Run(cluster, monitor, limit)
    probe = workload.probes[0] if workload.probes else None
    pflows = probe_flows(inv, probe, place) if probe is not None else []
    notes = [placement.describe(place, [(f.server, f.client) for f in pflows])]
    raw: dict[str, str] = {}
    extra: dict[str, float] = {}
    before = cluster.counters()
    parts = workload.collectives
    lat: LatencyResult | None = None
    try:
        bg = _start_flows(run, background_flows(inv, workload.background, limit, place))
        iters: list[int | None] = [None] * len(parts)
        cycles = 1
        if parts and probe is not None:
            timed = _run_parts(run, inv, parts, iters, 1, place)
            raw["nccl_timed"] = "\n".join(t for t, _ in timed)
            cyc = cycle_s(inv, probe)
            iters = [sized_iterations(p, r.time_us, cyc)
                     for p, (_, r) in zip(parts, timed, strict=True)]
            cycles = inv.launcher.nccl_cycles
        gpus = gpu_sets(inv, len(parts))  # concurrent parts never share a GPU
        running = [_Part(p, run.start(inv.launcher.host,
                                      nccl_command(inv, p, n, cycles, place, g)))
                   for p, n, g in zip(parts, iters, gpus, strict=True)]
        probes: list[_Probe] = []
        if probe is not None:
            _wait_first_rows(run, running)
            if not all(p.rows for p in running):  # a part ended without a row: its error wins
                _wait_all(run, running, [])
                for p in running:
                    res = p.proc.wait(check=False)
                    part_result(res.stdout + res.stderr, res.status, p.part, inv)
            until = time.monotonic() + inv.launcher.probe_delay_s
            while time.monotonic() < until:
                run.tick()
            probes = [_Probe(*f) for f in _start_flows(run, pflows)]
        _wait_all(run, running, probes)
        _check_background(bg)
        results, texts = [], []
        for p in running:
            res = p.proc.wait(check=False)
            texts.append(res.stdout + res.stderr)
            if res.status in (124, 137):
                raise MeasurementError(f"collectives timed out after {limit:.0f} s "
                                       f"(time_limit_s) on {inv.launcher.host}")
            results.append(part_result(res.stdout + res.stderr, res.status, p.part, inv))
        raw["nccl"] = "\n".join(texts)
        if probes:
            lat = _probe_results(probes, raw, inv)
            if running:
                traffic = (max(p.rows[0] for p in running), min(p.rows[-1] for p in running))
                shares = [overlap((pr.client.started, pr.ended or pr.client.started), traffic)
                          for pr in probes]
                extra["probe_overlap"] = min(shares)
                if min(shares) < inv.launcher.min_probe_overlap:
                    raise MeasurementError(
                        f"latency probe overlapped the collectives for {min(shares):.0%} of its "
                        f"samples (< launcher.min_probe_overlap "
                        f"{inv.launcher.min_probe_overlap:.0%}): not latency under load")
        run.stop_all()
    except SafetyAbort:
        run.stop_all()
        raise
    except CommandError as exc:
        run.stop_all()
        raise MeasurementError(f"measurement command failed: {exc}") from exc
    except BaseException:
        run.stop_all()
        raise
    after = cluster.counters()
    notes += absent_counter_notes(after, inv)
    return Measurement(collectives=results, latency=lat, counters_before=before,
                       counters_after=after, duration_s=time.monotonic() - run.t0, raw=raw,
                       notes=notes, extra=extra)


def _start_flows(run: _Run, flows: list[Flow]) -> list[tuple[Flow, RemoteProcess,
                                                             RemoteProcess]]:
    """Every server, one wait until they listen, then every client: the pairs start together."""
    servers = [run.start(f.server, f.server_cmd) for f in flows]
    _wait_listening(servers)
    return [(f, s, run.start(f.client, f.client_cmd))
            for f, s in zip(flows, servers, strict=True)]


def _run_parts(run: _Run, inv: Inventory, parts: list[CollectivePart],
               iters: list[int | None], cycles: int, place: Placement
               ) -> list[tuple[str, CollectiveResult]]:
    """Run the parts at once and wait: the timed pass."""
    procs = [run.start(inv.launcher.host, nccl_command(inv, p, n, cycles, place, g))
             for p, n, g in zip(parts, iters, gpu_sets(inv, len(parts)), strict=True)]
    while any(p.running(0.0) for p in procs):
        run.tick()
    out = []
    for part, proc in zip(parts, procs, strict=True):
        res = proc.wait(check=False)
        text = res.stdout + res.stderr
        if res.status in (124, 137):
            raise MeasurementError(f"collectives timed out after {run.limit:.0f} s "
                                   f"(time_limit_s) on {inv.launcher.host}")
        out.append((text, part_result(text, res.status, part, inv)))
    return out


def _wait_first_rows(run: _Run, running: list[_Part]) -> None:
    """Until every part has printed a result row (traffic flows) or one has ended. Rows come
    live: nccl-tests sets stdout line-buffered (``setlinebuf`` in its main) and mpirun
    forwards rank 0's lines as they come."""
    while True:
        now = time.monotonic()
        for p in running:
            p.update(now)
        if all(p.rows for p in running) or not all(p.proc.running(0.0) for p in running):
            return
        run.tick()


def _wait_all(run: _Run, running: list[_Part], probes: list[_Probe]) -> None:
    """Until every collective and every probe client has ended; note when each did."""
    while True:
        now = time.monotonic()
        for p in running:
            p.update(now)
        busy = False
        for pr in probes:
            if pr.ended is None:
                if pr.client.running(0.0):
                    busy = True
                else:
                    pr.ended = now
        busy = any([p.proc.running(0.0) for p in running]) or busy
        if not busy:
            for p in running:
                p.update(time.monotonic())
            return
        run.tick()


def _check_background(bg: list[tuple[Flow, RemoteProcess, RemoteProcess]]) -> None:
    """A background flow that stopped early did not load the fabric: say which and why."""
    for flow, _server, client in bg:
        if not client.running(0.0):
            res = client.wait(check=False)
            raise MeasurementError(
                f"background flow {flow.client} -> {flow.server} (port {flow.port}) ended "
                f"before the collectives (exit {res.status}): {_tail(res.stderr or res.stdout)}")


def _probe_results(probes: list[_Probe], raw: dict[str, str], inv: Inventory
                   ) -> LatencyResult:
    """Every pair's statistics, pooled: counts and means add up, p50 is the pairs' median,
    the tails are the worst pair's (perftest prints summaries, not samples)."""
    from objectives.parsers import parse_perftest

    stats = []
    for k, pr in enumerate(probes):
        cres = pr.client.wait(check=False)
        raw[f"perftest{k or ''}"] = cres.stdout + cres.stderr
        if cres.status != 0:
            raise MeasurementError(
                f"{inv.launcher.perftest_bin} on {pr.flow.client} (port {pr.flow.port}) failed "
                f"({'timed out' if cres.status in (124, 137) else f'exit {cres.status}'}): "
                f"{_tail(cres.stderr or cres.stdout)}")
        sres = pr.server.wait(check=False, timeout_s=10)
        raw[f"perftest_server{k or ''}"] = sres.stdout + sres.stderr
        try:
            stats.append(parse_perftest(cres.stdout).run.latency_result())
        except ParseError as exc:
            raise MeasurementError(f"{inv.launcher.perftest_bin} on {pr.flow.client}: "
                                   f"unreadable output: {exc}") from None
    count = sum(s.count for s in stats)
    p50s = sorted(s.p50_us for s in stats)
    return LatencyResult(count=count, p50_us=p50s[len(p50s) // 2],
                         p99_us=max(s.p99_us for s in stats),
                         p999_us=max(s.p999_us for s in stats),
                         max_us=max(s.max_us for s in stats),
                         mean_us=sum(s.mean_us * s.count for s in stats) / max(1, count))


def _wait_listening(servers: list[RemoteProcess], timeout_s: float = 3.0) -> None:
    """Give perftest servers time to listen: until each printed its banner, at most
    ``timeout_s`` (perftest does not flush stdout into a pipe, so often the whole wait)."""
    end = time.monotonic() + timeout_s
    waiting = list(servers)
    while waiting and time.monotonic() < end:
        for server in list(waiting):
            if not server.running(0.0):
                res = server.wait(check=False)
                raise MeasurementError(f"perftest server on {server.conn.name} exited early "
                                       f"(status {res.status}): "
                                       f"{_tail(res.stderr or res.stdout)}")
            out = server.output_so_far()
            if "Waiting for client" in out or "-" * 20 in out:
                waiting.remove(server)
        time.sleep(0.05)


def _tail(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:]) or "(no output)"


def part_result(text: str, rc: int | None, part: CollectivePart, inv: Inventory
                ) -> CollectiveResult:
    """One part's nccl-tests output as a result (the mean of its rows for the part's size);
    a failed part raises ``MeasurementError`` with the reason."""
    from objectives.parsers import parse_nccl_tests

    np_, _ = hostlist(inv)
    line_rate = max((h.nic_gbps for h in inv.hosts), default=0.0) / 8.0
    what = f"{BINARIES[part.op]} -b {part.size_bytes}"
    warns = _WARN.findall(text)
    if warns:
        raise MeasurementError(f"{what}: {warns[0].strip()}")
    if rc is None:
        raise MeasurementError(f"{what}: no exit status (killed or cut short): {_tail(text)}")
    refused = re.search(r"^.*invalid option.*$", text, re.M)
    if refused:  # nccl-tests prints its usage and may still exit 0
        raise MeasurementError(f"{what}: nccl-tests refused an option: {refused.group(0).strip()}"
                               " (the measured pass needs a build with -N/--run_cycles)")
    try:
        parsed = parse_nccl_tests(text)
    except ParseError as exc:
        if rc != 0:
            raise MeasurementError(f"{what} exited {rc}: {_tail(text)}") from None
        raise MeasurementError(f"{what}: unreadable output: {exc}") from None
    if parsed.failed:  # nccl-tests also exits 1 then: say why
        raise MeasurementError(f"{what}: data check failed (#wrong = {parsed.wrong_total}"
                               f", out of bounds = {parsed.out_of_bounds}; exit {rc})")
    if rc != 0:
        raise MeasurementError(f"{what} exited {rc}: {_tail(text)}")
    rows = [r for r in parsed.collective_results(part.op, parsed.nranks or np_,
                                                 line_rate_gbytes_per_s=line_rate)
            if r.size_bytes == part.size_bytes]
    if not rows:
        raise MeasurementError(f"{what}: no result row for {part.size_bytes} bytes")
    times = [r.time_us for r in rows]
    mean_t = sum(times) / len(times)
    return rows[0].model_copy(update={
        "time_us": mean_t, "weight": part.weight, "iteration_times_us": times,
        "algbw_gbytes_per_s": sum(r.algbw_gbytes_per_s for r in rows) / len(rows),
        "busbw_gbytes_per_s": sum(r.busbw_gbytes_per_s for r in rows) / len(rows)})


def absent_counter_notes(after: Counters, inv: Inventory) -> list[str]:
    """One note per expected counter a port does not expose: absent is not zero."""
    notes = []
    for h in (r for host in inv.hosts for r in host.rail_entries()):
        row = after.ports.get(h.nic, {})
        missing = [c for c in expected_counters(h.roce_priority) if c not in row]
        if missing:
            notes.append(f"{h.nic}: counters absent (not zero): {', '.join(missing)}"
                         + (" - per-priority pause counters exist only where PFC is on"
                            if any("prio" in m for m in missing) else ""))
    for s in inv.switches:
        qn = s.lossless_queue
        for port in s.canary_ports:
            row = after.ports.get(f"{s.name}/{port}", {})
            want = (f"pfc{qn}_rx_pkts", f"pfc{qn}_tx_pkts", f"queue{qn}_ecn_marked_pkts")
            missing = [c for c in want if c not in row]
            if "ecn_marked_pkts" in row:  # NVUE counts ECN marks per port, not per queue
                missing = [c for c in missing if not c.endswith("_ecn_marked_pkts")]
            if missing:
                notes.append(f"{s.name}/{port}: counters absent (not zero): "
                             f"{', '.join(missing)}")
    return notes
