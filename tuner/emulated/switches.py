"""Emulated switches: SONiC (CONFIG_DB-like JSON) and Cumulus NVUE (pending/applied config).

Counters live in ``counters.json`` as ``{port: {name: int}}`` with platform-neutral names
(``pfc_rx_3``, ``q3_ecn_marked_pkts``...); the ``show``/``nv`` stand-ins render them in each
platform's real format. Standard library only.
"""

from __future__ import annotations

from typing import Any

# Field order of the AZURE_LOSSLESS profile in sonic-utilities' mock CONFIG_DB (ecnconfig -l
# prints the hash order; shared/reference/sonic/ecnconfig-l-show-ecn-single-profile.txt).
WRED_FIELD_ORDER = (
    "red_max_threshold", "wred_green_enable", "ecn", "green_min_threshold", "red_min_threshold",
    "wred_yellow_enable", "yellow_min_threshold", "green_max_threshold",
    "green_drop_probability", "yellow_max_threshold", "wred_red_enable",
    "yellow_drop_probability", "red_drop_probability",
)

QUEUE_COUNTERS = ("pkts", "bytes", "drop_pkts", "drop_bytes", "wred_drop_pkts",
                  "wred_drop_bytes", "ecn_marked_pkts", "ecn_marked_bytes")


def sonic_ports(n_hosts: int, n_uplinks: int) -> tuple[list[str], list[str]]:
    """Host-facing ``Ethernet0, Ethernet4...`` then uplinks (4 lanes per port, like SONiC)."""
    host = [f"Ethernet{4 * i}" for i in range(n_hosts)]
    up = [f"Ethernet{4 * (n_hosts + i)}" for i in range(n_uplinks)]
    return host, up


def nvue_ports(n_hosts: int, n_uplinks: int) -> tuple[list[str], list[str]]:
    host = [f"swp{i + 1}" for i in range(n_hosts)]
    up = [f"swp{n_hosts + i + 1}" for i in range(n_uplinks)]
    return host, up


def init_sonic(kmin: int, kmax: int, pmax: int, ports: list[str], queue: int) -> dict[str, Any]:
    values = {
        "red_max_threshold": kmax, "wred_green_enable": "true", "ecn": "ecn_all",
        "green_min_threshold": kmin, "red_min_threshold": kmin, "wred_yellow_enable": "true",
        "yellow_min_threshold": kmin, "green_max_threshold": kmax,
        "green_drop_probability": pmax, "yellow_max_threshold": kmax, "wred_red_enable": "true",
        "yellow_drop_probability": pmax, "red_drop_probability": pmax,
    }
    return {
        "WRED_PROFILE": {"AZURE_LOSSLESS": {f: str(values[f]) for f in WRED_FIELD_ORDER}},
        "QUEUE": {f"{p}|{queue}": {"scheduler": "[SCHEDULER|scheduler.1]",
                                   "wred_profile": "AZURE_LOSSLESS"} for p in ports},
        "PORT_QOS_MAP": {p: {"pfc_enable": str(queue), "scheduler": "port_scheduler"}
                         for p in ports},
        "PFC_WD": {p: {"action": "drop", "detection_time": "200", "restoration_time": "200"}
                   for p in ports},
        "DEVICE_NEIGHBOR": {p: {"name": f"peer-{p}", "port": "eth0"} for p in ports},
    }


def init_nvue(kmin: int, kmax: int, pmax: int, tc: int) -> dict[str, Any]:
    """default-global congestion-control: TC0 factory profile plus the RoCE TC configured."""
    tcs = {
        "0": {"ecn": "enable", "red": "disable", "min-threshold": 150000,
              "max-threshold": 1500000, "probability": 100},
        str(tc): {"ecn": "enable", "red": "disable", "min-threshold": kmin,
                  "max-threshold": kmax, "probability": pmax},
    }
    return {"applied": tcs, "pending": {k: dict(v) for k, v in tcs.items()},
            "startup": {k: dict(v) for k, v in tcs.items()}}  # /etc/nvue.d/startup.yaml


def sonic_ecn(state: dict[str, Any]) -> dict[str, Any]:
    """Green thresholds of the lossless profile, and whether the lossless queue is bound."""
    db = state["config_db"]
    prof = db["WRED_PROFILE"].get(state["wred_profile"], {})
    port0 = state["host_ports"][0]
    bound = db["QUEUE"].get(f"{port0}|{state['lossless_queue']}", {}).get("wred_profile")
    ecn_mode = prof.get("ecn", "ecn_none")
    return {
        "kmin_bytes": int(prof.get("green_min_threshold", 0)),
        "kmax_bytes": int(prof.get("green_max_threshold", 0)),
        "pmax_percent": int(prof.get("green_drop_probability", 100)),
        "enabled": bound == state["wred_profile"] and ecn_mode in (
            "ecn_all", "ecn_green", "ecn_green_yellow", "ecn_green_red"),
    }


def nvue_ecn(state: dict[str, Any]) -> dict[str, Any]:
    tc = state["applied"].get(str(state["lossless_queue"]))
    if not tc:
        return {"kmin_bytes": 0, "kmax_bytes": 0, "pmax_percent": 0, "enabled": False}
    return {"kmin_bytes": int(tc["min-threshold"]), "kmax_bytes": int(tc["max-threshold"]),
            "pmax_percent": int(tc["probability"]), "enabled": tc["ecn"] == "enable"}


def applied_ecn(state: dict[str, Any]) -> dict[str, Any]:
    return sonic_ecn(state) if state["platform"] == "sonic" else nvue_ecn(state)


def fault_counter_deltas(state: dict[str, Any], faults: dict[str, Any]
                         ) -> dict[str, dict[str, int]]:
    """Per host-facing port: PFC storm frames, lossless-queue drops."""
    q = int(state["lossless_queue"])
    storm = int(faults.get("pfc_storm", 0) or 0)
    drops = int(faults.get("lossless_drops", 0) or 0)
    out: dict[str, dict[str, int]] = {}
    for port in state["host_ports"]:
        d: dict[str, int] = {}
        if storm:
            d.update({f"pfc_rx_{q}": storm, f"pfc_rx_dur_{q}": storm * 50,
                      "pfcwd_storm_detected": 1, f"q{q}_pfcwd_tx_drop": storm})
        if drops:
            d.update({f"q{q}_drop_pkts": drops, f"q{q}_drop_bytes": drops * 1024,
                      f"q{q}_wred_drop_pkts": drops, f"q{q}_wred_drop_bytes": drops * 1024})
        if d:
            out[port] = d
    return out
