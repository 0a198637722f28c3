"""The rocesim fabric behind an emulated cluster: settings in, counters and numbers out.

``run`` reads the settings ACTUALLY applied on every emulated target (the fake /sys trees and
the switches' applied config), builds ``rocesim.Fabric`` from ``topology.json``, simulates, adds
the resulting counters to every target's state (so ``ethtool -S``, hw_counters and
``show pfc counters`` move). Running traffic (collectives, ``ib_write_bw`` flows) is announced
under ``<root>/traffic/`` so that a probe sees load only while load is there.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tuner.emulated import hosts as hostmod
from tuner.emulated import state as st
from tuner.emulated import switches as swmod

# Above this, a collective is bandwidth-bound: simulate this size and scale time linearly, so a
# 128 MiB sweep point does not cost minutes of simulated microseconds.
MAX_SIM_BYTES = 16 * 2**20
MAX_SIM_ITERATIONS = 3
WIRE_PACKET_BYTES = 4096  # RoCE payload per packet (rocesim Topology.payload_bytes default)


@dataclass
class SizeResult:
    size_bytes: int
    time_us: float  # mean per iteration
    algbw: float
    busbw: float
    completed: bool


def load_topology(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / "topology.json").read_text()))


def targets(root: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for d in sorted(root.iterdir()):
        if (d / "state.json").exists():
            out[d.name] = st.load_state(d)
    return out


def applied_settings(root: Path) -> dict[str, Any]:
    """``{"switches": {leaf: ecn dict}, "nics": {nic: knob dict}}`` as the devices hold them."""
    sw: dict[str, Any] = {}
    nics: dict[str, Any] = {}
    for name, s in targets(root).items():
        if s["kind"] == "switch":
            sw[s["rocesim_name"]] = swmod.applied_ecn(s)
        else:
            # tuner.settings defaults stored at init (no pydantic), and the NP knobs it does
            # not tune (cnp_802p_prio decides whether CNPs queue behind data in rocesim).
            factory = {**hostmod.EXTRA_DEFAULTS, **s["factory_dcqcn"]}
            for view in hostmod.rail_views(s):  # every rail is its own rocesim NIC
                values = hostmod.read_knobs(root / name, view)
                # An unparsable file would have been refused by the driver: the NIC keeps its
                # value.
                nics[view["rocesim_nic"]] = {k: (v if v is not None else factory[k])
                                             for k, v in values.items() if k in factory}
    return {"switches": sw, "nics": nics}


def build_fabric(root: Path, settings: dict[str, Any]) -> Any:
    import rocesim

    topo = load_topology(root)
    seed = int(topo.get("seed", 1))
    kwargs = {k: topo[k] for k in ("kind", "leaves", "spines", "hosts_per_leaf",
                                   "nics_per_host", "nic_gbps", "buffer_bytes",
                                   "pfc_alpha_log2") if k in topo}
    fabric = rocesim.Fabric(rocesim.Topology(**kwargs), seed=seed)
    for sw, ecn in settings["switches"].items():
        kmin, kmax = int(ecn["kmin_bytes"]), int(ecn["kmax_bytes"])
        if kmin >= kmax:  # a device holding kmin >= kmax marks at kmin (step function)
            kmax = kmin + 1
        fabric.set_ecn(sw, rocesim.EcnConfig(kmin_bytes=kmin, kmax_bytes=kmax,
                                             pmax=int(ecn["pmax_percent"]) / 100.0,
                                             enabled=bool(ecn["enabled"])), tc=3)
    modelled = {f.name for f in fields(rocesim.DcqcnConfig)}  # not cnp_dscp
    for nic, knobs in settings["nics"].items():
        fabric.set_dcqcn(nic, rocesim.DcqcnConfig(**{k: v for k, v in knobs.items()
                                                     if k in modelled}))
    return fabric


def background(root: Path, nics: list[str]) -> list[Any]:
    """rocesim background flows: the topology's "other tenants" plus every running emulated
    ``ib_write_bw`` client (one flow, its rate limit, its class)."""
    import rocesim

    out = []
    for bg in load_topology(root).get("background", []):
        out.append(rocesim.Background(**{**bg, "nics": bg.get("nics") or nics}))
    for f in active(root, "bw"):
        if f["src"] in nics and f["dst"] in nics and f["src"] != f["dst"]:
            out.append(rocesim.Background(pattern="incast", fan_in=1, nics=[f["dst"], f["src"]],
                                          load=min(1.0, max(1e-3, f["load"])),
                                          priority=f["priority"]))
    return out


TRAFFIC = "traffic"  # <root>/traffic/<kind>-<pid>.json: what runs on the fabric right now


@contextlib.contextmanager
def traffic(root: Path, kind: str, data: dict[str, Any]) -> Iterator[Path]:
    """Announce running traffic (``mpirun`` collectives, ``ib_write_bw`` flows) until exit."""
    path = root / TRAFFIC / f"{kind}-{os.getpid()}.json"
    path.parent.mkdir(exist_ok=True)
    st.write_json(path, {"pid": os.getpid(), **data})
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def active(root: Path, kind: str, at: float | None = None) -> list[dict[str, Any]]:
    """Traffic of ``kind`` running at wall time ``at`` (default now) by a live process."""
    now = time.time() if at is None else at
    out = []
    for path in sorted((root / TRAFFIC).glob(f"{kind}-*.json")):
        d = st.read_json(path)
        if not d or not alive(int(d.get("pid", 0))):
            continue
        if d.get("start", 0.0) <= now <= d.get("end", float("inf")):
            out.append(d)
    return out


def alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def idle_samples(root: Path, a_nic: str, b_nic: str, size: int) -> list[float]:
    """Probe latencies with no collective running (the background flows still run)."""
    import rocesim

    settings = applied_settings(root)
    fab = build_fabric(root, settings)
    bg = background(root, fab.nic_names) or [
        rocesim.Background(pattern="permutation", load=0.01, nics=fab.nic_names)]
    res = rocesim.simulate(fab, rocesim.Workload(
        background=bg, probes=rocesim.Probes(pairs=2, nics=[a_nic, b_nic], size_bytes=size)),
        seed=int(load_topology(root).get("seed", 1)), max_time_us=3000)
    return [float(x) for x in res.latency_us.tolist()]


def run_collective(root: Path, op: str, ranks: list[str], sizes: list[int], iters: int,
                   counted_iters: int | None = None, probe_pairs: int = 2,
                   algo: str = "ring") -> tuple[list[SizeResult], list[float]]:
    """One simulation per size, with NCCL's algorithm ``algo`` (``ring`` or ``tree``);
    counters of every run are added to the targets, scaled to ``counted_iters`` (nccl-tests
    runs warmup + out-of-place + in-place iterations). Also returns the latencies of probes
    between the ranks while the collective ran."""
    counted = iters if counted_iters is None else counted_iters
    import rocesim

    settings = applied_settings(root)
    fabric = build_fabric(root, settings)
    seed = int(load_topology(root).get("seed", 1))
    results: list[SizeResult] = []
    lat: list[float] = []
    for size in sizes:
        sim_size = min(size, MAX_SIM_BYTES)
        scale = size / sim_size
        workload = rocesim.Workload(
            collectives=[rocesim.Collective(op, sim_size, ranks,  # type: ignore[arg-type]
                                            iterations=min(iters, MAX_SIM_ITERATIONS),
                                            algo=algo)],  # type: ignore[arg-type]
            background=background(root, fabric.nic_names),
            probes=rocesim.Probes(pairs=probe_pairs, nics=ranks))
        res = rocesim.simulate(fabric, workload, seed=seed)
        c = res.collectives[0]
        t_us = (sum(c.iteration_times_us) / len(c.iteration_times_us)) * scale \
            if c.iteration_times_us else float("nan")
        algbw = size / 1e9 / (t_us / 1e6) if t_us == t_us and t_us > 0 else 0.0
        n = len(ranks)
        factor = 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
        results.append(SizeResult(size, t_us, algbw, algbw * factor, c.completed))
        simulated = max(1, min(iters, MAX_SIM_ITERATIONS))
        distribute_counters(root, res.counters, counted / simulated * scale)
        lat.extend(float(x) for x in res.latency_us.tolist())
    return results, lat[:20000]


def distribute_counters(root: Path, counters: dict[str, dict[str, int]], scale: float) -> None:
    """rocesim port counters -> each emulated target's counters (scaled to the iterations run)."""
    all_targets = targets(root)
    by_nic = {v["rocesim_nic"]: (n, v) for n, s in all_targets.items() if s["kind"] == "host"
              for v in hostmod.rail_views(s)}
    by_leaf = {s["rocesim_name"]: (n, s) for n, s in all_targets.items()
               if s["kind"] == "switch"}
    sw_deltas: dict[str, dict[str, dict[str, int]]] = {}
    for port, cnts in counters.items():
        c = {k: int(v * scale) for k, v in cnts.items()}
        if port in by_nic:
            name, s = by_nic[port]
            _host_counters(root / name, s, c)
            continue
        dev, _, ifname = port.partition("/")
        if dev not in by_leaf:
            continue  # spine ports are not emulated targets
        name, s = by_leaf[dev]
        local = ifname if s["platform"] == "sonic" else f"swp{int(ifname[8:]) // 4 + 1}"
        sw_deltas.setdefault(name, {})[local] = _switch_counters(c)
    for name, deltas in sw_deltas.items():
        st.add_counters(root / name, deltas)


