"""Pre-flight: the checks a field engineer makes before touching congestion control.

Pure: facts in (``PreflightFacts``, collected by ``tuner.preflight_facts`` from the simulated
fabric or over SSH), one ``CheckResult(check, target, status, evidence)`` per finding out. A
``fail`` anywhere stops ``ecntune run`` before any change. The checks, and why each exists:

* ``facts``           a target whose facts could not be collected (unreachable, tool missing);
* ``mtu``             one MTU on every canary host and switch port (a mismatch silently turns
                      RoCE into retransmissions, and no ECN setting fixes that);
* ``df_ping``         a don't-fragment ping at the RoCE MTU between host pairs (proves the path);
* ``pfc_priority``    PFC on exactly the RoCE priority on hosts (``mlnx_qos``) and on every
                      canary switch port (extra lossless priorities on a switch are a warning:
                      SONiC ships ``pfc_enable 3,4``);
* ``dscp_trust``      DSCP trust, RoCE DSCP -> RoCE priority and CNP DSCP as expected;
* ``dcqcn_enabled``   DCQCN reaction and notification point enabled on the RoCE priority;
* ``link``            links up, at the expected speed and FEC;
* ``error_counters``  CRC/symbol errors not rising over a short sample;
* ``versions``        driver/firmware recorded (mixed firmware is a warning);
* ``cc_algorithm``    the NIC runs DCQCN (mlxconfig/mstconfig ``ROCE_CC_ALGORITHM_P<n>`` is
                      ``ECN``; the debugfs ``cc_params`` folder exists): otherwise DCQCN writes
                      read back fine and do nothing;
* ``roce_mtu``        the RoCE path MTU (``ibv_devinfo`` active_mtu) is the largest IB MTU the
                      netdev MTU carries (mlx5 ``iboe_get_mtu``: netdev MTU - 88 bytes);
* ``roce_queue``      (SONiC) the RoCE data DSCP, followed through the canary ports' own maps
                      (PORT_QOS_MAP -> DSCP_TO_TC_MAP -> TC_TO_QUEUE_MAP), lands in the tuned
                      lossless queue with PFC on its TC: stock ``qos_config.j2`` sends DSCP 26
                      to lossy TC 1, where no tuned threshold ever acts;
* ``cnp_queue``       CNPs (the NIC's CNP DSCP) leave the switch by a strict-priority queue
                      (a warning: stock SONiC runs that queue on DWRR); what matters is that
                      the queue does not starve, ``cnp_starvation`` under the baseline load;
* ``blast_radius``    every port the written switch object reaches, discovered from the
                      switch's own configuration, lies in the canary; (simulated fabric) a
                      canary switch that also serves hosts outside the canary is refused
                      unless the experiment acknowledges that switch;
* ``pfc_threshold``   every SSH canary switch's PFC threshold is known: the lossless PG's
                      dynamic threshold and shared pool (switch buffer configuration, else the
                      inventory) and the fan-in, so Kmax stays below the egress queue at which
                      PFC fires (``safety.limits.PfcThreshold``);
* ``counters``        switch counter poll intervals; the WRED/ECN queue counters are polled, or
                      absent (SONiC before 202505): reported as absent, never as zero;
* ``qos_reload``      (SONiC, a warning) what ``config qos reload`` / ``config load_minigraph``
                      would undo: they rewrite the QoS tables from the HWSKU's
                      ``qos.json.j2``, which makes neither the canary profile nor, on a stock
                      template, the RoCE DSCP fix (the template rendered read-only, compared
                      with the running CONFIG_DB);
* ``nvue_confirm``    (NVUE) no apply already waits for confirmation; a warning names the window
                      each trial's ``--confirm`` blocks other people's applies for;
* ``shared_priority`` nothing but the tuned workload on the RoCE priority: a declared job, or
                      traffic seen on that priority while the canary is idle (the storage or
                      backup job that shares the RoCE PFC priority is a classic incident).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from objectives.parsers import MlnxQos
from safety.limits import PfcThreshold

Status = Literal["pass", "warn", "fail"]
_FROZEN = ConfigDict(frozen=True, extra="forbid")

# Error counters that must not rise on an idle, healthy link (mlx5 ethtool names; SONiC/NVUE
# port counters are mapped onto the same names by the collectors).
ERROR_COUNTERS = ("rx_crc_errors_phy", "rx_symbol_err_phy", "rx_crc_errors", "rx_symbol_errors")


class SharedJob(BaseModel):
    """Traffic other than the tuner's that is known to run on the fabric."""

    model_config = _FROZEN
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    priority: int = Field(ge=0, le=7)
    hosts: list[str] = Field(default_factory=list)


