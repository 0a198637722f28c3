"""One measurement on the SSH backend: nccl-tests from the launcher, ``ib_write_lat`` between
two canary hosts while the collectives run, counters before and after, the live monitor
polled in between.

Command lines are built by pure functions (``nccl_command``, ``perftest_commands``) from the
inventory and the workload, so docs and tests can show exactly what runs where.
"""

from __future__ import annotations

import logging
import re
import shlex
import time
from typing import TYPE_CHECKING

from objectives.measurement import CollectiveResult, Measurement
from tuner.drivers._mlx5 import expected_counters
from tuner.errors import MeasurementError, ParseError, SafetyAbort
from tuner.ssh.shell import check, q
from tuner.ssh.transport import CommandError, RemoteProcess

if TYPE_CHECKING:
    from objectives.measurement import Counters
    from tuner.cluster.base import Monitor
    from tuner.cluster.ssh import SshCluster
    from tuner.inventory import HostEntry, Inventory
    from tuner.workload import CollectivePart, ProbePart, Workload

log = logging.getLogger(__name__)

BINARIES = {"all_reduce": "all_reduce_perf", "alltoall": "alltoall_perf",
            "all_gather": "all_gather_perf", "reduce_scatter": "reduce_scatter_perf"}
RC_MARK = "### ecntune part {i} rc="
_RC = re.compile(r"^### ecntune part (\d+) rc=(\d+)\s*$", re.M)
_WARN = re.compile(r"NCCL WARN.*$", re.M)


def hostlist(inv: Inventory) -> tuple[int, str]:
    """``(np, hostlist)`` for the mpirun template: every canary host, gpus_per_host slots."""
    gpus = inv.launcher.gpus_per_host
    names = [check("host", h.mpi_host or h.address) for h in inv.hosts]
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


def nccl_command(inv: Inventory, part: CollectivePart) -> str:
    """One nccl-tests run: ``env NCCL_...=... mpirun ... [-x NCCL_...] <dir>/<op>_perf ...``."""
    la = inv.launcher
    np_, hl = hostlist(inv)
    launcher = la.mpirun.format(np=np_, hostlist=hl)
    env = {k: check("env_value", v) for k, v in {**la.nccl_env, **part_env(part)}.items()}
    words = launcher.split()
    exports = ""
    if words and words[0].rsplit("/", 1)[-1] in ("mpirun", "mpiexec"):
        exports = "".join(f" -x {check('env_name', k)}" for k in env)
    prefix = "env " + " ".join(f"{check('env_name', k)}={shlex.quote(v)}"
                               for k, v in env.items()) + " " if env else ""
    binary = f"{la.nccl_tests_dir.rstrip('/')}/{BINARIES[part.op]}"
    args = (f"-b {int(part.size_bytes)} -e {int(part.size_bytes)} -f 2 -g 1 "
            f"-n {int(part.iterations)} -w {int(la.warmup_iters)} -c 1")
    return f"{prefix}{launcher}{exports} {q('path', binary)} {args}"


def collectives_script(inv: Inventory, parts: list[CollectivePart]) -> str:
    """Run the parts one after the other, each followed by a marker with its exit status."""
    lines = []
    for i, part in enumerate(parts):
        lines.append(f"{nccl_command(inv, part)} 2>&1; echo \"{RC_MARK.format(i=i)}$?\"")
    return "; ".join(lines)


def perftest_commands(inv: Inventory, probe: ProbePart) -> tuple[str, str, str, str]:
    """``(server_host, server_cmd, client_host, client_cmd)`` for the latency probe."""
    la = inv.launcher
    names = la.latency_hosts or [h.name for h in inv.hosts[:2]]
    if len(names) < 2:
        raise MeasurementError("latency probes need two canary hosts")
    hosts = {h.name: h for h in inv.hosts}
    server, client = hosts[names[0]], hosts[names[1]]
    size = int(probe.size_bytes)

    def base(h: HostEntry) -> str:
        return (f"{q('binary', la.perftest_bin)} -d {q('rdma_device', h.rdma_device)} "
                f"-i {int(h.rdma_port)} -x {int(h.gid_index)} -T {int(la.roce_tos)} "
                f"-s {size} -n {int(la.perftest_iterations)} -F")

    address = server.data_address or server.address
    return server.name, base(server), client.name, f"{base(client)} {q('host', address)}"


