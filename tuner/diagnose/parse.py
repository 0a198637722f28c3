"""Parsers of the host outputs ``diagnose`` reads beyond pre-flight's (pure; samples and their
sources in docs/reference-notes/diagnose-formats.md).

Each returns ``None`` when the text does not hold what it parses (a missing tool, a denied read),
so the check says "not checked" instead of guessing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class PcieLink:
    """The NIC's PCIe link from ``lspci -vvv`` (pciutils ls-caps.c ``cap_express_link``)."""

    cap_speed: float  # GT/s
    cap_width: int
    sta_speed: float
    sta_width: int
    cap_line: str  # the LnkCap / LnkSta lines verbatim, for the evidence
    sta_line: str
    max_payload: int | None = None  # DevCtl (what runs), bytes
    max_read_req: int | None = None

    @property
    def degraded(self) -> bool:
        return self.sta_width < self.cap_width or self.sta_speed < self.cap_speed


_LNKCAP = re.compile(r"^\s*LnkCap:\s*Port #\d+, Speed ([\d.]+)GT/s, Width x(\d+).*$", re.M)
# "Speed unknown (downgraded), Width x0 (downgraded)": the link is down (google-coral/edgetpu#742)
_LNKSTA = re.compile(r"^\s*LnkSta:\s*Speed ([\d.]+GT/s|unknown)[^,]*, Width x(\d+).*$", re.M)
_DEVCTL = re.compile(r"MaxPayload (\d+) bytes, MaxReadReq (\d+) bytes")


def parse_lspci(text: str) -> PcieLink | None:
    """LnkCap/LnkSta speed and width, DevCtl MaxPayload/MaxReadReq; ``None`` without them
    (no device, or ``Capabilities: <access denied>`` when lspci runs without root)."""
    cap, sta = _LNKCAP.search(text), _LNKSTA.search(text)
    if cap is None or sta is None:
        return None
    ctl = _DEVCTL.search(text)
    return PcieLink(
        cap_speed=float(cap.group(1)), cap_width=int(cap.group(2)),
        sta_speed=float(sta.group(1).removesuffix("GT/s").replace("unknown", "0")),
        sta_width=int(sta.group(2)),
        cap_line=cap.group(0).strip(), sta_line=sta.group(0).strip(),
        max_payload=int(ctl.group(1)) if ctl else None,
        max_read_req=int(ctl.group(2)) if ctl else None)