class PreflightSpec(BaseModel):
    """The experiment file's ``preflight:`` section: what the fabric is expected to look like."""

    model_config = _FROZEN
    enabled: bool = True
    mtu: int | None = Field(default=None, ge=576, le=9216)  # None: all equal is enough
    roce_dscp: int = Field(default=26, ge=0, le=63)  # ToS 106 = DSCP 26 + ECT(0)
    cnp_dscp: int = Field(default=48, ge=0, le=63)  # ConnectX factory value
    trust: Literal["dscp", "pcp"] = "dscp"
    speed_mbps: int | None = Field(default=None, gt=0)  # None: the NIC line rate if known
    fec: str | None = None  # e.g. "rs"; None: not checked
    error_sample_s: float = Field(default=2.0, ge=0, le=60)
    max_error_increase: int = Field(default=0, ge=0)
    idle_traffic_packets: int = Field(default=1000, ge=0)  # RoCE-priority packets while idle
    acknowledge_shared_switches: list[str] = Field(default_factory=list)
    shared_jobs: list[SharedJob] = Field(default_factory=list)
    df_ping: bool = True


class HostFacts(BaseModel):
    """What was read on one canary host; ``None`` = not available on this host/layout."""

    model_config = _FROZEN
    name: str
    nic: str  # Settings key, ``host0/mlx5_0``
    error: str | None = None  # facts could not be collected at all
    mtu: int | None = None
    link_up: bool | None = None
    speed_mbps: int | None = None
    fec: str | None = None
    qos: MlnxQos | None = None
    rp_enabled: dict[int, bool] | None = None  # roce_rp/enable/<prio> (OFED sysfs only)
    np_enabled: dict[int, bool] | None = None
    roce_tos: int | None = None  # verbs traffic class / cma_roce_tos (ToS byte)
    cnp_dscp: int | None = None
    driver: str | None = None
    firmware: str | None = None
    counters_before: dict[str, int] = Field(default_factory=dict)
    counters_after: dict[str, int] = Field(default_factory=dict)
    sample_s: float = 0.0
    ping: dict[str, str] = Field(default_factory=dict)  # peer -> "ok" or the failure text
    cc_algorithm: str | None = None  # ROCE_CC_ALGORITHM_P<n> as printed: "ECN(0)" = DCQCN
    cc_params: bool | None = None  # upstream debugfs cc_params folder present
    roce_mtu: int | None = None  # ibv_devinfo active_mtu


class QosPath(BaseModel):
    """One DSCP's way through a SONiC port's QoS maps (``None`` = a missing link)."""

    model_config = _FROZEN
    port: str
    dscp: int
    dscp_map: str | None = None  # DSCP_TO_TC_MAP name (the port's, else PORT_QOS_MAP|global)
    tc: int | None = None
    tc_map: str | None = None  # TC_TO_QUEUE_MAP name; None: TC n -> queue n
    queue: int | None = None
    scheduler: str | None = None
    scheduler_type: str | None = None
    pfc_enable: list[int] = Field(default_factory=list)

    def hops(self) -> str:
        """``Ethernet0: DSCP 26 -> TC 1 (AZURE) -> queue 1 (AZURE)``."""
        tcq = f" ({self.tc_map})" if self.tc_map else " (no TC_TO_QUEUE_MAP: TC = queue)"
        return (f"{self.port}: DSCP {self.dscp} -> TC {_unset(self.tc)} "
                f"({self.dscp_map or 'no DSCP_TO_TC_MAP'}) -> queue {_unset(self.queue)}{tcq}")


def _unset(value: int | None) -> str:
    return "?" if value is None else str(value)


class RocePath(BaseModel):
    """Where the RoCE data DSCP lands on a switch (NVUE ``nv show qos roce``)."""

    model_config = _FROZEN
    dscp: int
    switch_prio: int | None = None
    tc: int | None = None
    pfc: list[int] = Field(default_factory=list)  # switch priorities with PFC
    mode: str | None = None  # lossless, lossless-single-ipool, lossy
    maps: bool = True  # the DSCP -> switch-priority table was there at all


class QosReload(BaseModel):
    """SONiC: what ``config qos reload`` / ``config load_minigraph`` would undo on the canary
    (``tuner.drivers._sonic_reload``)."""

    model_config = _FROZEN
    template: str | None = None  # the qos.json.j2 rendered
    losses: list[str] = Field(default_factory=list)  # one line per object dropped or changed
    unchecked: str | None = None  # why the template could not be rendered


