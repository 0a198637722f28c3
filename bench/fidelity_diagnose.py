"""Diagnostics behind docs/fidelity.md's "Remaining misses", each against the reference's
own 10-µs / 1-µs samples (shared/reference/packet-level/runs/<run>/sample.txt.gz, seed-1 runs):

  lockstep RUN [RUN ...]  how much an incast's senders move together in the steady window:
                          mean pairwise correlation of the flows' DCQCN rates (10-µs samples),
                          the share of rate-cut instants (a 10-µs step down of > 1 % of line
                          rate) at which more than half the flows cut together, and the share
                          of samples with every flow at the same rate (phase-locked pacing).
  uplinks RUN KMIN_KB     per leaf uplink of a leaf-spine run, over the steady window:
                          utilisation, mean queue, share of 1-µs queue samples above Kmin, and
                          ECN marks.
  feedback RUN            how late the first CNP reaches each sender of a leaf-spine run
                          (reference: first 10-µs sample with a CNP-flagged ACK), and each leaf
                          uplink's queue peak in the first 200 µs; ``--cnp-prio 6`` runs
                          rocesim with CNPs in a strict priority of their own.
  probes RUN              rocesim only (the shipped runs have no probes): probe p50/p99 over
                          the run's first 1.5 ms, measured one way (``Probes(until="arrival")``)
                          and until the ACK is back (``until="ack"``, the reference's flow
                          completion time), 8 pairs every 10 µs.
  fct RUN [RUN ...]       per-flow completion times (the reference's fct.txt against rocesim's
                          time to deliver each flow's last byte, 1-µs steps): p50, p90, p99 and
                          the spread last/first.

rocesim runs the same scenario through bench/fidelity.py's mapping (``--seed`` for rocesim's
seed; the reference sample is always its seed 1). Run::

    .venv/bin/python bench/fidelity_diagnose.py lockstep inc8_200g_kD_paper_s1
    .venv/bin/python bench/fidelity_diagnose.py uplinks ls4x2x4_up100g_ring4_kB_mlx_s1 100
    .venv/bin/python bench/fidelity_diagnose.py feedback ls4x2x4_up100g_ring4_kB_mlx_s1
    .venv/bin/python bench/fidelity_diagnose.py probes ls4x2x4_up100g_a2a_kA_mlx_s1
    .venv/bin/python bench/fidelity_diagnose.py fct ls4x2x4_up100g_a2a_kA_mlx_s1
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fidelity as F  # noqa: E402

from rocesim import Background, Probes, Simulation, Workload  # noqa: E402
from rocesim._state import ACTIVE, C_MARKS, C_TX, RC, TOTDEL  # noqa: E402

RUNS = F.ROOT.parent / "shared" / "reference" / "packet-level" / "runs"


def _samples(run: str, kinds: str) -> dict[str, dict[int, list[list[float]]]]:
    """kind -> node -> rows [t_ns, values...] of the reference's sample.txt.gz."""
    out: dict[str, dict[int, list[list[float]]]] = {k: {} for k in kinds}
    with gzip.open(RUNS / run / "sample.txt.gz", "rt") as fh:
        for line in fh:
            if line[0] in kinds:
                p = line.split()
                out[line[0]].setdefault(int(p[2]), []).append(
                    [float(p[1])] + [float(v) for v in p[3:]])
    return out


def _window(run: str) -> tuple[float, float]:
    a, b = json.loads((RUNS / run / "results.json").read_text())["windows_ms"]["steady"]
    return float(a), float(b)


def _tap(case: F.Case, cnp_prio: int | None = None) -> tuple[F._Tap, list[tuple[int, int]]]:
    fab = F.fabric_for(case)
    if cnp_prio is not None:
        for nic in fab.nic_names:
            fab.set_dcqcn(nic, dataclasses.replace(fab.dcqcn(nic), cnp_802p_prio=cnp_prio))
    pairs = F.flows_for(case)
    names = fab.nic_names
    wl = Workload(background=[Background("incast", 1.0, 1, [names[d], names[s]])
                              for s, d in pairs])
    return F._Tap(fab, wl, case.seed, 300_000, float(F.wire_bytes(case.flow_bytes))), pairs


def lockstep_stats(rates: np.ndarray, line_bps: float) -> tuple[float, float]:
    """(mean pairwise correlation, share of cut instants where > half the flows cut)."""
    c = np.corrcoef(rates.T)
    pair = float(np.mean([c[i, j] for i, j in
                          itertools.combinations(range(rates.shape[1]), 2)]))
    cuts = np.diff(rates, axis=0) < -0.01 * line_bps
    instants = cuts.any(axis=1)
    together = float((cuts.sum(axis=1) > rates.shape[1] / 2)[instants].mean()) \
        if instants.any() else 0.0
    return pair, together


