"""Fabric description and per-device settings: the static inputs of a simulation.

``Topology`` describes the physical fabric (counts, speeds, delays, packet format, switch buffer
model). ``EcnConfig`` is the RED-like ECN marking of one switch queue, ``DcqcnConfig`` the
DCQCN reaction/notification point of one NIC, with the exact MLNX_OFED sysfs names
(``ecn/roce_rp``, ``ecn/roce_np``) and units (µs, bytes, Mbit/s, /1024 fixed point).

Defaults are the ConnectX factory values listed in ``shared/reference/INDEX.md`` section 2
(identical to ``tuner/settings.py`` KNOBS, which this package must not import). Note: the
ConnectX-4 Lx query there shows ``min_time_between_cnps = 0`` (one CNP per marked packet);
newer NICs ship 4 µs - set it explicitly to model them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

# RoCEv2 framing per packet on the wire: Ethernet 14 + FCS 4 + IPv4 20 + UDP 8 + BTH 12 +
# ICRC 4 = 62 bytes of headers, plus 8 bytes preamble/SFD and a 12-byte inter-frame gap.
ROCEV2_HEADER_BYTES = 62
ETHERNET_GAP_BYTES = 20


def check_finite(setting: Any) -> None:
    """Every number of a setting is finite: a NaN passes every range check (each comparison is
    false) and an infinity overflows the conversion to whole steps."""
    for f in fields(setting):
        value = getattr(setting, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{f.name} must be a finite number, got {value}")


@dataclass(frozen=True)
class Topology:
    """A two-tier leaf-spine (or one switch) fabric, or a three-tier one; oversubscription
    follows from the counts.

    ``three_tier``: ``pods`` pods of ``leaves`` leaves and ``spines`` spines each (the counts
    are per pod), and ``super_spines`` super-spines in ``spines`` planes: spine ``s`` of every
    pod connects to the ``super_spines / spines`` super-spines of plane ``s``, at
    ``core_gbps`` (default ``uplink_gbps``). Traffic within a pod stays below the super-spines;
    between pods it takes six hops (leaf, spine, super-spine, spine, leaf), ECMP at the leaf
    and again at the spine.

    Hosts with several NIC ports (``nics_per_host``, a GPU host's rails) connect all of them
    to one leaf by default. ``rails``: rail-aligned leaves, as 8-rail GPU clusters are built
    (NVIDIA DGX SuperPOD reference architecture): hosts come in groups of ``hosts_per_leaf``
    and NIC ``k`` of every host of group ``g`` connects to leaf ``g * nics_per_host + k``, so
    a leaf carries one rail of one group and same-rail traffic between hosts of a group never
    leaves it. ``leaves`` must then be a multiple of ``nics_per_host``.

    Buffer model (per switch): ``buffer_bytes`` of shared buffer; each ingress port/priority
    owns ``reserve_bytes`` before it draws from the shared pool; PFC XOFF fires when its
    shared use exceeds ``min(pfc_static_xoff_bytes, 2**pfc_alpha_log2 * free shared)``
    (dynamic threshold as on Broadcom/Spectrum parts), XON ``resume_offset_bytes`` below.
    ``headroom_bytes`` per port (None = sized from link speed and cable delay) absorbs what is
    in flight after XOFF; overflowing it is the only way the lossless class drops.
    """

    kind: Literal["leaf_spine", "single_switch", "three_tier"] = "leaf_spine"
    leaves: int = 2
    spines: int = 2
    pods: int = 1  # three_tier only
    super_spines: int = 0  # three_tier only: a multiple of spines
    core_gbps: float | None = None  # spine <-> super-spine (three_tier; None: uplink_gbps)
    hosts_per_leaf: int = 4
    nics_per_host: int = 1
    nic_gbps: float = 100.0
    uplink_gbps: float = 100.0
    link_delay_us: float = 1.0
    payload_bytes: int = 4096
    header_bytes: int = ROCEV2_HEADER_BYTES + ETHERNET_GAP_BYTES
    buffer_bytes: int = 32 * 2**20
    reserve_bytes: int = 18_432
    resume_offset_bytes: int = 9_216
    pfc_alpha_log2: int = -3
    pfc_static_xoff_bytes: int | None = None
    headroom_bytes: int | None = None
    pfc_refresh_us: float | None = None  # None = half the 0xFFFF-quanta pause time
    pfcwd_detect_us: float = 200_000.0
    wrr_weight_roce: float = 0.5  # RoCE share of a link when both data classes queue
    lossy_alpha_log2: int = 0  # dynamic drop threshold of the lossy class
    ack_bytes: int = 0  # wire bytes of acknowledgement per data packet (0: not modelled)
    ack_packet_bytes: int = 60  # wire bytes of one ACK (counts marked ACKs)
    # the NIC releases a flow's DCQCN rate limiter once its rate and target are back at
    # rpg_max_rate, so the flow's next CNP takes the first-CNP path again (initial_alpha_value,
    # rate_to_set_on_first_cnp); off by default, see docs/fidelity.md
    release_limiter: bool = False
    # How the NICs read dce_tcp_g, until hardware settles it (docs/fidelity.md): "kept", the
    # share of alpha kept per dce_tcp_rtt (gain (1024 - G)/1024: factory 1019 ~ the DCQCN
    # paper's 1/256), or "vendor", mstflint's text, alpha = cnp*g + (1 - g)*alpha with
    # g = G/1024 (factory 1019: alpha follows the last period's CNPs almost entirely). The
    # library keeps "kept", in which its physics tests and the packet-level calibration state
    # the DCQCN paper's g; the tuner's twin passes its own, mstflint's "vendor" by default
    # (fabric.topology.dce_tcp_g_reading).
    dce_tcp_g_reading: Literal["kept", "vendor"] = "kept"
    rails: bool = False  # rail-aligned leaves (see above)

    def __post_init__(self) -> None:
        check_finite(self)
        if self.kind not in ("leaf_spine", "single_switch", "three_tier"):
            raise ValueError(f"Topology.kind: unknown kind {self.kind!r}")
        if self.kind == "three_tier":
            if self.pods < 2:
                raise ValueError(f"Topology.pods: a three_tier fabric needs >= 2 pods, got "
                                 f"{self.pods}")
            if self.super_spines < 1 or self.super_spines % self.spines:
                raise ValueError(f"Topology.super_spines ({self.super_spines}) must be a "
                                 f"positive multiple of spines ({self.spines}): one plane of "
                                 "super-spines per spine of a pod")
            if self.core_gbps is not None and self.core_gbps <= 0:
                raise ValueError("Topology.core_gbps must be > 0")
        elif self.pods != 1 or self.super_spines or self.core_gbps is not None:
            raise ValueError("Topology.pods / super_spines / core_gbps: three_tier only")
        for name in ("leaves", "spines", "hosts_per_leaf", "nics_per_host", "payload_bytes",
                     "buffer_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"Topology.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("nic_gbps", "uplink_gbps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"Topology.{name} must be > 0")
        if self.link_delay_us < 0:
            raise ValueError("Topology.link_delay_us must be >= 0")
        if not 0.0 < self.wrr_weight_roce <= 1.0:
            raise ValueError("Topology.wrr_weight_roce must be in (0, 1]")
        if self.dce_tcp_g_reading not in ("kept", "vendor"):
            raise ValueError(f"Topology.dce_tcp_g_reading: 'kept' or 'vendor', got "
                             f"{self.dce_tcp_g_reading!r}")
        if self.rails and self.kind != "leaf_spine":
            raise ValueError("Topology.rails: rail-aligned leaves need kind leaf_spine")
        if self.rails and self.leaves % self.nics_per_host:
            raise ValueError(f"Topology.rails: leaves ({self.leaves}) must be a multiple of "
                             f"nics_per_host ({self.nics_per_host}): one leaf per rail of each "
                             "group of hosts")

    @property
    def n_leaves(self) -> int:
        return 1 if self.kind == "single_switch" else self.leaves * self.pods

    @property
    def n_spines(self) -> int:
        return 0 if self.kind == "single_switch" else self.spines * self.pods

    @property
    def path_width(self) -> int:
        """Links on the longest route: NIC, leaf, spine(, super-spine, spine), leaf."""
        return 6 if self.kind == "three_tier" else 4

    @property
    def core(self) -> float:
        return self.uplink_gbps if self.core_gbps is None else self.core_gbps

    @property
    def n_hosts(self) -> int:
        if self.rails:  # a group of hosts_per_leaf hosts spans nics_per_host leaves
            return self.n_leaves // self.nics_per_host * self.hosts_per_leaf
        return self.n_leaves * self.hosts_per_leaf

    @property
    def nics_per_leaf(self) -> int:
        """NIC-facing ports of one leaf (one per host of its group when rail-aligned)."""
        return self.hosts_per_leaf if self.rails else self.hosts_per_leaf * self.nics_per_host

    @property
    def n_nics(self) -> int:
        return self.n_hosts * self.nics_per_host

    @property
    def wire_bytes(self) -> int:
        """One full packet on the wire."""
        return self.payload_bytes + self.header_bytes

    @property
    def efficiency(self) -> float:
        """Payload share of the wire rate (goodput / line rate for full packets)."""
        return self.payload_bytes / self.wire_bytes

    @property
    def oversubscription(self) -> float:
        """At the leaves: NIC-facing capacity over uplink capacity."""
        if self.kind == "single_switch":
            return 1.0
        down = self.nics_per_leaf * self.nic_gbps
        return down / (self.spines * self.uplink_gbps)

    @property
    def spine_oversubscription(self) -> float:
        """At a three-tier pod's spines: leaf-facing capacity over super-spine capacity."""
        if self.kind != "three_tier":
            return 1.0
        return self.leaves * self.uplink_gbps / (self.super_spines // self.spines * self.core)

    def headroom_for(self, gbps: float) -> int:
        """Per-port headroom: two cable delays plus one reaction time of line-rate data and
        two maximum-size packets (the usual sizing rule, e.g. SONiC's buffer calculator)."""
        if self.headroom_bytes is not None:
            return self.headroom_bytes
        rate_b_per_us = gbps * 1e3 / 8.0
        return int(rate_b_per_us * (2.0 * self.link_delay_us + 1.0) + 2 * self.wire_bytes)

    def refresh_us(self, gbps: float) -> float:
        """PFC refresh period: half of a 0xFFFF-quanta pause (1 quantum = 512 bit times)."""
        if self.pfc_refresh_us is not None:
            return self.pfc_refresh_us
        return 0xFFFF * 512 / (gbps * 1e3) / 2.0


@dataclass(frozen=True)
class EcnConfig:
    """RED-like ECN marking of one egress queue: p = 0 at or below ``kmin_bytes``, linear to
    ``pmax`` (a probability, 0..1) at ``kmax_bytes``, 1 above."""

    kmin_bytes: int = 1_048_576
    kmax_bytes: int = 2_097_152
    pmax: float = 0.05
    enabled: bool = True

    def __post_init__(self) -> None:
        check_finite(self)
        if self.kmin_bytes < 0 or self.kmax_bytes <= self.kmin_bytes:
            raise ValueError(f"EcnConfig: need 0 <= kmin_bytes < kmax_bytes, got "
                             f"{self.kmin_bytes}, {self.kmax_bytes}")
        if not 0.0 <= self.pmax <= 1.0:
            raise ValueError(f"EcnConfig.pmax is a probability in [0, 1], got {self.pmax}")

    def probability(self, queue_bytes: float) -> float:
        """Marking probability at this instantaneous queue depth (reference implementation)."""
        if not self.enabled or queue_bytes <= self.kmin_bytes:
            return 0.0
        if queue_bytes > self.kmax_bytes:
            return 1.0
        return self.pmax * (queue_bytes - self.kmin_bytes) / (self.kmax_bytes - self.kmin_bytes)


_DCQCN_RANGES: dict[str, tuple[int, int]] = {
    "clamp_tgt_rate": (0, 1),
    "clamp_tgt_rate_after_time_inc": (0, 1),
    "rpg_time_reset": (1, 131_071),
    "rpg_byte_reset": (0, 2**32 - 1),
    "rpg_threshold": (0, 31),
    "rpg_max_rate": (0, 2**32 - 1),
    "rpg_ai_rate": (0, 2**32 - 1),
    "rpg_hai_rate": (0, 2**32 - 1),
    "rpg_gd": (0, 15),
    "rpg_min_dec_fac": (1, 100),
    "rpg_min_rate": (0, 2**32 - 1),
    "rate_to_set_on_first_cnp": (0, 2**32 - 1),
    "dce_tcp_g": (0, 1023),
    "dce_tcp_rtt": (1, 131_071),
    "rate_reduce_monitor_period": (0, 131_071),
    "initial_alpha_value": (0, 1023),
    "min_time_between_cnps": (0, 131_071),
    "cnp_moderation": (1, 2),
    "cnp_802p_prio": (0, 7),
}


@dataclass(frozen=True)
class DcqcnConfig:
    """DCQCN on one NIC port, ConnectX names and units (µs, bytes, Mbit/s, /1024)."""

    rpg_time_reset: int = 300
    rpg_byte_reset: int = 32_767
    rpg_threshold: int = 1
    rpg_max_rate: int = 0
    rpg_ai_rate: int = 5
    rpg_hai_rate: int = 50
    rpg_gd: int = 11
    rpg_min_dec_fac: int = 50
    rpg_min_rate: int = 1
    rate_to_set_on_first_cnp: int = 0
    dce_tcp_g: int = 1019
    dce_tcp_rtt: int = 1
    rate_reduce_monitor_period: int = 4
    initial_alpha_value: int = 1023
    clamp_tgt_rate: int = 0
    clamp_tgt_rate_after_time_inc: int = 1
    min_time_between_cnps: int = 0
    # mlxconfig ROCE_CC_CNP_MODERATION: 1 PER_PORT, one min_time_between_cnps timer for the
    # port (the firmware's text: "minimum time between sending CNPs from the port"); 2 PER_FLOW,
    # one per QP. Matters only with min_time_between_cnps > 0.
    cnp_moderation: int = 1
    # The priority this NIC's CNPs travel in (sysfs roce_np/cnp_802p_prio, factory 6). A
    # priority of its own is served strictly first, so a CNP is only delayed by the cables;
    # set to the data's priority, CNPs wait behind the reverse path's data queues.
    cnp_802p_prio: int = 6

    def __post_init__(self) -> None:
        check_finite(self)
        for name, (lo, hi) in _DCQCN_RANGES.items():
            value = getattr(self, name)
            if not lo <= value <= hi:
                raise ValueError(f"DcqcnConfig.{name}={value} outside [{lo}, {hi}]")

    def as_dict(self) -> dict[str, int]:
        return {f.name: int(getattr(self, f.name)) for f in fields(self)}


DCQCN_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(DcqcnConfig))


HASH_FIELDS: tuple[str, ...] = ("src_ip", "dst_ip", "udp_sport")
# RoCEv2 UDP source ports: the dynamic range 0xC000-0xFFFF (the destination port is 4791);
# ``udp_sport: fixed`` sends every QP from the range's first port, 0xC000.
ROCEV2_DPORT = 4791
FIXED_UDP_SPORT = 0xC000


@dataclass(frozen=True)
class EcmpConfig:
    """What the leaves hash to pick an uplink, and how much entropy the NICs give them.

    ``hash_fields``: the header fields in the leaves' ECMP hash (the default hashes all three,
    as a switch configured with SONiC ``ECMP_HASH`` SRC_IP, DST_IP, L4_SRC_PORT does).
    ``udp_sport``: ``per_qp`` gives every QP its own seeded source port (what ConnectX derives
    from the QP numbers); ``fixed`` sends every QP from ``FIXED_UDP_SPORT`` (no entropy).
    A hash of ``[udp_sport]`` only with ``udp_sport: fixed`` is a planted, deterministic ECMP
    collision: every cross-leaf flow of a leaf takes the same uplink.
    """

    hash_fields: tuple[str, ...] = HASH_FIELDS
    udp_sport: Literal["per_qp", "fixed"] = "per_qp"

    def __post_init__(self) -> None:
        check_finite(self)
        fields_ = tuple(self.hash_fields)
        bad = [f for f in fields_ if f not in HASH_FIELDS]
        if bad or not fields_ or len(set(fields_)) != len(fields_):
            raise ValueError(f"EcmpConfig.hash_fields: need distinct fields out of "
                             f"{list(HASH_FIELDS)}, got {list(fields_)}")
        object.__setattr__(self, "hash_fields", fields_)
        if self.udp_sport not in ("per_qp", "fixed"):
            raise ValueError(f"EcmpConfig.udp_sport: 'per_qp' or 'fixed', got {self.udp_sport!r}")
