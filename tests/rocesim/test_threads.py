"""The kernel releases the GIL while it runs: a worker's lease thread (tuner/lease.py) and the
SSH dead-man renewals must keep beating while a simulation computes in the main thread."""

from __future__ import annotations

import threading
import time

import numpy as np

from rocesim import Fabric, Simulation, Topology, Workload
from rocesim.workload import Background


def test_other_threads_run_while_the_kernel_computes() -> None:
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=16))
    sim = Simulation(fab, Workload(background=[Background("incast", 1.0, 15)]),
                     max_time_us=10**6)
    sim.advance(10)  # compiled / loaded from the cache before the timed call
    beats: list[float] = []
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            beats.append(time.perf_counter())
            time.sleep(0.005)

    th = threading.Thread(target=beat)
    th.start()
    time.sleep(0.05)
    t0 = time.perf_counter()
    sim.advance(100_000)  # one kernel call of ~0.1-0.2 s
    t1 = time.perf_counter()
    stop.set()
    th.join()
    inside = [b for b in beats if t0 < b < t1]
    gaps = np.diff([t0, *inside, t1])
    # Holding the GIL, the thread beats at most once during the call (the gap is the call).
    assert len(inside) >= 3 and gaps.max() < 0.5 * (t1 - t0), (t1 - t0, len(inside))
