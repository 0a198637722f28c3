"""Stand-in perftest ``ib_write_lat`` (RoCE), latency from rocesim probes, in real time.

Server (no peer argument) waits for a client on its port (``-p``); the client
(``ib_write_lat [opts] <server>``) needs a waiting server on that port, like the real tool.
The client takes its ``-n`` samples in real time, one every ``--latency_gap`` µs plus the
round trip, and each sample sees the fabric as it is at that moment: under load while an
emulated ``mpirun`` moves traffic (its rocesim probes), idle otherwise (background flows
only). A probe started before the collectives therefore ends fast on an idle fabric, as it
would on hardware. The command line is judged by the real binary where it is installed
(``_perftest.real_verdict``); ``-T`` needs ``-R``. Formats: shared/reference/perftest/
FORMAT-NOTES.md (REPORT_FMT_LAT with TABs; ``-D`` rows).
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from tuner.emulated import fabric
from tuner.emulated.tools._base import Target
from tuner.emulated.tools._perftest import LINE, Usage, banner, connect, finish, run

TOOL = "ib_write_lat"
CHUNK = 100  # samples taken per look at the fabric


SETTINGS = [" PCIe relax order: OFF", " ibv_wr* API     : ON", " TX depth        : 1"]


def _render(o: dict[str, Any], local: dict[str, Any], remote: dict[str, Any],
            stats: dict[str, Any]) -> str:
    return banner("RDMA_Write Latency Test", SETTINGS, 220, o, local, remote) + _report(o, stats)


def _take(t: Target, peer: dict[str, Any], o: dict[str, Any], seed: str) -> list[float]:
    """``-n`` samples in real time, each from the fabric as it is when it is taken."""
    rng = random.Random(seed)
    idle: list[float] | None = None
    out: list[float] = []
    while len(out) < o["iters"]:
        running = fabric.active(t.root, "mpirun")
        pool = [x for r in running for x in r.get("samples_us", [])]
        if not pool:
            if idle is None:
                idle = fabric.idle_samples(t.root, t.state["rocesim_nic"], peer["rocesim_nic"],
                                           o["size"])
            pool = idle
        if not pool:
            raise Usage(" Completion with error at client\n Failed status 12: wr_id 0 syndrom "
                        "0x81")
        chunk = [rng.choice(pool) for _ in range(min(CHUNK, o["iters"] - len(out)))]
        out += chunk
        time.sleep(sum(x + o["gap"] for x in chunk) / 1e6)
    return out


def _stats(draw: list[float]) -> dict[str, float]:
    draw = sorted(draw)

    def pct(p: float) -> float:
        return draw[min(len(draw) - 1, int(p * len(draw)))]

    avg = sum(draw) / len(draw)
    std = (sum((x - avg) ** 2 for x in draw) / len(draw)) ** 0.5
    return {"t_min": draw[0], "t_max": draw[-1], "t_typical": draw[len(draw) // 2],
            "t_avg": avg, "t_stdev": std, "p99": pct(0.99), "p999": pct(0.999)}


def _report(o: dict[str, Any], r: dict[str, Any]) -> str:
    if o["duration"]:
        head = " #bytes        #iterations       t_avg[usec]    tps average"
        tps = 1e6 / (2 * r["t_avg"])
        row = f" {o['size']:<7d}       {r['iters']:<10d}         {r['t_avg']:<7.2f}" \
              f"        {tps:<7.2f}"
        return f"{head}\n{row}\n{LINE}\n"
    head = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
            "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
    row = (f" {o['size']:<7d} {r['iters']}          {r['t_min']:<7.2f}        "
           f"{r['t_max']:<7.2f}      {r['t_typical']:<7.2f}  \t       {r['t_avg']:<7.2f}     "
           f"\t{r['t_stdev']:<7.2f}\t\t{r['p99']:<7.2f} \t\t{r['p999']:<7.2f}")
    return f"{head}\n{row}\n{LINE}\n"


def main(argv: list[str]) -> int:
    return run(TOOL, argv, _render, _client)


def _client(t: Target, o: dict[str, Any]) -> int:
    name, peer = connect(t, o, TOOL)
    samples = _take(t, peer, o, f"{t.name}-{name}-{o['size']}-{o['port']}")
    if o["duration"]:
        time.sleep(float(o["duration"]))
        avg = sum(samples) / len(samples)
        stats = {"t_avg": avg, "iters": int(o["duration"] * 1e6 / (2 * avg))}
    else:
        stats = {**_stats(samples), "iters": o["iters"]}
    return finish(t, o, name, peer, stats, _render)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
