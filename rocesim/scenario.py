"""Scenario files (YAML or JSON) -> Fabric + Workload + run options.

Shape (every key optional except ``workload``)::

    topology: {kind: leaf_spine, leaves: 2, spines: 2, hosts_per_leaf: 4, nic_gbps: 100}
    fabric_seed: 0          # ECMP hash salt
    ecmp: {hash_fields: [src_ip, dst_ip, udp_sport], udp_sport: per_qp}   # EcmpConfig
    seed: 0                 # QP source ports, probe pairs, marking draws
    dt_us: null             # engine default
    max_time_us: null
    ecn:                    # per switch (or "default"), RoCE queue (TC3)
      default: {kmin_bytes: 100000, kmax_bytes: 400000, pmax: 0.2}
    dcqcn:                  # per NIC (or "default"), ConnectX sysfs names
      default: {rpg_time_reset: 300}
    workload:
      collectives: [{op: all_reduce, size_bytes: 8388608, ranks: all}]
      background: [{pattern: incast, load: 0.3, fan_in: 4}]   # dscp: 10 = a foreign DSCP
      probes: {pairs: 4, interval_us: 50}

``ranks``/``nics`` take a list of NIC names, ``all``, or a leaf name (its NICs).
"""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path
from typing import Any

from rocesim.config import DcqcnConfig, EcmpConfig, EcnConfig, Topology
from rocesim.fabric import Fabric
from rocesim.workload import Background, Collective, Probes, Workload


class ScenarioError(ValueError):
    """A scenario file that cannot be turned into a run; the message names file and field."""


def load_scenario(path: str | Path) -> tuple[Fabric, Workload, dict[str, Any]]:
    """Read a scenario file; returns the fabric, the workload and ``simulate`` keyword args."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ScenarioError(f"{p}: cannot read ({e.strerror})") from e
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except Exception as e:  # yaml/json parse errors carry line numbers in their message
        raise ScenarioError(f"{p}: not valid {p.suffix.lstrip('.') or 'YAML'}: {e}") from e
    if not isinstance(data, dict):
        raise ScenarioError(f"{p}: top level must be a mapping")
    return build_scenario(data, source=str(p))


def _options(data: dict[str, Any], source: str) -> dict[str, Any]:
    """The run options given: seeds whole numbers >= 0, times finite numbers > 0 (the step's
    own range is the engine's to check)."""
    opts: dict[str, Any] = {}
    for key, whole in (("fabric_seed", True), ("seed", True), ("dt_us", False),
                       ("max_time_us", False)):
        v = data.get(key)
        if v is None:
            continue
        number = isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
        if whole and not (number and float(v).is_integer() and v >= 0):
            raise ScenarioError(f"{source}: {key} must be a finite whole number >= 0, got {v!r}")
        if not whole and not (number and v > 0):
            raise ScenarioError(f"{source}: {key} must be a finite number > 0, got {v!r}")
        opts[key] = int(v) if whole else float(v)
    return opts


def _make(cls: type, raw: Any, where: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ScenarioError(f"{where}: expected a mapping, got {type(raw).__name__}")
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ScenarioError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**raw)
    except (TypeError, ValueError) as e:
        raise ScenarioError(f"{where}: {e}") from e


def _nics(fabric: Fabric, raw: Any, where: str) -> list[str]:
    if raw is None or raw == "all":
        return list(fabric.nic_names)
    if isinstance(raw, str):
        if raw in fabric.leaf_names:
            return fabric.hosts_under(raw)
        raise ScenarioError(f"{where}: {raw!r} is neither 'all' nor a leaf name")
    if isinstance(raw, list) and all(isinstance(x, str) for x in raw):
        bad = [x for x in raw if x not in fabric.nic_names]
        if bad:
            raise ScenarioError(f"{where}: unknown NIC(s) {bad}")
        return list(raw)
    raise ScenarioError(f"{where}: expected a list of NIC names, 'all' or a leaf name")


def build_scenario(data: dict[str, Any], source: str = "<scenario>",
                   ) -> tuple[Fabric, Workload, dict[str, Any]]:
    opts = _options(data, source)
    topo = _make(Topology, data.get("topology"), f"{source}: topology")
    ecmp = _make(EcmpConfig, data.get("ecmp"), f"{source}: ecmp")
    fabric = Fabric(topo, seed=opts.pop("fabric_seed", 0), ecmp=ecmp)
    for target, raw in (data.get("ecn") or {}).items():
        cfg = _make(EcnConfig, raw, f"{source}: ecn.{target}")
        for sw in fabric.switch_names if target == "default" else [target]:
            if sw not in fabric.switch_names:
                raise ScenarioError(f"{source}: ecn.{target}: unknown switch")
            fabric.set_ecn(sw, cfg)
    for target, raw in (data.get("dcqcn") or {}).items():
        cfg = _make(DcqcnConfig, raw, f"{source}: dcqcn.{target}")
        for nic in fabric.nic_names if target == "default" else [target]:
            if nic not in fabric.nic_names:
                raise ScenarioError(f"{source}: dcqcn.{target}: unknown NIC")
            fabric.set_dcqcn(nic, cfg)
    wraw = data.get("workload")
    if not isinstance(wraw, dict):
        raise ScenarioError(f"{source}: workload: required mapping is missing")
    cols = []
    for i, raw in enumerate(wraw.get("collectives") or []):
        where = f"{source}: workload.collectives[{i}]"
        raw = dict(raw or {})
        raw["ranks"] = _nics(fabric, raw.get("ranks"), where + ".ranks")
        cols.append(_make(Collective, raw, where))
    bgs = []
    for i, raw in enumerate(wraw.get("background") or []):
        where = f"{source}: workload.background[{i}]"
        raw = dict(raw or {})
        raw["nics"] = _nics(fabric, raw.get("nics"), where + ".nics")
        bgs.append(_make(Background, raw, where))
    probes = None
    if wraw.get("probes") is not None:
        raw = dict(wraw["probes"])
        raw["nics"] = _nics(fabric, raw.get("nics"), f"{source}: workload.probes.nics")
        probes = _make(Probes, raw, f"{source}: workload.probes")
    workload = Workload(collectives=cols, background=bgs, probes=probes)
    return fabric, workload, opts