def parse_cpulist(text: str) -> set[int] | None:
    """A kernel CPU list (``0-15,32-47``, ``3``) as a set; ``None`` if it is not one."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if m is None:
            return None
        lo = int(m.group(1))
        cpus.update(range(lo, int(m.group(2) or lo) + 1))
    return cpus or None


def parse_node_cpulists(text: str) -> dict[int, set[int]]:
    """``grep -H '' .../node*/cpulist`` lines -> ``{node: cpus}``."""
    out: dict[int, set[int]] = {}
    for line in text.splitlines():
        m = re.search(r"node(\d+)/cpulist:(.*)$", line.strip())
        if m and (cpus := parse_cpulist(m.group(2))) is not None:
            out[int(m.group(1))] = cpus
    return out


def parse_irq_affinity(text: str) -> dict[int, set[int]]:
    """``<irq> <smp_affinity_list>`` lines (printed by the diagnose command) -> ``{irq: cpus}``."""
    out: dict[int, set[int]] = {}
    for line in text.splitlines():
        irq, _, cpus = line.strip().partition(" ")
        if irq.isdigit() and (parsed := parse_cpulist(cpus)) is not None:
            out[int(irq)] = parsed
    return out


@dataclass(frozen=True)
class Gid:
    index: int
    gid: str
    type: str  # gid_attrs/types: "IB/RoCE v1" or "RoCE v2" (drivers/infiniband/core/cache.c)


def parse_gids(text: str) -> list[Gid]:
    """``<index> <gid> <type>`` lines (non-zero entries of ``ports/N/gids``) -> GIDs."""
    out = []
    for line in text.splitlines():
        parts = line.strip().split(" ", 2)
        if len(parts) >= 2 and parts[0].isdigit() and re.fullmatch(r"[0-9a-f:]{39}", parts[1]):
            out.append(Gid(int(parts[0]), parts[1], parts[2].strip() if len(parts) > 2 else ""))
    return out


def ipv4_gid(address: str) -> str | None:
    """The IPv4-mapped GID of ``address`` as sysfs prints it, ``None`` for a non-IPv4."""
    import ipaddress

    try:
        v4 = ipaddress.IPv4Address(address)
    except ValueError:
        return None
    raw = ipaddress.IPv6Address(f"::ffff:{v4}").packed.hex()
    return ":".join(raw[i:i + 4] for i in range(0, 32, 4))


def port_state(devinfo: str) -> str | None:
    """``state:`` of the port in ``ibv_devinfo -d <dev> -i <port>`` (``PORT_ACTIVE``)."""
    m = re.search(r"^\s*state:\s*(\S+)", devinfo, re.M)
    return m.group(1) if m else None


# ethtool -m (sfpdiag.c / qsfp.c): "Receiver signal average optical power : 0.5020 mW / -2.99
# dBm" (SFP), "Rcvr signal avg optical power(Channel 1) : ... dBm" (QSFP), thresholds as
# "Laser rx power low warning threshold : 0.0525 mW / -12.80 dBm".
_RX = re.compile(r"^\s*(Receiver signal average optical power|Rcvr signal avg optical power"
                 r"(?:\s*\(Channel \d+\))?)\s*:\s*[\d.]+ mW / (-?[\d.]+|-inf) dBm", re.M)
_RX_LOW = re.compile(r"^\s*Laser rx power low (warning|alarm) threshold\s*:\s*[\d.]+ mW / "
                     r"(-?[\d.]+) dBm", re.M)


@dataclass(frozen=True)
class Optics:
    rx_dbm: dict[str, float]  # lane label -> received power
    low_dbm: float | None  # the module's low-warning threshold (else low-alarm)


def parse_optics(text: str) -> Optics | None:
    """Received optical power per lane and the module's own low threshold; ``None`` when the
    module reports no optical power (copper cable, EEPROM not readable)."""
    rx = {m.group(1).strip(): float(m.group(2)) for m in _RX.finditer(text)}
    if not rx:
        return None
    if any(v != float("-inf") for v in rx.values()):  # unused lanes of a 1-lane module: -inf
        rx = {lane: v for lane, v in rx.items() if v != float("-inf")}
    lows = {m.group(1): float(m.group(2)) for m in _RX_LOW.finditer(text)}
    return Optics(rx, lows.get("warning", lows.get("alarm")))


# nvidia-smi topo -m: a matrix whose header row starts with GPU0 (then GPUn, NICn or, before
# the "NIC Legend:", the device names) and ends with "CPU Affinity ..."; cells X, NV#, PIX,
# PXB, PHB, NODE, SYS (closest first); the legend maps "  NIC0: mlx5_0".
TOPO_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}


def parse_topo(text: str) -> dict[str, dict[str, str]] | None:
    """``{nic device: {gpu: relation}}`` from ``nvidia-smi topo -m``; ``None`` without a
    matrix (no GPUs, no nvidia-smi)."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in text.splitlines()]
    header = next((ln.split() for ln in lines if ln.split()[:1] == ["GPU0"]), None)
    if header is None:
        return None
    cols = []
    for tok in header:
        if tok == "CPU":
            break
        cols.append(tok)
    legend = {m.group(1): m.group(2) for ln in lines
              if (m := re.match(r"^\s*(NIC\d+):\s*(\S+)\s*$", ln))}
    out: dict[str, dict[str, str]] = {}
    for ln in lines:
        toks = ln.split()
        if not toks or not re.fullmatch(r"GPU\d+", toks[0]) or len(toks) < len(cols) + 1:
            continue
        for col, cell in zip(cols, toks[1:len(cols) + 1], strict=True):
            if not col.startswith("GPU"):
                out.setdefault(legend.get(col, col), {})[toks[0]] = cell
    return out or None