def _host_counters(tdir: Path, s: dict[str, Any], c: dict[str, int]) -> None:
    prio = int(s.get("roce_priority", 3))
    rx_b, tx_b = c.get(f"rx_prio{prio}_bytes", 0), c.get(f"tx_prio{prio}_bytes", 0)
    rx_p, tx_p = -(-rx_b // WIRE_PACKET_BYTES), -(-tx_b // WIRE_PACKET_BYTES)
    eth = {k: v for k, v in c.items() if k.startswith(("rx_prio", "tx_prio"))}
    eth.update({f"rx_prio{prio}_packets": rx_p, f"tx_prio{prio}_packets": tx_p,
                "rx_bytes": rx_b, "tx_bytes": tx_b, "rx_packets": rx_p, "tx_packets": tx_p,
                "rx_bytes_phy": rx_b, "tx_bytes_phy": tx_b, "rx_packets_phy": rx_p,
                "tx_packets_phy": tx_p,
                "rx_pause_ctrl_phy": c.get(f"rx_prio{prio}_pause", 0),
                "tx_pause_ctrl_phy": c.get(f"tx_prio{prio}_pause", 0),
                "rx_discards_phy": c.get(f"rx_prio{prio}_discards", 0)})
    st.add_counters(tdir, {s["netdev"]: eth})
    names = ("np_cnp_sent", "np_ecn_marked_roce_packets", "rp_cnp_handled", "rp_cnp_ignored")
    hw: dict[str, int] = {k: c[k] for k in names if k in c}
    hw["rx_write_requests"] = rx_p
    with st.locked(tdir):  # collective parts run at once: concurrent mpiruns add counters
        hostmod.add_hw_counters(tdir, s, hw)


def _switch_counters(c: dict[str, int]) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in range(8):
        tx = c.get(f"queue{q}_tx_bytes", 0)
        if tx:
            out[f"q{q}_bytes"] = tx
            out[f"q{q}_pkts"] = -(-tx // WIRE_PACKET_BYTES)
        marked = c.get(f"queue{q}_ecn_marked_pkts", 0)
        if marked:
            out[f"q{q}_ecn_marked_pkts"] = marked
            out[f"q{q}_ecn_marked_bytes"] = marked * WIRE_PACKET_BYTES
        drops = c.get(f"queue{q}_drop_pkts", 0)
        if drops:
            out[f"q{q}_drop_pkts"] = drops
            out[f"q{q}_drop_bytes"] = drops * WIRE_PACKET_BYTES
        for src, dst in ((f"pfc{q}_rx_pkts", f"pfc_rx_{q}"), (f"pfc{q}_tx_pkts", f"pfc_tx_{q}"),
                         (f"pfc{q}_rx_pause_us", f"pfc_rx_dur_{q}"),
                         (f"pfc{q}_tx_pause_us", f"pfc_tx_dur_{q}"),
                         (f"pfcwd{q}_storm_detected", "pfcwd_storm_detected")):
            if c.get(src):
                out[dst] = out.get(dst, 0) + c[src]
    return out
