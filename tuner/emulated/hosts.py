"""Emulated mlx5 host: the fake /sys tree (OFED sysfs or upstream debugfs layout) and counters.

Paths and names are the real ones (shared/reference/mlx5-dcqcn-config/*-layout.txt):
OFED ``sys/class/net/<if>/ecn/roce_rp|roce_np/<knob>`` + ``enable/0..7``; upstream
``sys/kernel/debug/mlx5/<pci>/cc_params/rp_*|np_*``; RDMA counters in
``sys/class/infiniband/<ibdev>/ports/1/hw_counters/<name>``. Standard library only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# OFED sysfs names (roce_rp/ then roce_np/), in the driver's attribute order.
RP_KNOBS = (
    "clamp_tgt_rate", "clamp_tgt_rate_after_time_inc", "rpg_time_reset", "rpg_byte_reset",
    "rpg_threshold", "rpg_max_rate", "rpg_ai_rate", "rpg_hai_rate", "rpg_gd", "rpg_min_dec_fac",
    "rpg_min_rate", "rate_to_set_on_first_cnp", "dce_tcp_g", "dce_tcp_rtt",
    "rate_reduce_monitor_period", "initial_alpha_value",
)
NP_KNOBS = ("min_time_between_cnps", "cnp_dscp", "cnp_802p_prio")

# sysfs name -> upstream debugfs name (upstream-debugfs-cc_params-layout.txt mapping table).
DEBUGFS_NAME = {
    "clamp_tgt_rate": "rp_clamp_tgt_rate",
    "clamp_tgt_rate_after_time_inc": "rp_clamp_tgt_rate_ati",
    "rpg_time_reset": "rp_time_reset",
    "rpg_byte_reset": "rp_byte_reset",
    "rpg_threshold": "rp_threshold",
    "rpg_ai_rate": "rp_ai_rate",
    "rpg_max_rate": "rp_max_rate",
    "rpg_hai_rate": "rp_hai_rate",
    "rpg_min_dec_fac": "rp_min_dec_fac",
    "rpg_min_rate": "rp_min_rate",
    "rate_to_set_on_first_cnp": "rp_rate_to_set_on_first_cnp",
    "dce_tcp_g": "rp_dce_tcp_g",
    "dce_tcp_rtt": "rp_dce_tcp_rtt",
    "rate_reduce_monitor_period": "rp_rate_reduce_monitor_period",
    "initial_alpha_value": "rp_initial_alpha_value",
    "rpg_gd": "rp_gd",
    "min_time_between_cnps": "np_min_time_between_cnps",
    "cnp_dscp": "np_cnp_dscp",
    "cnp_802p_prio": "np_cnp_prio",
}
# Knobs outside tuner.settings.KNOBS, with the ConnectX-4 Lx factory values (INDEX.md section 2).
EXTRA_DEFAULTS = {"cnp_dscp": 48, "cnp_802p_prio": 6}
DEBUGFS_ONLY = {"np_cnp_prio_mode": 1, "rtt_resp_dscp_valid": 0, "rtt_resp_dscp": 0}

# hw_counters present on a CC-capable ConnectX (mlx5-ib-hw_counters-names-from-source.txt).
HW_COUNTERS = (
    "rx_write_requests", "rx_read_requests", "rx_atomic_requests", "rx_dct_connect",
    "out_of_buffer", "out_of_sequence", "duplicate_request", "rnr_nak_retry_err",
    "packet_seq_err", "implied_nak_seq_err", "local_ack_timeout_err", "rp_cnp_ignored",
    "rp_cnp_handled", "np_ecn_marked_roce_packets", "np_cnp_sent", "resp_local_length_error",
    "resp_cqe_error", "req_cqe_error", "req_remote_invalid_request", "req_remote_access_errors",
    "resp_remote_access_errors", "resp_cqe_flush_error", "req_cqe_flush_error",
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
    "roce_slow_restart_trans", "rx_icrc_encapsulated",
)


def rail_views(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The host state once per rail (NIC port): ``netdev``, ``rdma_device``, ``pci``,
    ``data_address`` and ``rocesim_nic`` of that rail; a one-NIC host is its own only rail."""
    return [{**state, **r} for r in state.get("rails") or [{}]]


def rail_of(state: dict[str, Any], *, device: str | None = None, netdev: str | None = None,
            address: str | None = None) -> dict[str, Any] | None:
    """The rail view with that RDMA device, netdev or data address (None: no such rail)."""
    for v in rail_views(state):
        if (device is not None and v["rdma_device"] == device) or (
                netdev is not None and v["netdev"] == netdev) or (
                address is not None and address in (v.get("data_address"), v["address"])):
            return v
    return None