class SwitchFacts(BaseModel):
    """What was read on one canary switch, per port facing canary hosts."""

    model_config = _FROZEN
    name: str
    error: str | None = None
    port_mtu: dict[str, int] = Field(default_factory=dict)
    port_up: dict[str, bool] = Field(default_factory=dict)
    port_speed_mbps: dict[str, int] = Field(default_factory=dict)
    lossless: dict[str, list[int]] = Field(default_factory=dict)  # port -> PFC priorities
    outside_ports: list[str] = Field(default_factory=list)  # ports serving non-canary hosts
    counters_before: dict[str, dict[str, int]] = Field(default_factory=dict)
    counters_after: dict[str, dict[str, int]] = Field(default_factory=dict)
    sample_s: float = 0.0
    version: str | None = None
    canary_ports: list[str] = Field(default_factory=list)
    written: str | None = None  # the object a write changes (profile name)
    reach: list[str] = Field(default_factory=list)  # ports that object reaches (switch config)
    pfc_threshold: PfcThreshold | None = None
    counter_poll_s: dict[str, float] = Field(default_factory=dict)  # counter group -> seconds
    counters_off: list[str] = Field(default_factory=list)  # counter groups not polled
    cnp_queue: dict[str, str] = Field(default_factory=dict)  # port -> scheduler of CNP queue
    cnp_queue_index: dict[str, int] = Field(default_factory=dict)  # port -> CNP queue
    lossless_queue: int | None = None  # the tuned queue / traffic class (inventory)
    roce_path: dict[str, QosPath] = Field(default_factory=dict)  # SONiC: port -> RoCE path
    roce_maps: RocePath | None = None  # NVUE: where the RoCE data DSCP lands
    ecn_counters_absent: str | None = None  # why the switch has no ECN counters (not zero)
    confirm_window_s: int | None = None  # NVUE: trials apply with `--confirm <n>s`
    confirm_pending: list[str] | None = None  # NVUE: revisions waiting for confirmation
    qos_reload: QosReload | None = None  # SONiC: what a QoS reload would undo


class PreflightFacts(BaseModel):
    """Everything the checks look at; ``workload_on_roce`` = the tuned workload itself puts
    background traffic in the RoCE priority (declared, so only a warning)."""

    model_config = _FROZEN
    backend: str
    roce_priority: int = Field(ge=0, le=7)
    hosts: list[HostFacts] = Field(default_factory=list)
    switches: list[SwitchFacts] = Field(default_factory=list)
    line_rate_mbps: int | None = None
    workload_on_roce: bool = False


class CheckResult(BaseModel):
    """One line of the pre-flight table."""

    model_config = _FROZEN
    check: str
    target: str
    status: Status
    evidence: str


def _r(check: str, target: str, status: Status, evidence: str) -> CheckResult:
    return CheckResult(check=check, target=target, status=status, evidence=evidence)


def _reachable(facts: PreflightFacts) -> tuple[list[HostFacts], list[SwitchFacts]]:
    return ([h for h in facts.hosts if h.error is None],
            [s for s in facts.switches if s.error is None])


def check_facts(facts: PreflightFacts) -> list[CheckResult]:
    targets: list[HostFacts | SwitchFacts] = [*facts.hosts, *facts.switches]
    out = [_r("facts", t.name, "fail", f"facts not collected: {t.error}")
           for t in targets if t.error is not None]
    if not facts.hosts:
        out.append(_r("facts", "canary", "fail", "no canary hosts"))
    return out