def _stop(*procs: RemoteProcess | None) -> None:
    for p in procs:
        if p is not None:
            try:
                p.kill()
            except Exception as exc:  # noqa: BLE001 - stopping is best effort, keep going
                log.warning("could not stop %s: %s", p.command[:60], exc)


def run_measurement(cluster: SshCluster, workload: Workload,
                    monitor: Monitor | None) -> Measurement:
    """Counters, collectives (+ latency probe under load), monitor polls, counters."""
    from objectives.parsers import parse_perftest

    inv = cluster.inventory
    t0 = time.monotonic()
    limit = float(workload.time_limit_s)
    notes: list[str] = []
    if workload.background:
        notes.append("background parts are not generated by the ssh backend: run the "
                     "competing traffic outside the tuner")
    before = cluster.counters()
    parts = workload.collectives
    coll: RemoteProcess | None = None
    server = client = None
    raw: dict[str, str] = {}
    try:
        if parts:
            coll = cluster.pool[inv.launcher.host].start(
                collectives_script(inv, parts), timeout_s=limit)
        if workload.probes:
            s_host, s_cmd, c_host, c_cmd = perftest_commands(inv, workload.probes[0])
            if coll is not None and inv.launcher.probe_delay_s > 0:
                coll.running(inv.launcher.probe_delay_s)  # pumps output while waiting
                if not coll.running(0.0):
                    notes.append("the collectives ended before the latency probe started: "
                                 "lower launcher.probe_delay_s")
            server = cluster.pool[s_host].start(s_cmd, timeout_s=limit)
            _wait_listening(server)
            client = cluster.pool[c_host].start(c_cmd, timeout_s=limit)
        first = coll or client
        if first is not None:
            _poll(cluster, monitor, first, t0, limit)
        if coll is not None:
            res = coll.wait(check=False)
            raw["nccl"] = res.stdout + res.stderr
            if res.status in (124, 137):
                raise MeasurementError(f"collectives timed out after {limit:.0f} s "
                                       f"(time_limit_s) on {inv.launcher.host}")
            if client is not None and client.running():
                notes.append("latency probe outlived the collectives: its tail mixes loaded "
                             "and idle samples; lower launcher.perftest_iterations")
                _poll(cluster, monitor, client, t0, limit)
        lat = None
        if client is not None:
            cres = client.wait(check=False)
            raw["perftest"] = cres.stdout + cres.stderr
            if cres.status != 0:
                _stop(server)
            elif server is not None:
                sres = server.wait(check=False)
                raw["perftest_server"] = sres.stdout + sres.stderr
            if cres.status != 0:
                raise MeasurementError(
                    f"{inv.launcher.perftest_bin} on {client.conn.name} failed "
                    f"({'timed out' if cres.status in (124, 137) else f'exit {cres.status}'})"
                    f": {_tail(cres.stderr or cres.stdout)}")
            lat = parse_perftest(raw["perftest"]).run.latency_result()
    except SafetyAbort:
        _stop(coll, client, server)
        raise
    except CommandError as exc:
        _stop(coll, client, server)
        raise MeasurementError(f"measurement command failed: {exc}") from exc
    except BaseException:
        _stop(coll, client, server)
        raise
    collectives = collective_results(raw.get("nccl", ""), parts, inv)
    after = cluster.counters()
    notes += absent_counter_notes(after, inv)
    return Measurement(collectives=collectives, latency=lat, counters_before=before,
                       counters_after=after, duration_s=time.monotonic() - t0, raw=raw,
                       notes=notes)