def knob_relpaths(state: dict[str, Any]) -> dict[str, str]:
    """``{sysfs knob name: path relative to the target dir}`` for this host's layout."""
    netdev, pci = state["netdev"], state["pci"]
    if state["nic_layout"] == "sysfs":
        base = f"sys/class/net/{netdev}/ecn"
        paths = {k: f"{base}/roce_rp/{k}" for k in RP_KNOBS}
        paths.update({k: f"{base}/roce_np/{k}" for k in NP_KNOBS})
        return paths
    base = f"sys/kernel/debug/mlx5/{pci}/cc_params"
    return {k: f"{base}/{DEBUGFS_NAME[k]}" for k in (*RP_KNOBS, *NP_KNOBS)}


def enable_relpaths(state: dict[str, Any]) -> dict[str, str]:
    """Per-priority CC enable files (OFED sysfs only; debugfs has none)."""
    if state["nic_layout"] != "sysfs":
        return {}
    base = f"sys/class/net/{state['netdev']}/ecn"
    return {f"{side}/enable/{p}": f"{base}/{side}/enable/{p}"
            for side in ("roce_rp", "roce_np") for p in range(8)}


def hw_counter_dir(state: dict[str, Any]) -> str:
    return f"sys/class/infiniband/{state['rdma_device']}/ports/1/hw_counters"


def init_host(tdir: Path, state: dict[str, Any], defaults: dict[str, int]) -> None:
    """Create the fake /sys tree with factory values (files hold ``"%d\\n"`` like the driver),
    one NIC port per rail."""
    values = {**EXTRA_DEFAULTS, **defaults}
    for view in rail_views(state):
        for knob, rel in knob_relpaths(view).items():
            _put(tdir / rel, values[knob])
        for rel in enable_relpaths(view).values():
            _put(tdir / rel, 1)
        if view["nic_layout"] == "debugfs":
            base = tdir / f"sys/kernel/debug/mlx5/{view['pci']}/cc_params"
            for name, value in DEBUGFS_ONLY.items():
                _put(base / name, value)
        net = tdir / f"sys/class/net/{view['netdev']}"
        _put(net / "mtu", view["mtu"])
        (net / "operstate").write_text("up\n")
        hw = tdir / hw_counter_dir(view)
        for name in HW_COUNTERS:
            _put(hw / name, 0)
        _put(hw.parent / "lifespan", 10)
        ib = tdir / f"sys/class/infiniband/{view['rdma_device']}"
        (ib / "tc/1").mkdir(parents=True, exist_ok=True)
        (ib / "tc/1/traffic_class").write_text("Global tclass=106\n")
        # <dev>/device is the PCI function (its name the PCI address), whose net/ folder holds
        # the device's netdevs, as the kernel links them
        fn = tdir / f"sys/bus/pci/devices/{view['pci']}"
        (fn / "net" / view["netdev"]).mkdir(parents=True, exist_ok=True)
        link = ib / "device"
        if not link.is_symlink():
            link.symlink_to(f"../../../bus/pci/devices/{view['pci']}")
    from tuner.emulated import hostdiag

    hostdiag.init(tdir, state)


def boot(tdir: Path, state: dict[str, Any]) -> list[str]:
    """A host boots: the DCQCN files hold the firmware's values (runtime writes are gone),
    then each enabled unit's ``ExecStart=`` lines run in order, as systemd runs them (argv
    split like a shell word list, no shell of our own). Returns the units that ran."""
    import shlex
    import subprocess

    values = {**EXTRA_DEFAULTS, **state["factory_dcqcn"]}
    for view in rail_views(state):
        for knob, rel in knob_relpaths(view).items():
            _put(tdir / rel, values[knob])
    ran = []
    wants = tdir / "etc/systemd/system/multi-user.target.wants"
    for link in sorted(wants.glob("*.service")) if wants.is_dir() else []:
        unit = tdir / "etc/systemd/system" / link.name
        if not unit.is_file():
            continue
        for line in unit.read_text().splitlines():
            if line.startswith("ExecStart="):
                subprocess.run(shlex.split(line.removeprefix("ExecStart=")), timeout=30,
                               check=False, stdin=subprocess.DEVNULL)
        ran.append(link.name)
    return ran


