"""The fabric graph: NICs, switches, directed links, port names, ECMP and per-device settings.

Every physical cable is two directed links. A directed link's egress queue sits at its source
(switch port or NIC port), its PFC ingress accounting at its destination switch. Switch ports
are named SONiC-style (``leaf0/Ethernet0``, ``Ethernet4``, ...: NIC-facing ports first, then
uplinks in spine order; spine ports in leaf order); NIC ports by NIC name (``host0/mlx5_0``).

ECMP: a leaf picks the spine for a flow from a seeded hash of (switch, src, dst, UDP source
port), so collisions happen as on real fabrics; spines and same-leaf traffic have one path. In a
three-tier fabric a spine picks the super-spine of its plane for a flow to another pod the same
way (its own hash), and super-spines have one path down (``super<i>/Ethernet<4 pod>``).
``EcmpConfig`` narrows the hashed fields and the NICs' source-port entropy: a hash of the source
port alone with one fixed port is a planted collision (every cross-leaf flow on one uplink).
Not modelled: adaptive routing, flowlet switching, link failures, LAG inside a link.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rocesim.config import DcqcnConfig, EcmpConfig, EcnConfig, Topology

ROCE_TC = 3
CNP_TC = 6
OTHER_LOSSLESS_TC = 4
OTHER_LOSSY_TC = 0


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser, vectorised (uint64 in, uint64 out)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


@dataclass(frozen=True)
class Link:
    """One direction of a cable."""

    src: str  # node name (switch or NIC)
    dst: str
    src_port: str  # counter key of the transmitting port
    dst_port: str  # counter key of the receiving port
    gbps: float


class Fabric:
    """A built topology plus the ECN/DCQCN settings of every device (mutable, per device)."""

    def __init__(self, topo: Topology, seed: int = 0, ecmp: EcmpConfig | None = None) -> None:
        self.topo = topo
        self.seed = int(seed)
        self.ecmp = ecmp or EcmpConfig()
        n_leaf = topo.n_leaves
        self.super_names: list[str] = []
        if topo.kind == "single_switch":
            self.leaf_names = ["sw0"]
            self.spine_names: list[str] = []
        else:
            self.leaf_names = [f"leaf{i}" for i in range(n_leaf)]
            self.spine_names = [f"spine{i}" for i in range(topo.n_spines)]
        if topo.kind == "three_tier":
            self.super_names = [f"super{i}" for i in range(topo.super_spines)]
        self.switch_names = self.leaf_names + self.spine_names + self.super_names
        g = topo.nics_per_host
        self.nic_names = [f"host{h}/mlx5_{k}" for h in range(topo.n_hosts) for k in range(g)]
        per_leaf = topo.nics_per_leaf
        place = [self._place(topo, i) for i in range(topo.n_nics)]  # (leaf, port index)
        self.nic_leaf = np.array([leaf for leaf, _ in place], dtype=np.int64)
        self._nic_index = {n: i for i, n in enumerate(self.nic_names)}
        self._sw_index = {n: i for i, n in enumerate(self.switch_names)}
        self.links: list[Link] = []
        # up[i] = NIC i -> leaf, down[i] = leaf -> NIC i
        self.nic_up = np.zeros(topo.n_nics, dtype=np.int64)
        self.nic_down = np.zeros(topo.n_nics, dtype=np.int64)
        for i, nic in enumerate(self.nic_names):
            leaf = self.leaf_names[place[i][0]]
            port = f"{leaf}/Ethernet{4 * place[i][1]}"
            self.nic_up[i], self.nic_down[i] = self._cable(nic, leaf, nic, port, topo.nic_gbps)
        # leaf_up[leaf, s]: leaf -> spine s of its pod; spine_down[spine, leaf] (-1: no cable)
        n_sp, pod_l = topo.spines, topo.leaves  # per pod
        self.leaf_up = np.zeros((n_leaf, max(n_sp, 1)), dtype=np.int64)
        self.spine_down = np.full((max(len(self.spine_names), 1), n_leaf), -1, dtype=np.int64)
        for li, leaf in enumerate(self.leaf_names):
            pod, lj = divmod(li, pod_l)
            for si in range(len(self.spine_names) and n_sp):
                spine = self.spine_names[pod * n_sp + si]
                lp = f"{leaf}/Ethernet{4 * (per_leaf + si)}"
                sp = f"{spine}/Ethernet{4 * lj}"
                self.leaf_up[li, si], self.spine_down[pod * n_sp + si, li] = self._cable(
                    leaf, spine, lp, sp, topo.uplink_gbps)
        # three_tier: spine_up[spine, j] -> super-spine j of its plane; super_down[super, pod]
        plane = topo.super_spines // topo.spines if self.super_names else 0
        self.spine_up = np.zeros((max(len(self.spine_names), 1), max(plane, 1)), dtype=np.int64)
        self.super_down = np.zeros((max(len(self.super_names), 1), topo.pods), dtype=np.int64)
        for gi, spine in enumerate(self.spine_names if plane else []):
            pod, si = divmod(gi, n_sp)
            for j in range(plane):
                sup = self.super_names[si * plane + j]
                up = f"{spine}/Ethernet{4 * (pod_l + j)}"
                down = f"{sup}/Ethernet{4 * pod}"
                self.spine_up[gi, j], self.super_down[si * plane + j, pod] = self._cable(
                    spine, sup, up, down, topo.core)
        self._ecn: dict[tuple[str, int], EcnConfig] = {}
        default_ecn = EcnConfig()
        for sw in self.switch_names:
            self._ecn[(sw, ROCE_TC)] = default_ecn
        self._dcqcn: dict[str, DcqcnConfig] = {n: DcqcnConfig() for n in self.nic_names}
        self._buffer: dict[str, int] = {}

    @staticmethod
    def _place(topo: Topology, i: int) -> tuple[int, int]:
        """NIC ``i`` (port ``k`` of host ``h``): its leaf and its port's index there."""
        if not topo.rails:
            return divmod(i, topo.nics_per_leaf)
        h, k = divmod(i, topo.nics_per_host)
        group, port = divmod(h, topo.hosts_per_leaf)
        return group * topo.nics_per_host + k, port

    def _cable(self, lower: str, upper: str, lower_port: str, upper_port: str, gbps: float
               ) -> tuple[int, int]:
        """One cable: the link up from ``lower`` and the link back down, in that order."""
        self.links.append(Link(lower, upper, lower_port, upper_port, gbps))
        self.links.append(Link(upper, lower, upper_port, lower_port, gbps))
        return len(self.links) - 2, len(self.links) - 1

    # ---- names ----
    def hosts_under(self, leaf: str) -> list[str]:
        """NIC names attached to a leaf (or to ``sw0``)."""
        if leaf not in self.leaf_names:
            raise KeyError(f"unknown leaf {leaf!r}; leaves are {self.leaf_names}")
        li = self.leaf_names.index(leaf)
        return [n for i, n in enumerate(self.nic_names) if self.nic_leaf[i] == li]

    def nic_index(self, nic: str) -> int:
        try:
            return self._nic_index[nic]
        except KeyError:
            raise KeyError(f"unknown NIC {nic!r}; NICs are named like "
                           f"{self.nic_names[0]!r}") from None

    def switch_index(self, switch: str) -> int:
        try:
            return self._sw_index[switch]
        except KeyError:
            raise KeyError(f"unknown switch {switch!r}; switches are "
                           f"{self.switch_names}") from None

    @property
    def port_names(self) -> list[str]:
        """Every counter key: NIC names, then switch ports."""
        seen: dict[str, None] = {}
        for ln in self.links:
            seen.setdefault(ln.src_port, None)
        return list(seen)

    # ---- settings ----
    def set_ecn(self, switch: str, cfg: EcnConfig, tc: int = ROCE_TC) -> None:
        self.switch_index(switch)
        if not isinstance(cfg, EcnConfig):
            raise TypeError(f"set_ecn({switch!r}): expected EcnConfig, got {type(cfg).__name__}")
        self._ecn[(switch, int(tc))] = cfg

    def ecn(self, switch: str, tc: int = ROCE_TC) -> EcnConfig:
        self.switch_index(switch)
        return self._ecn.get((switch, int(tc)), EcnConfig(enabled=False))

    def set_dcqcn(self, nic: str, cfg: DcqcnConfig) -> None:
        self.nic_index(nic)
        if not isinstance(cfg, DcqcnConfig):
            raise TypeError(f"set_dcqcn({nic!r}): expected DcqcnConfig, "
                            f"got {type(cfg).__name__}")
        self._dcqcn[nic] = cfg

    def dcqcn(self, nic: str) -> DcqcnConfig:
        self.nic_index(nic)
        return self._dcqcn[nic]

    def set_buffer(self, switch: str, buffer_bytes: int) -> None:
        """Shared buffer of one switch (default ``Topology.buffer_bytes``): real parts differ."""
        self.switch_index(switch)
        if buffer_bytes < 1:
            raise ValueError(f"set_buffer({switch!r}): buffer_bytes must be >= 1")
        self._buffer[switch] = int(buffer_bytes)

    def buffer_bytes(self, switch: str) -> int:
        self.switch_index(switch)
        return self._buffer.get(switch, self.topo.buffer_bytes)

    def xoff_bytes(self, switch: str) -> int:
        """Bytes one ingress port/priority may hold before XOFF when it alone uses an
        otherwise empty shared buffer: reserve + min(static XOFF, alpha x buffer). A scale for
        the buffer, not an ECN bound: the egress queue at which PFC fires depends on the
        fan-in (``pfc_onset_bytes``)."""
        self.switch_index(switch)
        t = self.topo
        thr = (2.0 ** t.pfc_alpha_log2) * self.buffer_bytes(switch)
        if t.pfc_static_xoff_bytes is not None:
            thr = min(thr, float(t.pfc_static_xoff_bytes))
        return int(t.reserve_bytes + thr)

    def congesting_fan_in(self, switch: str) -> int:
        """The fewest ingress ports whose traffic to one egress queue of ``switch`` congests
        it: 1 when some ingress link is faster than some egress link (an uplink into a host
        port), else 2. The PFC onset queue (``pfc_onset_bytes``) grows with the fan-in, so
        this is the fan-in at which PFC comes earliest."""
        self.switch_index(switch)
        into = [ln.gbps for ln in self.links if ln.dst == switch]
        out = [ln.gbps for ln in self.links if ln.src == switch]
        return 1 if into and out and max(into) > min(out) else 2

    def pfc_onset_bytes(self, switch: str, fan_in: int | None = None) -> int:
        """The egress queue depth at which ``fan_in`` ingress ports feeding it evenly send
        PFC XOFF (the kernel's ``pfc`` rule, nothing else in the shared buffer): each holds
        ``reserve + s`` with ``s = min(static, alpha x (buffer - fan_in x s))``, i.e.
        ``s = alpha x buffer / (1 + fan_in x alpha)``. ``fan_in`` None: ``congesting_fan_in``."""
        n = self.congesting_fan_in(switch) if fan_in is None else int(fan_in)
        if n < 1:
            raise ValueError(f"pfc_onset_bytes({switch!r}): fan_in must be >= 1, got {n}")
        t = self.topo
        a = 2.0 ** t.pfc_alpha_log2
        s = a * self.buffer_bytes(switch) / (1.0 + n * a)
        if t.pfc_static_xoff_bytes is not None:
            s = min(s, float(t.pfc_static_xoff_bytes))
        return int(n * (t.reserve_bytes + s))

    # ---- routing ----
    def routes(self, src: np.ndarray, dst: np.ndarray, sport: np.ndarray,
               ack: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Paths (link ids, -1 padded to ``Topology.path_width`` hops) and hop counts for flows
        (NIC indices). ``ack`` flags flows of acknowledgements (src/dst are then the data
        flow's dst/src); the hash here treats them like any flow, a subclass may hash their
        5-tuple its way."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        if np.any(src == dst):
            raise ValueError("a flow needs distinct source and destination NICs")
        n = src.shape[0]
        path = np.full((n, self.topo.path_width), -1, dtype=np.int64)
        hops = np.full(n, 2, dtype=np.int64)
        ls = self.nic_leaf[src]
        ld = self.nic_leaf[dst]
        path[:, 0] = self.nic_up[src]
        same = ls == ld
        path[same, 1] = self.nic_down[dst[same]]
        cross = ~same
        if np.any(cross):
            n_sp = self.topo.spines  # per pod
            used = self.ecmp.hash_fields  # a field left out of the hash adds nothing
            zero = np.zeros(int(cross.sum()), dtype=np.uint64)
            key = (np.uint64(self.seed) * np.uint64(0x100000001B3)
                   ^ mix64(ls[cross].astype(np.uint64) * np.uint64(1_000_003)
                           + (src[cross].astype(np.uint64) * np.uint64(65_537)
                              if "src_ip" in used else zero)
                           + (dst[cross].astype(np.uint64) * np.uint64(257)
                              if "dst_ip" in used else zero)
                           + (np.asarray(sport)[cross].astype(np.uint64) * np.uint64(0x9E37)
                              if "udp_sport" in used else zero)))
            spine = (mix64(key) % np.uint64(n_sp)).astype(np.int64)
            path[cross, 1] = self.leaf_up[ls[cross], spine]
            if not self.super_names:
                path[cross, 2] = self.spine_down[spine, ld[cross]]
                path[cross, 3] = self.nic_down[dst[cross]]
                hops[cross] = 4
                return path, hops
            pod_s, pod_d = ls[cross] // self.topo.leaves, ld[cross] // self.topo.leaves
            up_s = pod_s * n_sp + spine  # the spine of the source's pod the leaf chose
            local = pod_s == pod_d
            idx = np.nonzero(cross)[0]
            near, far = idx[local], idx[~local]
            path[near, 2] = self.spine_down[up_s[local], ld[near]]
            path[near, 3] = self.nic_down[dst[near]]
            hops[near] = 4
            if far.size:  # the spine's own hash picks the super-spine of its plane
                plane = self.spine_up.shape[1]
                # salted by the spine (+1: a zero salt would repeat the leaf's choice)
                salt = (up_s[~local] + 1).astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)
                j = (mix64(key[~local] ^ salt) % np.uint64(plane)).astype(np.int64)
                sup = spine[~local] * plane + j
                path[far, 2] = self.spine_up[up_s[~local], j]
                path[far, 3] = self.super_down[sup, pod_d[~local]]
                path[far, 4] = self.spine_down[pod_d[~local] * n_sp + spine[~local], ld[far]]
                path[far, 5] = self.nic_down[dst[far]]
                hops[far] = 6
        return path, hops