def check_mtu(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    hosts, switches = _reachable(facts)
    seen: list[tuple[str, int]] = [(h.name, h.mtu) for h in hosts if h.mtu is not None]
    seen += [(f"{s.name}/{p}", m) for s in switches for p, m in sorted(s.port_mtu.items())]
    if not seen:
        return [_r("mtu", "canary", "warn", "no MTU readable on any target")]
    want = spec.mtu if spec.mtu is not None else Counter(m for _, m in seen).most_common(1)[0][0]
    basis = "expected" if spec.mtu is not None else "most common"
    out = []
    for name, mtu in seen:
        if mtu != want:
            out.append(_r("mtu", name, "fail", f"MTU {mtu}, {basis} {want}: fix the MTU on this "
                                               "port/host before tuning"))
    missing = [h.name for h in hosts if h.mtu is None]
    out += [_r("mtu", n, "warn", "MTU not readable") for n in missing]
    if not out:
        out.append(_r("mtu", "canary", "pass", f"MTU {want} on {len(seen)} hosts/ports"))
    return out


def check_df_ping(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    if not spec.df_ping:
        return []
    hosts, _ = _reachable(facts)
    pairs = [(h.name, peer, res) for h in hosts for peer, res in sorted(h.ping.items())]
    if not pairs:
        return [_r("df_ping", "canary", "warn", "no don't-fragment ping was run")]
    bad = [_r("df_ping", f"{a}->{b}", "fail", f"ping -M do at the RoCE MTU failed: {res}")
           for a, b, res in pairs if res != "ok"]
    return bad or [_r("df_ping", "canary", "pass",
                      f"{len(pairs)} host pairs pass a don't-fragment ping at the RoCE MTU")]


def check_pfc(facts: PreflightFacts) -> list[CheckResult]:
    prio = facts.roce_priority
    hosts, switches = _reachable(facts)
    out: list[CheckResult] = []
    for h in hosts:
        if h.qos is None or not h.qos.pfc_enabled:
            out.append(_r("pfc_priority", h.name, "warn", "PFC configuration not readable"))
            continue
        on = h.qos.pfc_priorities
        if on == [prio]:
            out.append(_r("pfc_priority", h.name, "pass", f"PFC on priority {prio} only"))
        elif prio not in on:
            out.append(_r("pfc_priority", h.name, "fail",
                          f"PFC on priorities {on or 'none'}, not on the RoCE priority {prio}: "
                          f"mlnx_qos -i <if> --pfc with 1 at position {prio} only"))
        else:
            out.append(_r("pfc_priority", h.name, "fail",
                          f"PFC on priorities {on}: must be {prio} only (other classes would "
                          "pause RoCE's upstream)"))
    for s in switches:
        for port, on in sorted(s.lossless.items()):
            name = f"{s.name}/{port}"
            if prio not in on:
                out.append(_r("pfc_priority", name, "fail",
                              f"lossless priorities {on or 'none'}, RoCE priority {prio} is "
                              "lossy here"))
            elif on != [prio]:
                out.append(_r("pfc_priority", name, "warn",
                              f"lossless priorities {on}; only {prio} carries RoCE"))
        if not s.lossless:
            out.append(_r("pfc_priority", s.name, "warn", "switch PFC configuration not "
                                                          "readable"))
    sw_ok = [s.name for s in switches if s.lossless and all(
        prio in v for v in s.lossless.values())]
    if sw_ok:
        out.append(_r("pfc_priority", ",".join(sw_ok), "pass",
                      f"priority {prio} lossless on every canary port"))
    return out


def check_dscp(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    prio = facts.roce_priority
    hosts, _ = _reachable(facts)
    out: list[CheckResult] = []
    for h in hosts:
        problems: list[str] = []
        notes: list[str] = []
        if h.qos is None or h.qos.trust is None:
            out.append(_r("dscp_trust", h.name, "warn", "trust state not readable"))
        else:
            if h.qos.trust != spec.trust:
                problems.append(f"trust {h.qos.trust}, expected {spec.trust}")
            if spec.trust == "dscp" and h.qos.dscp2prio:
                got = h.qos.dscp2prio.get(spec.roce_dscp)
                if got != prio:
                    problems.append(f"DSCP {spec.roce_dscp} maps to priority {got}, "
                                    f"expected {prio}")
                else:
                    notes.append(f"DSCP {spec.roce_dscp} -> priority {prio}")
        if h.roce_tos is not None:
            if h.roce_tos >> 2 != spec.roce_dscp:
                problems.append(f"RoCE ToS {h.roce_tos} is DSCP {h.roce_tos >> 2}, expected "
                                f"DSCP {spec.roce_dscp} (ToS {spec.roce_dscp * 4 + 2})")
            else:
                notes.append(f"ToS {h.roce_tos}")
        if h.cnp_dscp is not None:
            if h.cnp_dscp != spec.cnp_dscp:
                problems.append(f"cnp_dscp {h.cnp_dscp}, expected {spec.cnp_dscp}")
            else:
                notes.append(f"cnp_dscp {h.cnp_dscp}")
        if problems:
            out.append(_r("dscp_trust", h.name, "fail", "; ".join(problems)))
        elif h.qos is not None and h.qos.trust is not None:
            out.append(_r("dscp_trust", h.name, "pass",
                          f"trust {h.qos.trust}" + "".join(f", {n}" for n in notes)))
    return out


def check_dcqcn(facts: PreflightFacts) -> list[CheckResult]:
    prio = facts.roce_priority
    hosts, _ = _reachable(facts)
    out = []
    for h in hosts:
        if h.rp_enabled is None and h.np_enabled is None:
            out.append(_r("dcqcn_enabled", h.name, "warn",
                          "per-priority DCQCN enable not visible (debugfs layout); firmware "
                          "default is all priorities"))
            continue
        off = [side for side, m in (("reaction point", h.rp_enabled),
                                    ("notification point", h.np_enabled))
               if m is not None and not m.get(prio, False)]
        if off:
            out.append(_r("dcqcn_enabled", h.name, "fail",
                          f"DCQCN {' and '.join(off)} disabled on priority {prio}: echo 1 > "
                          f"ecn/roce_rp/enable/{prio} and ecn/roce_np/enable/{prio}"))
        else:
            out.append(_r("dcqcn_enabled", h.name, "pass",
                          f"roce_rp and roce_np enabled on priority {prio}"))
    return out


def check_link(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    hosts, switches = _reachable(facts)
    want_speed = spec.speed_mbps or facts.line_rate_mbps
    out = []
    for h in hosts:
        problems = []
        if h.link_up is False:
            problems.append("link down")
        if want_speed and h.speed_mbps is not None and h.speed_mbps != want_speed:
            problems.append(f"speed {h.speed_mbps} Mb/s, expected {want_speed}")
        if spec.fec and h.fec is not None and h.fec.lower() != spec.fec.lower():
            problems.append(f"FEC {h.fec}, expected {spec.fec}")
        if problems:
            out.append(_r("link", h.name, "fail", "; ".join(problems)))
        else:
            speed = f" at {h.speed_mbps} Mb/s" if h.speed_mbps else ""
            state = "up" if h.link_up else "state unknown"
            out.append(_r("link", h.name, "pass" if h.link_up else "warn", f"{state}{speed}"))
    for s in switches:
        down = sorted(p for p, up in s.port_up.items() if not up)
        slow = sorted(p for p, sp in s.port_speed_mbps.items()
                      if want_speed and sp != want_speed)
        if down or slow:
            out.append(_r("link", s.name, "fail",
                          "; ".join(x for x in (f"ports down: {down}" if down else "",
                                                f"ports not at {want_speed} Mb/s: {slow}"
                                                if slow else "") if x)))
        elif s.port_up:
            out.append(_r("link", s.name, "pass", f"{len(s.port_up)} canary ports up"))
    return out


def _rising(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in ERROR_COUNTERS
            if k in after and after[k] - before.get(k, 0) > 0}


def check_errors(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    hosts, switches = _reachable(facts)
    rows: list[tuple[str, dict[str, int], dict[str, int], float]] = [
        (h.name, h.counters_before, h.counters_after, h.sample_s) for h in hosts]
    rows += [(f"{s.name}/{p}", s.counters_before.get(p, {}), after, s.sample_s)
             for s in switches for p, after in sorted(s.counters_after.items())]
    out = []
    sampled = 0
    for name, before, after, sample_s in rows:
        if not after:
            continue
        sampled += 1
        up = _rising(before, after)
        if sum(up.values()) > spec.max_error_increase:
            out.append(_r("error_counters", name, "fail",
                          f"rising over {sample_s:g} s: "
                          + ", ".join(f"{k} +{v}" for k, v in sorted(up.items()))
                          + " (check cable/optic; tuning cannot fix a bad link)"))
    if not out:
        out.append(_r("error_counters", "canary", "pass" if sampled else "warn",
                      f"no CRC/symbol errors rising on {sampled} ports" if sampled
                      else "no error counters sampled"))
    return out


def check_versions(facts: PreflightFacts) -> list[CheckResult]:
    hosts, switches = _reachable(facts)
    out = []
    fw = {h.firmware for h in hosts if h.firmware}
    for h in hosts:
        out.append(_r("versions", h.name, "pass",
                      f"driver {h.driver or '?'}, firmware {h.firmware or '?'}"))
    for s in switches:
        if s.version:
            out.append(_r("versions", s.name, "pass", s.version))
    if len(fw) > 1:
        out.append(_r("versions", "canary", "warn",
                      f"mixed NIC firmware {sorted(fw)}: results may not carry over"))
    return out


def check_blast_radius(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    _, switches = _reachable(facts)
    out = []
    for s in switches:
        beyond = [p for p in s.reach if p not in s.canary_ports]
        if beyond:
            out.append(_r("blast_radius", s.name, "fail",
                          f"writing {s.written} reaches {beyond} outside the canary ports "
                          f"{s.canary_ports} (from the switch's own configuration): bind a "
                          "profile of its own to the canary ports only"))
        elif s.outside_ports and s.name not in spec.acknowledge_shared_switches:
            out.append(_r("blast_radius", s.name, "fail",
                          f"also serves non-canary ports {s.outside_ports}: a switch ECN change "
                          "hits them too; add it to preflight.acknowledge_shared_switches or "
                          "pick a canary switch without them"))
        elif s.outside_ports:
            out.append(_r("blast_radius", s.name, "warn",
                          f"also serves non-canary ports {s.outside_ports} (acknowledged)"))
        elif s.reach:
            out.append(_r("blast_radius", s.name, "pass",
                          f"{s.written} reaches only the canary ports {s.reach}"))
        else:
            out.append(_r("blast_radius", s.name, "pass", "serves only canary hosts"))
    return out


def check_pfc_threshold(facts: PreflightFacts) -> list[CheckResult]:
    """SSH switches only: the simulated fabric knows its buffer model."""
    if facts.backend != "ssh":
        return []
    _, switches = _reachable(facts)
    return [_r("pfc_threshold", s.name, "pass", s.pfc_threshold.explain())
            if s.pfc_threshold else
            _r("pfc_threshold", s.name, "fail",
               "PFC threshold unknown (no lossless PG buffer profile with a pool size and "
               "dynamic_th in BUFFER_PG/BUFFER_PROFILE/BUFFER_POOL, no inventory "
               "pfc_pool_bytes): Kmax cannot be kept below the PFC onset; set pfc_pool_bytes "
               "and pfc_dynamic_th for this switch")
            for s in switches]


def check_counters(facts: PreflightFacts) -> list[CheckResult]:
    _, switches = _reachable(facts)
    out = []
    for s in switches:
        if s.ecn_counters_absent:
            out.append(_r("counters", s.name, "warn",
                          f"ECN counters absent (not zero): {s.ecn_counters_absent}; trials "
                          "are judged without switch ECN marks"))
        if s.counters_off:
            out.append(_r("counters", s.name, "warn",
                          f"counter groups not polled: {s.counters_off} (their values never "
                          "move; `ecntune preflight --enable-counters` turns them on)"))
        elif s.counter_poll_s and not s.ecn_counters_absent:
            out.append(_r("counters", s.name, "pass", "polled every " + ", ".join(
                f"{k} {v:g} s" for k, v in sorted(s.counter_poll_s.items()))))
    return out


# IB MTUs a RoCE path can use, and what mlx5 subtracts from the netdev MTU (iboe_get_mtu:
# GRH 40 + BTH 12 + XRC 4 + AtomicETH 28 + ICRC 4).
IB_MTUS = (256, 512, 1024, 2048, 4096)
ROCE_OVERHEAD = 88


def roce_mtu_for(netdev_mtu: int) -> int | None:
    fits = [m for m in IB_MTUS if m <= netdev_mtu - ROCE_OVERHEAD]
    return fits[-1] if fits else None


def check_nic_cc(facts: PreflightFacts) -> list[CheckResult]:
    hosts, _ = _reachable(facts)
    out = []
    for h in hosts:
        if h.cc_algorithm is not None:
            dcqcn = h.cc_algorithm.upper().startswith("ECN")
            out.append(_r("cc_algorithm", h.name, "pass" if dcqcn else "fail",
                          f"ROCE_CC_ALGORITHM {h.cc_algorithm}" + (
                              " (DCQCN)" if dcqcn else ": the firmware does not run DCQCN, "
                              "DCQCN knobs would read back fine and do nothing; mlxconfig "
                              "set ROCE_CC_ALGORITHM_P<n>=ECN and reset the firmware")))
        elif h.cc_params is False:
            out.append(_r("cc_algorithm", h.name, "fail", "no cc_params in debugfs: the "
                          "firmware exposes no DCQCN parameters"))
        elif facts.backend == "ssh":
            out.append(_r("cc_algorithm", h.name, "warn", "congestion-control algorithm not "
                          "readable (no mlxconfig/mstconfig)"))
        if h.roce_mtu is not None and h.mtu is not None:
            want = roce_mtu_for(h.mtu)
            out.append(_r("roce_mtu", h.name, "pass" if h.roce_mtu == want else "fail",
                          f"RoCE MTU {h.roce_mtu} with netdev MTU {h.mtu}" + (
                              "" if h.roce_mtu == want else
                              f": expected {want}; the path MTU is set from the netdev MTU "
                              "when the QP is created, check the peer and the MTU change")))
    return out


def check_cnp_queue(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    _, switches = _reachable(facts)
    out = []
    for s in switches:
        for port, sched in sorted(s.cnp_queue.items()):
            strict = sched.upper().startswith("STRICT")
            out.append(_r("cnp_queue", f"{s.name}/{port}", "pass" if strict else "warn",
                          f"CNPs (DSCP {spec.cnp_dscp}) leave by a {sched} queue" + (
                              "" if strict else ": not strict priority (stock SONiC runs it "
                              "on DWRR); CNPs may wait behind other traffic, so the baseline "
                              "must show no drops on it (cnp_starvation)")))
    return out


def check_roce_queue(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    """SONiC: the RoCE DSCP must reach the tuned lossless queue, with PFC on its TC."""
    _, switches = _reachable(facts)
    out = []
    for s in switches:
        for port, p in sorted(s.roce_path.items()):
            problems = []
            if p.tc is None or p.queue is None:
                problems.append("the maps do not place it in any queue")
            elif p.queue != s.lossless_queue:
                problems.append(f"tuned queue {s.lossless_queue}")
            if p.tc is not None and p.tc not in p.pfc_enable:
                problems.append(f"pfc_enable {','.join(map(str, p.pfc_enable)) or 'none'} "
                                f"(TC {p.tc} is lossy)")
            elif p.tc is not None:
                problems.append(f"pfc_enable {','.join(map(str, p.pfc_enable))}")
            bad = p.tc is None or p.queue != s.lossless_queue or p.tc not in p.pfc_enable
            fix = (f": map DSCP {spec.roce_dscp} to the lossless TC (e.g. sonic-db-cli "
                   f"CONFIG_DB HSET 'DSCP_TO_TC_MAP|{p.dscp_map or 'AZURE'}' {spec.roce_dscp} "
                   f"{s.lossless_queue}; config save -y), or the tuned thresholds never act"
                   if bad else "")
            out.append(_r("roce_queue", f"{s.name}/{port}", "fail" if bad else "pass",
                          f"{p.hops()}; " + "; ".join(problems) + fix))
    return out


def check_cnp_starvation(switches: Iterable[SwitchFacts],
                         delta: dict[str, dict[str, int]],
                         watermark_bytes: dict[str, int] | None = None) -> list[CheckResult]:
    """CNP queue drops under load (``delta``: counter deltas of the baseline measurement,
    ``{"leaf0/Ethernet0": {"queue6_drop_pkts": 3}}``) fail: a starved CNP queue leaves DCQCN
    blind whatever ECN does. ``watermark_bytes`` (port key -> peak CNP-queue occupancy)
    is evidence only."""
    out = []
    marks = watermark_bytes or {}
    for s in switches:
        for port, queue in sorted(s.cnp_queue_index.items()):
            key = f"{s.name}/{port}"
            row = delta.get(key)
            wm = f", watermark {marks[key]} B" if key in marks else ""
            if row is None or f"queue{queue}_drop_pkts" not in row:
                out.append(_r("cnp_starvation", key, "warn",
                              f"queue {queue} drop counter not read{wm}"))
                continue
            drops = row[f"queue{queue}_drop_pkts"]
            out.append(_r("cnp_starvation", key, "fail" if drops else "pass",
                          f"CNP queue {queue}: {drops} drops under the baseline load{wm}" + (
                              ": CNPs are lost, DCQCN cannot react; make the CNP queue "
                              "strict priority or raise its weight" if drops else "")))
    return out


def _having(facts: PreflightFacts, field: str) -> list[tuple[SwitchFacts, Any]]:
    """(switch, value) for every reachable switch whose fact ``field`` was read."""
    _, switches = _reachable(facts)
    return [(s, getattr(s, field)) for s in switches if getattr(s, field) is not None]


def check_nvue_roce_queue(facts: PreflightFacts) -> list[CheckResult]:
    """The RoCE data DSCP reaches the tuned lossless traffic class with PFC (NVUE): ECN tuned
    on TC 3 never marks RoCE that the switch's maps send to TC 0."""
    out = []
    for s, r in _having(facts, "roce_maps"):
        if not r.maps:
            out.append(_r("roce_queue", s.name, "warn",
                          "no RoCE maps in `nv show qos roce` (RoCE not set up with `nv set qos "
                          f"roce`?): where DSCP {r.dscp} lands is not checked"))
            continue
        chain = (f"DSCP {r.dscp} -> switch-priority {r.switch_prio} -> TC {r.tc}, PFC on "
                 f"switch-priorities {r.pfc or 'none'}, RoCE mode {r.mode}")
        why = ("the DSCP is in no switch-priority" if r.switch_prio is None else
               f"the data lands in TC {r.tc}, not the tuned lossless TC {s.lossless_queue}"
               if r.tc != s.lossless_queue else
               f"no PFC on switch-priority {r.switch_prio}" if r.switch_prio not in r.pfc else
               "RoCE runs lossy" if (r.mode or "").startswith("lossy") else None)
        out.append(_r("roce_queue", s.name, "fail" if why else "pass", chain + (
            f": {why}; map it (nv set qos mapping default-global dscp {r.dscp} "
            "switch-priority <p>, a PFC priority whose traffic class is the tuned one)"
            if why else "")))
    return out


def check_confirm(facts: PreflightFacts) -> list[CheckResult]:
    """NVUE commit-confirm: while an apply waits for confirmation the switch takes no other
    apply, so each trial's window blocks everyone else's ``nv config apply``; an apply already
    waiting would refuse ecntune's."""
    _, switches = _reachable(facts)
    out = []
    for s in switches:
        if s.confirm_pending:
            out.append(_r("nvue_confirm", s.name, "fail",
                          f"revision {', '.join(s.confirm_pending)} waits for confirmation "
                          "(`nv config apply --confirm-status`): no other apply goes through "
                          "until it is confirmed or rolled back"))
        elif s.confirm_window_s:
            w = s.confirm_window_s
            confirm_arg = str(w // 60) if w >= 60 and w % 60 == 0 else f"{w}s"
            out.append(_r("nvue_confirm", s.name, "warn",
                          f"trials apply with `nv config apply --confirm {confirm_arg}`: "
                          "while one waits, nobody else's `nv config apply` on this switch goes "
                          f"through, for up to {s.confirm_window_s} s per trial"))
    return out


RELOAD_ACTION = (
    "do not run either on this switch during a study (the canary would run the template's "
    "values while trials are measured); after `ecntune promote --persist`, promote again after "
    "either, or carry the tables in /etc/sonic/golden_config_db.json for `config "
    "load_minigraph --override_config` (whole tables: it deletes each table it names first; "
    "`config qos reload` reads no golden config)")


def check_qos_reload(facts: PreflightFacts) -> list[CheckResult]:
    """SONiC: ``config qos reload`` and ``config load_minigraph`` delete the QoS tables and
    write back what the HWSKU's template renders; a warning names what the canary loses."""
    out = []
    for s, r in _having(facts, "qos_reload"):
        if r.unchecked is not None:
            out.append(_r("qos_reload", s.name, "warn",
                          f"what `config qos reload` / `config load_minigraph` write back is "
                          f"not known ({r.unchecked}); both delete WRED_PROFILE, QUEUE and "
                          f"DSCP_TO_TC_MAP first (sonic-utilities `_clear_qos`), so {s.written} "
                          "and a RoCE DSCP fix are gone unless the template makes them: "
                          + RELOAD_ACTION))
        elif r.losses:
            out.append(_r("qos_reload", s.name, "warn",
                          f"`config qos reload` or `config load_minigraph` would rewrite the QoS "
                          f"tables from {r.template}: " + "; ".join(r.losses) + ": "
                          + RELOAD_ACTION))
        else:
            out.append(_r("qos_reload", s.name, "pass",
                          f"{r.template} regenerates {s.written}, its bindings and the RoCE "
                          "DSCP's path as they run now"))
    return out


def roce_packets(row: dict[str, int], prio: int) -> int:
    """Packets on priority ``prio`` in one counter row (mlx5 and SONiC names)."""
    return sum(row.get(k, 0) for k in (f"rx_prio{prio}_packets", f"tx_prio{prio}_packets",
                                       f"queue{prio}_tx_pkts"))


def check_shared_priority(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    prio = facts.roce_priority
    hosts, switches = _reachable(facts)
    out = []
    for job in spec.shared_jobs:
        if job.priority == prio:
            out.append(_r("shared_priority", job.name, "fail",
                          f"job {job.name} runs on the RoCE priority {prio}"
                          + (f" ({', '.join(job.hosts)})" if job.hosts else "")
                          + ": move it to another priority or stop it while tuning"))
    rows = [(h.name, h.counters_before, h.counters_after, h.sample_s) for h in hosts]
    rows += [(f"{s.name}/{p}", s.counters_before.get(p, {}), a, s.sample_s)
             for s in switches for p, a in sorted(s.counters_after.items())]
    for name, before, after, sample_s in rows:
        if not after or not before:
            continue
        seen = roce_packets(after, prio) - roce_packets(before, prio)
        if seen > spec.idle_traffic_packets:
            out.append(_r("shared_priority", name, "fail",
                          f"{seen} packets on RoCE priority {prio} in {sample_s:g} s while the "
                          "canary is idle: another job (storage/backup?) shares the priority"))
    if facts.workload_on_roce:
        out.append(_r("shared_priority", "workload", "warn",
                      f"the experiment's own background traffic uses priority {prio} (tuned "
                      "for on purpose)"))
    if not out:
        out.append(_r("shared_priority", "canary", "pass",
                      f"no other traffic on priority {prio}"))
    return out


def run_checks(facts: PreflightFacts, spec: PreflightSpec) -> list[CheckResult]:
    """Every check, in the order of the table."""
    return [*check_facts(facts), *check_mtu(facts, spec), *check_df_ping(facts, spec),
            *check_pfc(facts), *check_dscp(facts, spec), *check_dcqcn(facts),
            *check_nic_cc(facts), *check_link(facts, spec), *check_errors(facts, spec),
            *check_versions(facts), *check_blast_radius(facts, spec),
            *check_pfc_threshold(facts), *check_counters(facts), *check_roce_queue(facts, spec),
            *check_nvue_roce_queue(facts), *check_cnp_queue(facts, spec), *check_confirm(facts),
            *check_qos_reload(facts),
            *check_shared_priority(facts, spec)]


def worst(results: Iterable[CheckResult]) -> Status:
    statuses = {r.status for r in results}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "pass"


def failures(results: Iterable[CheckResult]) -> list[CheckResult]:
    return [r for r in results if r.status == "fail"]


def summary(results: list[CheckResult]) -> str:
    """One line per failure, for the ``SafetyAbort`` that stops ``run``."""
    return "; ".join(f"{r.check} {r.target}: {r.evidence}" for r in failures(results))