def _put(path: Path, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{value}\n")


def parse_knob_text(text: str) -> int | None:
    """Value of a knob file the way the kernel would parse it (decimal or 0x-hex)."""
    try:
        return int(text.strip().split()[0], 0)
    except (ValueError, IndexError):
        return None


def read_knobs(tdir: Path, state: dict[str, Any]) -> dict[str, int | None]:
    """The DCQCN values currently in this host's fake /sys tree (``None`` = unparsable)."""
    out: dict[str, int | None] = {}
    for knob, rel in knob_relpaths(state).items():
        try:
            out[knob] = parse_knob_text((tdir / rel).read_text())
        except FileNotFoundError:
            out[knob] = None
    return out


def add_hw_counters(tdir: Path, state: dict[str, Any], deltas: dict[str, int]) -> None:
    hw = tdir / hw_counter_dir(state)
    for name, delta in deltas.items():
        path = hw / name
        try:
            old = int(path.read_text().strip() or 0)
        except (FileNotFoundError, ValueError):
            old = 0
        tmp = path.with_name(f".{name}.tmp")
        tmp.write_text(f"{old + int(delta)}\n")
        tmp.replace(path)


def pfc_priorities(state: dict[str, Any]) -> list[int]:
    return [p for p, on in enumerate(state["qos"]["pfc"]) if on]


def ethtool_stats(state: dict[str, Any], c: dict[str, int]) -> list[tuple[str, int]]:
    """``ethtool -S`` rows in en_stats.c group order; per-prio pause rows only for PFC prios."""
    rows = [(n, c.get(n, 0)) for n in (
        "rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "tx_tso_packets", "tx_tso_bytes",
        "rx_csum_unnecessary", "rx_csum_none", "rx_csum_complete", "tx_csum_none",
        "tx_csum_partial", "tx_queue_stopped", "tx_queue_dropped", "rx_out_of_buffer",
        "rx_packets_phy", "rx_bytes_phy", "tx_packets_phy", "tx_bytes_phy", "rx_crc_errors_phy",
        "rx_symbol_err_phy", "rx_discards_phy", "tx_discards_phy", "rx_mac_control_phy",
        "tx_mac_control_phy", "rx_pause_ctrl_phy", "tx_pause_ctrl_phy",
        "rx_buffer_passed_thres_phy")]
    for p in range(8):
        rows += [(f"rx_prio{p}_bytes", c.get(f"rx_prio{p}_bytes", 0)),
                 (f"rx_prio{p}_packets", c.get(f"rx_prio{p}_packets", 0)),
                 (f"rx_prio{p}_discards", c.get(f"rx_prio{p}_discards", 0)),
                 (f"tx_prio{p}_bytes", c.get(f"tx_prio{p}_bytes", 0)),
                 (f"tx_prio{p}_packets", c.get(f"tx_prio{p}_packets", 0))]
    for p in pfc_priorities(state):
        for n in (f"rx_prio{p}_pause", f"rx_prio{p}_pause_duration", f"tx_prio{p}_pause",
                  f"tx_prio{p}_pause_duration", f"rx_prio{p}_pause_transition"):
            rows.append((n, c.get(n, 0)))
    rows += [("tx_pause_storm_warning_events", c.get("tx_pause_storm_warning_events", 0)),
             ("tx_pause_storm_error_events", c.get("tx_pause_storm_error_events", 0))]
    return rows


def fault_counter_deltas(state: dict[str, Any], events: dict[str, int]) -> dict[str, int]:
    """Counter increments for ``events`` of the rate faults (PFC storm, drops, CRC errors)."""
    prio = int(state.get("roce_priority", 3))
    d: dict[str, int] = {}
    storm = events.get("pfc_storm", 0)
    if storm:
        d.update({f"rx_prio{prio}_pause": storm, f"rx_prio{prio}_pause_duration": storm * 50,
                  f"tx_prio{prio}_pause": storm, f"tx_prio{prio}_pause_duration": storm * 50,
                  "rx_pause_ctrl_phy": storm, "tx_pause_ctrl_phy": storm,
                  "tx_pause_storm_warning_events": 1})
    drops = events.get("lossless_drops", 0)
    if drops:
        d.update({f"rx_prio{prio}_discards": drops, "rx_discards_phy": drops,
                  "rx_out_of_buffer": drops})
    crc = events.get("crc_errors", 0)
    if crc:
        d["rx_crc_errors_phy"] = crc
    if events.get("link_flaps", 0):
        d["flaps"] = events["link_flaps"]  # not an ethtool row: hostdiag.sync_carrier
    return d