def _wait_listening(server: RemoteProcess, timeout_s: float = 3.0) -> None:
    """Give the perftest server time to listen (it prints its banner first)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not server.running(0.05):
            res = server.wait(check=False)
            raise MeasurementError(f"perftest server on {server.conn.name} exited early "
                                   f"(status {res.status}): {_tail(res.stderr or res.stdout)}")
        out = server.output_so_far()
        if "Waiting for client" in out or "-" * 20 in out:
            return
    return


def _poll(cluster: SshCluster, monitor: Monitor | None, proc: RemoteProcess,
          t0: float, limit: float) -> None:
    """Wait for ``proc``; meanwhile feed the monitor counters every ``interval_s``."""
    interval = max(0.05, float(monitor.interval_s)) if monitor is not None else 0.5
    next_poll = time.monotonic() + interval
    while proc.running(max(0.0, next_poll - time.monotonic())):
        if time.monotonic() - t0 > limit + 15:
            raise MeasurementError(f"measurement exceeded time_limit_s={limit:.0f} s")
        if time.monotonic() >= next_poll:
            if monitor is not None:
                monitor.poll(cluster.counters(), time.monotonic() - t0)
            next_poll = time.monotonic() + interval


def _tail(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:]) or "(no output)"


def split_parts(text: str, count: int) -> list[tuple[str, int | None]]:
    """The output and exit status of each part of ``collectives_script``."""
    out: list[tuple[str, int | None]] = []
    pos = 0
    for m in _RC.finditer(text):
        out.append((text[pos:m.start()], int(m.group(2))))
        pos = m.end()
    if len(out) < count:  # killed or cut short: the rest has no status
        out.append((text[pos:], None))
    return out[:count] + [("", None)] * (count - len(out))


def collective_results(text: str, parts: list[CollectivePart], inv: Inventory
                       ) -> list[CollectiveResult]:
    """Parse every part's nccl-tests output; a failed part raises ``MeasurementError``."""
    from objectives.parsers import parse_nccl_tests

    np_, _ = hostlist(inv)
    line_rate = max((h.nic_gbps for h in inv.hosts), default=0.0) / 8.0
    results: list[CollectiveResult] = []
    for part, (chunk, rc) in zip(parts, split_parts(text, len(parts)), strict=True):
        what = f"{BINARIES[part.op]} -b {part.size_bytes}"
        warns = _WARN.findall(chunk)
        if warns:
            raise MeasurementError(f"{what}: {warns[0].strip()}")
        if rc is None:
            raise MeasurementError(f"{what}: no exit status (killed or cut short): "
                                   f"{_tail(chunk)}")
        try:
            parsed = parse_nccl_tests(chunk)
        except ParseError as exc:
            if rc != 0:
                raise MeasurementError(f"{what} exited {rc}: {_tail(chunk)}") from None
            raise MeasurementError(f"{what}: unreadable output: {exc}") from None
        if parsed.nccl_warnings:
            raise MeasurementError(f"{what}: {parsed.nccl_warnings[0]}")
        if parsed.failed:  # nccl-tests also exits 1 then: say why
            raise MeasurementError(f"{what}: data check failed (#wrong = {parsed.wrong_total}"
                                   f", out of bounds = {parsed.out_of_bounds}; exit {rc})")
        if rc != 0:
            raise MeasurementError(f"{what} exited {rc}: {_tail(chunk)}")
        rows = parsed.collective_results(part.op, parsed.nranks or np_,
                                         line_rate_gbytes_per_s=line_rate)
        row = next((r for r in rows if r.size_bytes == part.size_bytes), None)
        if row is None:
            raise MeasurementError(f"{what}: no result row for {part.size_bytes} bytes")
        results.append(row.model_copy(update={"weight": part.weight}))
    return results


def absent_counter_notes(after: Counters, inv: Inventory) -> list[str]:
    """One note per expected counter a port does not expose: absent is not zero."""
    notes = []
    for h in inv.hosts:
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
