"""The simulated backend: a rocesim fabric whose canary is a real subset of it.

The canary is some switches (normally leaves) and the NICs of the hosts under them. Trials change
only the canary; every other switch and NIC keeps the baseline the fabric started with (vendor
defaults overlaid with the experiment's ``current:`` section), and the workload runs on the
canary's NICs only.

Time: the simulator's clock is the clock of this backend. ``Counters.taken_at_s`` and the
``elapsed_s`` handed to the monitor are *simulated* seconds (cumulative across measurements), so
pause fractions and rates are physical; ``Measurement.extra["wall_s"]`` is the real cost.
The live monitor is polled after every ``fabric.step_us`` of simulated time.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from objectives.counters import merge_row
from objectives.measurement import (
    CollectiveResult,
    Counters,
    LatencyResult,
    Measurement,
    TenantResult,
)
from safety.limits import PfcThreshold
from tuner.cluster.base import Cluster, ClusterDescription, Monitor
from tuner.errors import ApplyError, ConfigError, MeasurementError, SafetyAbort
from tuner.settings import NIC_KNOBS, DcqcnSettings, EcnSettings, Settings

if TYPE_CHECKING:
    from tuner.experiment import FabricSpec
    from tuner.workload import Workload

_compiled = [False]  # has this process run (so compiled) the rocesim kernel yet?


def timeseries_json(res: Any, points: int = 400) -> str:
    """The busiest port's queue/pause/rate time series of a run, at most ``points`` samples
    (JSON; drawn per trial by ``tuner.plots.timeseries``)."""
    ts = res.timeseries or {}
    n = len(ts.get("t_us", []))
    step = max(1, -(-n // points))
    cols = {k: [round(float(x), 3) for x in ts[k][::step]] for k in ts}
    return json.dumps({"port": res.timeseries_port, **cols})


def _ecn_to_sim(e: EcnSettings) -> Any:
    from rocesim import EcnConfig

    return EcnConfig(kmin_bytes=e.kmin_bytes, kmax_bytes=e.kmax_bytes,
                     pmax=e.pmax_percent / 100.0, enabled=e.enabled)


def _ecn_from_sim(c: Any) -> EcnSettings:
    return EcnSettings(kmin_bytes=int(c.kmin_bytes), kmax_bytes=int(c.kmax_bytes),
                       pmax_percent=int(round(float(c.pmax) * 100)), enabled=bool(c.enabled))


def _dcqcn_to_sim(d: DcqcnSettings) -> Any:
    from rocesim import DcqcnConfig

    return DcqcnConfig(**d.model_dump())


def _dcqcn_from_sim(c: Any) -> DcqcnSettings:
    return DcqcnSettings(**{k: int(getattr(c, k)) for k in NIC_KNOBS})


class SimCluster(Cluster):
    """A rocesim fabric; see the module docstring. ``baseline`` holds uniform knob values."""

    def __init__(self, spec: FabricSpec, canary_switches: list[str],
                 baseline: dict[str, int] | None = None, name: str = "rocesim",
                 field: str = "canary.switches") -> None:
        from rocesim import Fabric, Topology
        from rocesim.config import EcmpConfig

        self.spec = spec
        self.name = name
        ecmp = EcmpConfig(hash_fields=tuple(spec.ecmp.hash_fields), udp_sport=spec.ecmp.udp_sport)
        self._fabric = Fabric(Topology(**spec.topology.model_dump()), seed=spec.seed, ecmp=ecmp)
        switches = list(self._fabric.switch_names)
        unknown = [s for s in canary_switches if s not in switches]
        if unknown:
            raise ConfigError(f"{field}: {unknown} not in the fabric; it has "
                              f"{', '.join(switches)}")
        self._switches = list(canary_switches)
        nics: list[str] = []
        for s in self._switches:
            nics.extend(n for n in self._fabric.hosts_under(s) if n not in nics)
        if len(nics) < 2:
            raise ConfigError(f"{field}: {self._switches} have {len(nics)} NICs under "
                              "them; a workload needs at least 2")
        hosts = [n.split("/")[0] for n in nics]
        if spec.topology.rails and len(set(hosts)) < len(hosts):
            # The ranks are the canary's NICs: two rails of one host would exchange their data
            # over the fabric, where NCCL uses the host's NVLink (not modelled).
            raise ConfigError(f"canary.switches: {self._switches} carry several rails of the "
                              "same hosts; with fabric.topology.rails the canary is one leaf "
                              "(one rail) per group of hosts")
        self._nics = nics
        self._other_switches = [s for s in switches if s not in self._switches]
        self._other_nics = [n for n in self._fabric.nic_names if n not in nics]
        try:
            base = Settings.uniform(switches, list(self._fabric.nic_names), baseline or {})
        except ValidationError as exc:  # one line per problem, not pydantic's dump
            raise ConfigError("current: " + "; ".join(
                str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())) from None
        except ValueError as exc:
            raise ConfigError(f"current: {exc}") from None
        for s, e in base.switches.items():
            self._fabric.set_ecn(s, _ecn_to_sim(e))
        for n, d in base.nics.items():
            self._fabric.set_dcqcn(n, _dcqcn_to_sim(d))
        self._totals: dict[str, dict[str, int]] = {}
        self._clock_s = 0.0
        self._seq = 0

    # Pure reads ----------------------------------------------------------------------------
    def describe(self) -> ClusterDescription:
        t = self.spec.topology
        pfc = min((self._pfc_threshold(s) for s in self._switches),
                  key=lambda p: p.onset_bytes())
        return ClusterDescription(
            name=self.name, backend="sim", canary_switches=list(self._switches),
            canary_nics=list(self._nics), other_switches=list(self._other_switches),
            other_nics=list(self._other_nics), nic_gbps=t.nic_gbps,
            facts={"topology": t.kind, "leaves": str(t.leaves), "spines": str(t.spines),
                   "hosts_per_leaf": str(t.hosts_per_leaf),
                   "nics_per_host": str(t.nics_per_host), "rails": str(t.rails).lower(),
                   "nic_gbps": f"{t.nic_gbps:g}",
                   "uplink_gbps": f"{t.uplink_gbps:g}", "buffer_bytes": str(t.buffer_bytes),
                   "pfc_threshold": pfc.to_fact(), "seed": str(self.spec.seed),
                   # every replicate has its own seed: probe pairs, ECMP paths, background
                   "placements": "vary",
                   **({"pods": str(t.pods), "super_spines": str(t.super_spines),
                       "core_gbps": f"{t.core_gbps or t.uplink_gbps:g}"}
                      if t.kind == "three_tier" else {})})

    def _pfc_threshold(self, switch: str) -> PfcThreshold:
        """The ECN-before-PFC inputs of one simulated switch: its buffer model, and the fewest
        senders that congest one of its queues (the PFC onset is lowest there)."""
        f = self._fabric
        t = f.topo
        return PfcThreshold(pool=f"{switch} shared buffer", pool_bytes=f.buffer_bytes(switch),
                            dynamic_th=t.pfc_alpha_log2, static_th_bytes=t.pfc_static_xoff_bytes,
                            fan_in=f.congesting_fan_in(switch), source="rocesim topology")

    def snapshot(self) -> Settings:
        return self.read_back()

    def read_back(self) -> Settings:
        return Settings(
            switches={s: _ecn_from_sim(self._fabric.ecn(s)) for s in self._switches},
            nics={n: _dcqcn_from_sim(self._fabric.dcqcn(n)) for n in self._nics})

    def read_all(self) -> Settings:
        """Every switch and NIC of the fabric, canary or not (tests prove the rest is intact)."""
        return Settings(
            switches={s: _ecn_from_sim(self._fabric.ecn(s)) for s in self._fabric.switch_names},
            nics={n: _dcqcn_from_sim(self._fabric.dcqcn(n)) for n in self._fabric.nic_names})

    def _canary_port(self, port: str) -> bool:
        return port in self._nics or port.split("/", 1)[0] in self._switches

    def counters(self) -> Counters:
        return Counters(ports={p: dict(r) for p, r in self._totals.items()},
                        taken_at_s=self._clock_s)

    # The one method that changes anything ------------------------------------------------
    def apply(self, settings: Settings) -> None:
        outside = [t for t in settings.switches if t not in self._switches]
        outside += [t for t in settings.nics if t not in self._nics]
        if outside:
            raise ApplyError(f"refusing to touch targets outside the canary: {outside}")
        before = self.read_back()
        try:
            # Build every device config first, so a bad value fails before any change.
            ecn = {s: _ecn_to_sim(e) for s, e in settings.switches.items()}
            dcqcn = {n: _dcqcn_to_sim(d) for n, d in settings.nics.items()}
            for s, cfg in ecn.items():
                self._fabric.set_ecn(s, cfg)
            for n, cfg in dcqcn.items():
                self._fabric.set_dcqcn(n, cfg)
        except Exception as exc:  # rocesim rejects a value: put back what we changed
            for s, e in before.switches.items():
                self._fabric.set_ecn(s, _ecn_to_sim(e))
            for n, d in before.nics.items():
                self._fabric.set_dcqcn(n, _dcqcn_to_sim(d))
            raise ApplyError(f"rocesim rejected the settings: {exc}") from exc

    # Measurement ---------------------------------------------------------------------------
    def _sim_workload(self, workload: Workload) -> Any:
        from rocesim import Background, Collective, Probes
        from rocesim import Workload as SimWorkload

        nics = list(self._nics)
        colls = [Collective(op=c.op, size_bytes=c.size_bytes, ranks=nics,
                            iterations=c.iterations, channels=c.channels,
                            qps_per_connection=c.qps_per_connection, algo=c.algo)
                 for c in workload.collectives]
        bg = [Background(pattern=b.pattern, load=b.load, fan_in=min(b.fan_in, len(nics) - 1),
                         nics=nics, priority=b.priority, lossless=b.lossless, dscp=b.dscp)
              for b in workload.background]
        probes = None
        if workload.probes:
            p = workload.probes[0]
            probes = Probes(pairs=p.pairs, interval_us=p.interval_us, size_bytes=p.size_bytes,
                            nics=nics)
        return SimWorkload(collectives=colls, background=bg, probes=probes)

    def _merge(self, sim_counters: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
        """Lifetime totals plus the running simulation's counters (canary ports only)."""
        out = {p: dict(r) for p, r in self._totals.items()}
        for port, row in sim_counters.items():
            if self._canary_port(port):
                merge_row(out.setdefault(port, {}), row)
        return out

    def stress(self, workload: Workload, *, replicate: int = 0) -> Any:
        """Run ``workload`` on the canary for a diagnosis and return rocesim's ``SimResult``
        (per-port counters, per-flow paths): nothing is applied, no counter total changes."""
        from rocesim import Simulation

        return Simulation(self._fabric, self._sim_workload(workload),
                          seed=self.replicate_seed(replicate),
                          max_time_us=self.spec.max_time_us).run()

    def flow_names(self) -> tuple[list[str], list[str]]:
        """What the indices in rocesim's per-flow arrays name: the transmitting port of every
        link id (paths), and every NIC (sources and destinations)."""
        return [ln.src_port for ln in self._fabric.links], list(self._fabric.nic_names)

    def replicate_seed(self, replicate: int) -> int:
        """The simulation seed of paired replicate ``replicate``: it fixes the probe pairs, the
        QPs' UDP source ports (so the ECMP paths) and the background placement, the same for
        every trial of a study, so trials differ only by their settings."""
        return self.spec.seed * 1_000_003 + replicate

    def measure(self, workload: Workload, monitor: Monitor | None = None, *,
                replicate: int = 0) -> Measurement:
        from rocesim import Simulation

        before = self.counters()
        sim = Simulation(self._fabric, self._sim_workload(workload),
                         seed=self.replicate_seed(replicate),
                         max_time_us=self.spec.max_time_us)
        t0 = time.monotonic()
        sim_t0 = self._clock_s
        sim_us = 0.0
        if monitor is not None:
            monitor.poll(before, 0.0)
        try:
            while not sim.done:
                sim.advance(self.spec.step_us)
                sim_us += self.spec.step_us
                if not _compiled[0]:  # the first step of a process compiles the kernel
                    _compiled[0] = True  # (numba, seconds): not the measurement's time
                    t0 = time.monotonic()
                if time.monotonic() - t0 > workload.time_limit_s:
                    raise MeasurementError(
                        f"rocesim exceeded the workload time limit of {workload.time_limit_s:g}"
                        f" s wall clock at {sim_us:g} us simulated")
                if monitor is not None:
                    live = Counters(ports=self._merge(sim.counters()),
                                    taken_at_s=sim_t0 + sim_us / 1e6)
                    monitor.poll(live, sim_us / 1e6)
        except SafetyAbort:
            self._finish(sim.counters(), sim_us)
            raise
        except MeasurementError:
            self._finish(sim.counters(), sim_us)
            raise
        res = sim.result()
        sim_s = float(res.sim_time_us) / 1e6
        self._finish(dict(res.counters), float(res.sim_time_us))
        m = self._measurement(workload, res, before, sim_s, time.monotonic() - t0)
        return m.model_copy(update={"replicate": replicate})

    def _tenants(self, workload: Workload, res: Any, sim_s: float) -> list[TenantResult]:
        """Goodput of each declared background part (rocesim appends background flows after
        the collectives' in part order: ``fan_in`` senders for an incast, one per NIC for a
        permutation)."""
        flows = res.flows or {}
        if "kind" not in flows or sim_s <= 0:
            return []
        delivered = [float(b) for b, k in zip(flows["delivered_bytes"], flows["kind"],
                                              strict=True) if int(k) == 1]
        out, i = [], 0
        n_nics = len(self._nics)
        for j, b in enumerate(workload.background):
            n = min(b.fan_in, n_nics - 1) if b.pattern == "incast" else n_nics
            got = sum(delivered[i:i + n])
            i += n
            out.append(TenantResult(name=f"background{j}", priority=b.priority,
                                    goodput_gbps=got * 8 / sim_s / 1e9,
                                    offered_gbps=b.load * self.spec.topology.nic_gbps * n))
        return out

    def _finish(self, sim_counters: dict[str, dict[str, int]], sim_us: float) -> None:
        self._totals = self._merge(sim_counters)
        self._clock_s += sim_us / 1e6

    def _measurement(self, workload: Workload, res: Any, before: Counters, sim_s: float,
                     wall_s: float) -> Measurement:
        line = self.spec.topology.nic_gbps / 8.0  # GB/s: the busbw ideal of one rank's NIC
        colls = []
        notes: list[str] = []
        for part, c in zip(workload.collectives, res.collectives, strict=True):
            times = [float(x) for x in c.iteration_times_us]
            if not getattr(c, "completed", True):
                notes.append(f"{c.op} {c.size_bytes} B finished {len(times)} of "
                             f"{part.iterations} iterations within max_time_us "
                             f"{self.spec.max_time_us:g}")
            colls.append(CollectiveResult(
                name=c.op, size_bytes=int(c.size_bytes), ranks=int(c.ranks),
                time_us=sum(times) / len(times) if times else 0.0,
                algbw_gbytes_per_s=float(c.algbw_gbytes_per_s),
                busbw_gbytes_per_s=float(c.busbw_gbytes_per_s), iteration_times_us=times,
                weight=part.weight, line_rate_gbytes_per_s=line))
        latency = None
        samples = [float(x) for x in (res.latency_us if res.latency_us is not None else [])]
        if samples:
            latency = LatencyResult(count=len(samples), p50_us=float(res.p50_us),
                                    p99_us=float(res.p99_us), p999_us=float(res.p999_us),
                                    max_us=max(samples), mean_us=sum(samples) / len(samples))
        tenants = self._tenants(workload, res, sim_s)
        summary = {"sim_time_us": float(res.sim_time_us), "steps": int(res.steps),
                   "storms": [str(s) for s in (res.storms or [])],
                   "uplink_bytes": {str(k): int(v) for k, v in dict(res.uplink_bytes).items()}
                   if isinstance(res.uplink_bytes, dict) else str(res.uplink_bytes)}
        return Measurement(
            collectives=colls, latency=latency, tenants=tenants, counters_before=before,
            counters_after=self.counters(), duration_s=sim_s,
            raw={"rocesim": json.dumps(summary, sort_keys=True),
                 "rocesim_timeseries": timeseries_json(res)}, notes=notes,
            extra={"wall_s": wall_s, "sim_time_us": float(res.sim_time_us),
                   "steps": float(res.steps), "storms": float(len(res.storms or []))})