def lockstep(run: str, seed: int) -> None:
    a, b = _window(run)
    rows: dict[float, dict[int, float]] = {}
    for host, rs in _samples(run, "R")["R"].items():
        for r in rs:
            rows.setdefault(r[0], {})[host] = r[3]  # R t host dst sport rate_bps ...
    ts = sorted(rows)
    hosts = sorted(rows[ts[0]])
    ref = np.array([[rows[t].get(h, np.nan) for h in hosts] for t in ts])
    tm = (np.array(ts) - ts[0]) / 1e6 + 0.01  # first sample 10 µs after the start
    ref = ref[(tm >= a) & (tm <= b)]
    case = dataclasses.replace(F.parse_case(run), seed=seed)
    tap, pairs = _tap(case)
    sim, n, size = tap.sim, len(pairs), float(F.wire_bytes(case.flow_bytes))
    out = []
    while not (sim.ff[:n, TOTDEL] >= size * (1 - 1e-9)).any():
        sim.advance(10.0)
        out.append(sim.ff[:n, RC] * 8e6)  # bytes/µs -> bit/s
    tsim = np.arange(1, len(out) + 1) * 0.01
    line = case.ref_gbps * 1e9
    for label, m in (("reference", ref), (f"rocesim seed {seed}", np.array(out)[tsim >= a])):
        pair, together = lockstep_stats(m, line)
        same = float(np.mean(np.ptp(m, axis=1) <= 1e-6 * np.max(m, axis=1)))
        print(f"{run} {label}: pairwise rate correlation {pair:.2f}, cut instants with more "
              f"than half the flows cutting {together:.2f}, samples with every flow at the "
              f"same rate {same:.2f}")


def uplinks(run: str, kmin_kb: float, seed: int) -> None:
    a, b = _window(run)
    kmin = kmin_kb * 1000
    smp = _samples(run, "QTM")
    t0 = min(r[0] for rs in smp["Q"].values() for r in rs)
    case = dataclasses.replace(F.parse_case(run), seed=seed)
    fab = F.fabric_for(case)
    leaves = [i for i, s in enumerate(fab.switch_names) if s.startswith("leaf")]
    n_hosts = len(fab.nic_names)
    for k, sw in enumerate(leaves):
        node = n_hosts + sw  # the reference numbers hosts first, then switches
        for port in (5, 6):  # leaf ports 1-4 face hosts, 5-6 the spines
            q = np.array([r[port] for r in smp["Q"][node]])
            tq = (np.array([r[0] for r in smp["Q"][node]]) - t0) / 1e6
            tt = (np.array([r[0] for r in smp["T"][node]]) - t0) / 1e6
            tb = np.array([r[port] for r in smp["T"][node]])
            mk = np.array([r[port] for r in smp["M"][node]])
            ia, ib = int(np.argmin(abs(tt - a))), int(np.argmin(abs(tt - b)))
            util = (tb[ib] - tb[ia]) / (case.uplink_gbps * 1e9 / 8 * (tt[ib] - tt[ia]) / 1e3)
            w = q[(tq >= a) & (tq <= b)]
            print(f"reference leaf{k} port {port}: util {util:.2f}, q mean {w.mean() / 1e3:.1f} "
                  f"KB, above Kmin {np.mean(w > kmin):.2f}, marks {mk[ib] - mk[ia]:.0f}")
    tap, _ = _tap(case)
    sim = tap.sim
    links = np.array([i for i, ln in enumerate(fab.links)
                      if ln.src.startswith("leaf") and ln.dst.startswith("spine")])
    marks, tx = [], []
    while sim.t < int(b * 1000) + 1:
        sim.advance(1.0)
        marks.append(sim.l_counters[links, 0, C_MARKS].copy())
        tx.append(sim.l_counters[links, 0, C_TX].copy())
    q = tap.queues(links)
    ia, ib = int(a * 1000), int(b * 1000)
    for j, li in enumerate(links):
        ln = fab.links[li]
        util = (tx[ib - 1][j] - tx[ia - 1][j]) / (ln.gbps * 1e3 / 8 * (ib - ia))
        w = q[ia:ib, j]
        print(f"rocesim seed {seed} {ln.src_port}: util {util:.2f}, q mean "
              f"{w.mean() / 1e3:.1f} KB, above Kmin {np.mean(w > kmin):.2f}, marks "
              f"{marks[ib - 1][j] - marks[ia - 1][j]:.0f}")


