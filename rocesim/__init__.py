"""rocesim: a fast, time-stepped simulated RoCE fabric (the tuner's default backend).

Modelled: leaf-spine or single-switch topologies with per-flow ECMP; per-switch, per-queue
RED/ECN marking drawn per packet at dequeue; PFC with per-(ingress port, priority) buffer
accounting, dynamic/static XOFF, resume offset, headroom, pause refresh frames, a watchdog
report; DCQCN at every NIC with ConnectX semantics and units; NCCL-like ring and AlltoAll
collectives, background traffic and latency probes; device-named counters.
Not modelled: retransmission timing (go-back-N), adaptive routing, NIC receive-side pauses,
PFC deadlocks and watchdog actions, GPU/NVLink time. See ``rocesim.engine`` for the step.

Example::

    from rocesim import Topology, Fabric, Collective, Workload, simulate
    fabric = Fabric(Topology(), seed=0)
    res = simulate(fabric, Workload(collectives=[
        Collective("all_reduce", 8 * 2**20, fabric.nic_names)]))
    res.collectives[0].busbw_gbytes_per_s
"""

from __future__ import annotations

from rocesim.config import DcqcnConfig, EcnConfig, Topology
from rocesim.engine import DEFAULT_DT_US, CollectiveStats, SimResult, Simulation, simulate
from rocesim.fabric import Fabric
from rocesim.workload import Background, Collective, Probes, Workload

__all__ = [
    "DEFAULT_DT_US", "Background", "Collective", "CollectiveStats", "DcqcnConfig", "EcnConfig",
    "Fabric", "Probes", "SimResult", "Simulation", "Topology", "Workload", "simulate",
]