def feedback(run: str, seed: int, cnp_prio: int | None) -> None:
    smp = _samples(run, "QR")
    t0 = min(r[0] for rs in smp["Q"].values() for r in rs)
    ref_first = {h: min(((r[0] - t0) / 1e3 for r in rs if r[5] > 0), default=math.nan)
                 for h, rs in smp["R"].items()}  # R t host dst sport rate acked cnp_acks
    case = dataclasses.replace(F.parse_case(run), seed=seed)
    tap, pairs = _tap(case, cnp_prio)
    sim, fab = tap.sim, tap.sim.fabric
    first = np.full(len(pairs), math.nan)
    while sim.t < 200:
        sim.advance(1.0)
        hit = (sim.fi[: len(pairs), ACTIVE] == 1) & np.isnan(first)
        first[hit] = sim.t
    for i, (s, d) in enumerate(pairs):
        print(f"flow {s}->{d}: first CNP at the sender, reference {ref_first.get(s, math.nan):.0f}"
              f" µs (10-µs samples), rocesim seed {seed} {first[i]:.0f} µs")
    hpl = fab.topo.hosts_per_leaf
    ports = [(F.LEAF0 + leaf, hpl + 1 + up) for leaf in range(fab.topo.n_leaves)
             for up in range(fab.topo.spines)]  # every leaf uplink, reference numbering
    links = [F.ref_port_link(fab, f"{node}:{port}") for node, port in ports]
    q = tap.queues(np.array(links))[:200]
    for j, (li, (node, port)) in enumerate(zip(links, ports, strict=True)):
        ln = fab.links[li]
        ref = max(r[port] for r in smp["Q"][node] if (r[0] - t0) / 1e3 < 200)
        print(f"{ln.src_port} (reference node {node} port {port}): queue peak in the first 200 "
              f"µs, reference {ref / 1e3:.0f} KB, rocesim {q[:, j].max() / 1e3:.0f} KB")


def probes(run: str, seed: int) -> None:
    case = dataclasses.replace(F.parse_case(run), seed=seed)
    fab = F.fabric_for(case)
    names = fab.nic_names
    flows = [Background("incast", 1.0, 1, [names[d], names[s]]) for s, d in F.flows_for(case)]
    got = {}
    for until in ("arrival", "ack"):
        wl = Workload(background=flows, probes=Probes(pairs=8, interval_us=10, until=until))
        lat = np.asarray(Simulation(fab, wl, seed=seed, max_time_us=1500).run().latency_us)
        got[until] = np.percentile(lat, [50, 99])
        print(f"{run} rocesim seed {seed}, until {until}: probe p50 {got[until][0]:.1f} µs, "
              f"p99 {got[until][1]:.1f} µs ({lat.size} samples)")
    ratio = got["ack"] / got["arrival"]
    print(f"until ack / arrival: p50 x{ratio[0]:.2f}, p99 x{ratio[1]:.2f}")


def fct(run: str, seed: int) -> None:
    ref = np.array([int(line.split()[6]) / 1e3 for line in
                    (RUNS / run / "fct.txt").read_text().splitlines() if line.strip()])
    case = dataclasses.replace(F.parse_case(run), seed=seed)
    tap, pairs = _tap(case)
    sim, size_w = tap.sim, float(F.wire_bytes(case.flow_bytes))
    got = np.full(len(pairs), math.nan)
    while np.isnan(got).any() and not sim.done:
        sim.advance(1.0)
        got[np.isnan(got) & (tap.delivered() >= size_w * (1 - 1e-9))] = sim.t
    for name, x in (("reference", ref), (f"rocesim seed {seed}", got)):
        p50, p90, p99 = np.percentile(x, [50, 90, 99])
        print(f"{run} {name}: {x.size} flows, FCT p50 {p50:.0f} µs, p90 {p90:.0f}, p99 "
              f"{p99:.0f}, last/first {x.max() / x.min():.2f}")
    r = np.percentile(got, [50, 90, 99]) / np.percentile(ref, [50, 90, 99]) - 1
    print(f"rocesim against the reference: p50 {r[0]:+.1%}, p90 {r[1]:+.1%}, p99 {r[2]:+.1%}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("lockstep")
    p.add_argument("runs", nargs="+")
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("uplinks")
    p.add_argument("run")
    p.add_argument("kmin_kb", type=float)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("feedback")
    p.add_argument("run")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cnp-prio", type=int, choices=range(8))
    p = sub.add_parser("probes")
    p.add_argument("run")
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("fct")
    p.add_argument("runs", nargs="+")
    p.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if not RUNS.is_dir():
        print(f"fidelity_diagnose: no reference runs at {RUNS}", file=sys.stderr)
        return 2
    if args.cmd == "lockstep":
        for run in args.runs:
            lockstep(run, args.seed)
    elif args.cmd == "uplinks":
        uplinks(args.run, args.kmin_kb, args.seed)
    elif args.cmd == "probes":
        probes(args.run, args.seed)
    elif args.cmd == "fct":
        for run in args.runs:
            fct(run, args.seed)
    else:
        feedback(args.run, args.seed, args.cnp_prio)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
