"""Emulated switches: SONiC (CONFIG_DB-like JSON) and Cumulus NVUE (pending/applied config).

Counters live in ``counters.json`` as ``{port: {name: int}}`` with platform-neutral names
(``pfc_rx_3``, ``q3_ecn_marked_pkts``...); the ``show``/``nv`` stand-ins render them in each
platform's real format. Standard library only.
"""

from __future__ import annotations

import json
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


def _twin(topology: dict[str, Any]) -> Any:
    import rocesim

    kwargs = {k: topology[k] for k in ("kind", "leaves", "spines", "hosts_per_leaf",
                                       "nics_per_host", "nic_gbps") if k in topology}
    return rocesim.Fabric(rocesim.Topology(**kwargs))


def twin_xoff(topology: dict[str, Any], leaf: str) -> int:
    """One ingress port's XOFF point on the rocesim leaf behind an emulated NVUE switch: what
    ``nv show qos pfc`` reports as its ``xoff-threshold``."""
    return int(_twin(topology).xoff_bytes(leaf))


def twin_pool(topology: dict[str, Any], leaf: str) -> tuple[int, int]:
    """(shared buffer bytes, dynamic_th) of the rocesim leaf: the inventory's
    ``pfc_pool_bytes``/``pfc_dynamic_th`` of an emulated NVUE switch, whose NVUE output
    carries no buffer pool."""
    fab = _twin(topology)
    return int(fab.buffer_bytes(leaf)), int(fab.topo.pfc_alpha_log2)


def sonic_ports(n_hosts: int, n_uplinks: int) -> tuple[list[str], list[str]]:
    """Host-facing ``Ethernet0, Ethernet4...`` then uplinks (4 lanes per port, like SONiC)."""
    host = [f"Ethernet{4 * i}" for i in range(n_hosts)]
    up = [f"Ethernet{4 * (n_hosts + i)}" for i in range(n_uplinks)]
    return host, up


def nvue_ports(n_hosts: int, n_uplinks: int) -> tuple[list[str], list[str]]:
    host = [f"swp{i + 1}" for i in range(n_hosts)]
    up = [f"swp{n_hosts + i + 1}" for i in range(n_uplinks)]
    return host, up


# sonic-buildimage files/build_templates/qos_config.j2 @0791705b1c8d (the default branch of
# every ``generate_*`` macro): DSCP 3 -> TC 3, 4 -> 4, 5 -> 2, 8 -> 0, 46 -> 5, 48 -> 6, every
# other DSCP (RoCE's 26 included) -> TC 1, which is lossy; TC n -> queue n.
STOCK_DSCP_TO_TC = {"3": "3", "4": "4", "5": "2", "8": "0", "46": "5", "48": "6"}
# SCHEDULER: scheduler.0 DWRR 14 on queues 0, 1, 2, 5, 6 (the CNP queue is not strict),
# scheduler.1 DWRR 15 on the lossless queues 3 and 4 (which also carry AZURE_LOSSLESS).
STOCK_SCHEDULER = {"scheduler.0": {"type": "DWRR", "weight": "14"},
                   "scheduler.1": {"type": "DWRR", "weight": "15"}}


CNP_QUEUE = 6  # DSCP 48 -> TC 6 -> queue 6 in the stock maps


def stock_qos_maps(ports: list[str], queue: int = 3) -> dict[str, Any]:
    """The QoS tables ``qos_config.j2`` writes for the active ports (lossless TCs 3 and 4)."""
    lossless = {str(queue), "4"}
    queues = {f"{p}|{q}": ({"scheduler": "scheduler.1", "wred_profile": "AZURE_LOSSLESS"}
                           if str(q) in lossless else {"scheduler": "scheduler.0"})
              for p in ports for q in (0, 1, 2, 3, 4, 5, 6)}
    pfc = ",".join(sorted(lossless))
    return {
        "QUEUE": queues,
        "PORT_QOS_MAP": {"global": {"dscp_to_tc_map": "AZURE"},
                         **{p: {"dscp_to_tc_map": "AZURE", "tc_to_queue_map": "AZURE",
                                "tc_to_pg_map": "AZURE", "pfc_to_queue_map": "AZURE",
                                "pfc_to_pg_map": "AZURE", "pfc_enable": pfc,
                                "pfcwd_sw_enable": pfc} for p in ports}},
        "DSCP_TO_TC_MAP": {"AZURE": {str(d): STOCK_DSCP_TO_TC.get(str(d), "1")
                                     for d in range(64)}},
        "TC_TO_QUEUE_MAP": {"AZURE": {str(t): str(t) for t in range(8)}},
        "SCHEDULER": json.loads(json.dumps(STOCK_SCHEDULER)),
    }


def operator_qos_fix(db: dict[str, Any], roce_dscp: int = 26, tc: int = 3) -> None:
    """What an operator does to a stock switch before RoCE runs on it: put the RoCE DSCP into
    the lossless TC, ``sonic-db-cli CONFIG_DB HSET 'DSCP_TO_TC_MAP|AZURE' 26 3`` (then
    ``config save -y``). The CNP queue stays on stock DWRR (pre-flight warns about it)."""
    db["DSCP_TO_TC_MAP"]["AZURE"][str(roce_dscp)] = str(tc)


# Releases the emulated SONiC switch can play. WRED/ECN queue statistics (`show queue
# wredcounters`, `counterpoll wredqueue`, FLEX_COUNTER_TABLE|WRED_ECN_QUEUE and STATE_DB
# QUEUE_COUNTER_CAPABILITIES; SONiC doc/qos/ECN_and_WRED_statistics_HLD.md) exist from 202505.
SONIC_RELEASES = ("202311", "202405", "202411", "202505", "202511")
WRED_ECN_SINCE = "202505"
FLAP_VIEW_SINCE = "202505"  # `show interfaces flap`: sonic-utilities PR 3724, 202505 notes
ECN_CAPABILITIES = ("ECN_MARKED_PKT", "ECN_MARKED_BYTE", "WRED_DROPPED_PKT", "WRED_DROPPED_BYTE")


def has_wred_ecn(release: str) -> bool:
    return release >= WRED_ECN_SINCE


def init_sonic_state_db(release: str) -> dict[str, Any]:
    """STATE_DB as orchagent fills it at start: the queue counter capabilities (202505+)."""
    if not has_wred_ecn(release):
        return {}
    return {"QUEUE_COUNTER_CAPABILITIES": {f"WRED_ECN_QUEUE_{c}_COUNTER": {"isSupported": "true"}
                                           for c in ECN_CAPABILITIES}}


# Stock Mellanox SN2700 (ACS-MSN2700, traditional buffer model, T0) buffer configuration:
# pools from sonic-buildimage device/mellanox/x86_64-mlnx_msn2700-r0/ACS-MSN2700/
# buffers_defaults_t0.j2, profiles from its buffers_defaults_objects.j2; the lossless PG profile
# is what buildimage's pg_profile_lookup.ini gives buffermgrd for 100G/5m (size 50176, xon
# 19456, xoff 30720, threshold 0 -> dynamic_th 0).
SN2700_POOL_BYTES = 4580864
SN2700_PG_PROFILE = "pg_lossless_100000_5m_profile"


SN2700_PG_DYNAMIC_TH = 0  # the lossless PG profile's dynamic_th (alpha 1)


def stock_buffers(ports: list[str], pool_bytes: int = SN2700_POOL_BYTES) -> dict[str, Any]:
    """BUFFER_POOL / BUFFER_PROFILE / BUFFER_PG of a stock SN2700 (PGs 3-4 lossless);
    ``pool_bytes``: the lossless pool of a switch with another buffer."""
    lossless, lossy = "ingress_lossless_pool", "egress_lossy_pool"
    return {
        "BUFFER_POOL": {
            lossless: {"mode": "dynamic", "size": str(pool_bytes), "type": "ingress"},
            "ingress_lossy_pool": {"mode": "dynamic", "size": "4580864", "type": "ingress"},
            "egress_lossless_pool": {"mode": "dynamic", "size": "13945824", "type": "egress"},
            lossy: {"mode": "dynamic", "size": "4580864", "type": "egress"}},
        "BUFFER_PROFILE": {
            "ingress_lossless_profile": {"dynamic_th": "7", "pool": lossless, "size": "0"},
            "ingress_lossy_profile": {"dynamic_th": "3", "pool": "ingress_lossy_pool",
                                      "size": "0"},
            "egress_lossless_profile": {"dynamic_th": "7", "pool": "egress_lossless_pool",
                                        "size": "0"},
            "egress_lossy_profile": {"dynamic_th": "7", "pool": lossy, "size": "9216"},
            "q_lossy_profile": {"dynamic_th": "3", "pool": lossy, "size": "0"},
            SN2700_PG_PROFILE: {"dynamic_th": str(SN2700_PG_DYNAMIC_TH), "pool": lossless,
                                "size": "50176",
                                "xoff": "30720", "xon": "19456"}},
        "BUFFER_PG": {**{f"{p}|3-4": {"profile": SN2700_PG_PROFILE} for p in ports},
                      **{f"{p}|0": {"profile": "ingress_lossy_profile"} for p in ports}},
    }


# DEVICE_METADATA|localhost of the emulated switch: a stock SN2700, whose HWSKU directory holds
# the qos.json.j2 that `config qos reload` renders
SONIC_PLATFORM = "x86_64-mlnx_msn2700-r0"
SONIC_HWSKU = "ACS-MSN2700"


def qos_template_render(kmin: int, kmax: int, pmax: int, ports: list[str], queue: int
                        ) -> dict[str, Any]:
    """What the HWSKU's qos.json.j2 (qos_config.j2) renders: AZURE_LOSSLESS and the stock maps,
    never the operator's DSCP fix or ecntune's canary profile (``sonic-cfggen -d -t``)."""
    values = {
        "red_max_threshold": kmax, "wred_green_enable": "true", "ecn": "ecn_all",
        "green_min_threshold": kmin, "red_min_threshold": kmin, "wred_yellow_enable": "true",
        "yellow_min_threshold": kmin, "green_max_threshold": kmax,
        "green_drop_probability": pmax, "yellow_max_threshold": kmax, "wred_red_enable": "true",
        "yellow_drop_probability": pmax, "red_drop_probability": pmax,
    }
    return {"WRED_PROFILE": {"AZURE_LOSSLESS": {f: str(values[f]) for f in WRED_FIELD_ORDER}},
            **stock_qos_maps(ports, queue)}


def port_table(speeds: dict[str, int]) -> dict[str, dict[str, str]]:
    """CONFIG_DB ``PORT`` as a stock port_config.ini renders it (4 lanes per ``Ethernet<4i>``;
    ``speed`` in Mb/s, sonic-port YANG)."""
    out = {}
    for p, mbps in speeds.items():
        first = int(p.removeprefix("Ethernet"))
        lanes = ",".join(str(first + k) for k in range(4))
        out[p] = {"admin_status": "up", "alias": f"etp{first // 4 + 1}",
                  "index": str(first // 4 + 1), "lanes": lanes, "mtu": "9100",
                  "speed": str(int(mbps))}
    return out


def init_sonic(kmin: int, kmax: int, pmax: int, ports: list[str], queue: int,
               release: str = WRED_ECN_SINCE, pool_bytes: int = SN2700_POOL_BYTES,
               speeds: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "DEVICE_METADATA": {"localhost": {"platform": SONIC_PLATFORM, "hwsku": SONIC_HWSKU,
                                          "type": "LeafRouter"}},
        "PORT": port_table(speeds or dict.fromkeys(ports, 100000)),
        **qos_template_render(kmin, kmax, pmax, ports, queue),
        "PFC_WD": {p: {"action": "drop", "detection_time": "200", "restoration_time": "200"}
                   for p in ports},
        "DEVICE_NEIGHBOR": {p: {"name": f"peer-{p}", "port": "eth0"} for p in ports},
        **stock_buffers(ports, pool_bytes),  # mmuconfig -l, BUFFER_PG
        # counterpoll: SONiC's defaults but queue stats every 1 s (`counterpoll queue interval
        # 1000`, keeps emulated trials short); the WRED/ECN queue group is off until enabled
        "FLEX_COUNTER_TABLE": {
            "QUEUE": {"FLEX_COUNTER_STATUS": "enable", "POLL_INTERVAL": "1000"},
            "PORT": {"FLEX_COUNTER_STATUS": "enable", "POLL_INTERVAL": "1000"},
            "PFCWD": {"FLEX_COUNTER_STATUS": "enable"},
            **({"WRED_ECN_QUEUE": {"FLEX_COUNTER_STATUS": "disable", "POLL_INTERVAL": "10000"}}
               if has_wred_ecn(release) else {})},
    }


NV_DEFAULTS = {"ecn": "enable", "red": "disable", "min-threshold": 150000,
               "max-threshold": 1500000, "probability": 100}  # CL 5.12 QoS docs
# What a Spectrum-2/3 ASIC runs: thresholds rounded up to whole 64-cell multiples of its 144-byte
# cell (the CWTP register; NVIDIA's sample shows 150000 B running as "153.00 KB" = 156672 B).
SPECTRUM_STEP = 64 * 144


def spectrum_runs(n: int) -> int:
    return -(-int(n) // SPECTRUM_STEP) * SPECTRUM_STEP


def init_nvue(kmin: int, kmax: int, pmax: int, tc: int, xoff: int = 1_000_000) -> dict[str, Any]:
    """Applied/pending NVUE config trees (``nv config show`` shape): default-global
    congestion-control with the factory TC0 and the RoCE TC configured, PFC on the RoCE TC."""
    tcs = {"0": dict(NV_DEFAULTS),
           str(tc): {"ecn": "enable", "red": "disable", "min-threshold": kmin,
                     "max-threshold": kmax, "probability": pmax}}
    config = {"qos": {"congestion-control": {"default-global": {"traffic-class": tcs}},
                      "pfc": {"default-global": {"switch-priority": {str(tc): {}},
                                                 "xoff-threshold": xoff, "xon-threshold": 2000,
                                                 "port-buffer": xoff + 15000,
                                                 "cable-length": 50}}},
              "interface": {}}
    return {"applied": config, "pending": json.loads(json.dumps(config)),
            "startup": json.loads(json.dumps(config))}  # /etc/nvue.d/startup.yaml


def sonic_ecn(state: dict[str, Any]) -> dict[str, Any]:
    """Green thresholds of the profile bound to the first host port's lossless queue."""
    db = state["config_db"]
    port0 = state["host_ports"][0]
    bound = db["QUEUE"].get(f"{port0}|{state['lossless_queue']}", {}).get("wred_profile")
    prof = db["WRED_PROFILE"].get(bound or "", {})
    ecn_mode = prof.get("ecn", "ecn_none")
    return {
        "kmin_bytes": int(prof.get("green_min_threshold", 0)),
        "kmax_bytes": int(prof.get("green_max_threshold", 0)),
        "pmax_percent": int(prof.get("green_drop_probability", 100)),
        "enabled": bool(prof) and ecn_mode in (
            "ecn_all", "ecn_green", "ecn_green_yellow", "ecn_green_red"),
    }


# The stock `nv set qos roce` maps (reference/cumulus-nvue/nvue-roce-show-qos-roce-and-counters-
# cl512-doc.txt, `nv show qos roce`): DSCP 8p..8p+7 -> switch-priority p; switch-priority 3 -> TC 3
# (lossless, PFC on switch-priority 3), 6 -> TC 6 (CNPs), every other -> TC 0.
ROCE_SP_TC = {0: 0, 1: 0, 2: 0, 3: 3, 4: 0, 5: 0, 6: 6, 7: 0}


def nvue_dscp_sp(config: dict[str, Any]) -> dict[int, int]:
    """DSCP -> switch-priority: stock, then `nv set qos mapping default-global dscp <d>
    switch-priority <p>`."""
    own = config["qos"].get("mapping", {}).get("default-global", {}).get("dscp", {})
    return {d: int(own.get(str(d), {}).get("switch-priority", d // 8)) for d in range(64)}


def nvue_sp_tc(config: dict[str, Any]) -> dict[int, int]:
    """switch-priority -> traffic class: stock, then `nv set qos egress-queue-mapping
    default-global switch-priority <p> traffic-class <tc>`."""
    own = (config["qos"].get("egress-queue-mapping", {}).get("default-global", {})
           .get("switch-priority", {}))
    return {p: int(own.get(str(p), {}).get("traffic-class", tc)) for p, tc in ROCE_SP_TC.items()}


def nvue_port_profile(config: dict[str, Any], port: str) -> str:
    """The congestion-control profile a port uses: its own, else default-global."""
    qos = config.get("interface", {}).get(port, {}).get("qos", {})
    return str(qos.get("congestion-control", {}).get("profile", "default-global"))


def nvue_tc(config: dict[str, Any], profile: str, tc: int | str) -> dict[str, Any] | None:
    prof = config["qos"]["congestion-control"].get(profile)
    row = (prof or {}).get("traffic-class", {}).get(str(tc))
    return None if row is None else {**NV_DEFAULTS, **row}


def nvue_ecn(state: dict[str, Any]) -> dict[str, Any]:
    config = state["applied"]
    tc = nvue_tc(config, nvue_port_profile(config, state["host_ports"][0]),
                 state["lossless_queue"])
    if not tc:
        return {"kmin_bytes": 0, "kmax_bytes": 0, "pmax_percent": 0, "enabled": False}
    return {"kmin_bytes": int(tc["min-threshold"]), "kmax_bytes": int(tc["max-threshold"]),
            "pmax_percent": int(tc["probability"]), "enabled": tc["ecn"] == "enable"}


def applied_ecn(state: dict[str, Any]) -> dict[str, Any]:
    return sonic_ecn(state) if state["platform"] == "sonic" else nvue_ecn(state)


def fault_counter_deltas(state: dict[str, Any], events: dict[str, int]
                         ) -> dict[str, dict[str, int]]:
    """Per host-facing port, for ``events`` of the rate faults: PFC storm frames, drops; RX
    errors and flaps on the ports ``port_rx_errors`` and ``port_flaps`` name."""
    q = int(state["lossless_queue"])
    storm = events.get("pfc_storm", 0)
    drops = events.get("lossless_drops", 0)
    cnp = events.get("cnp_drops", 0)
    out: dict[str, dict[str, int]] = {}
    for port in state["host_ports"]:
        d: dict[str, int] = {}
        if storm:
            d.update({f"pfc_rx_{q}": storm, f"pfc_rx_dur_{q}": storm * 50,
                      "pfcwd_storm_detected": 1, f"q{q}_pfcwd_tx_drop": storm})
        if drops:
            d.update({f"q{q}_drop_pkts": drops, f"q{q}_drop_bytes": drops * 1024,
                      f"q{q}_wred_drop_pkts": drops, f"q{q}_wred_drop_bytes": drops * 1024})
        if cnp:  # CNPs are small frames: counted as 64 bytes each
            d.update({f"q{CNP_QUEUE}_drop_pkts": cnp, f"q{CNP_QUEUE}_drop_bytes": cnp * 64})
        if d:
            out[port] = d
    # the per-port faults count per port ("<fault>:<port>"): RX errors; flaps (SONiC's flap
    # count, and NVUE's carrier transitions, which a flap raises by two: down, then up)
    per_port = {"port_rx_errors": {"rx_err": 1}, "port_flaps": {"flaps": 1,
                                                                 "carrier_transitions": 2}}
    for key, n in events.items():
        fault, _, port = key.partition(":")
        if fault in per_port and port:
            row = out.setdefault(port, {})
            for counter, k in per_port[fault].items():
                row[counter] = row.get(counter, 0) + k * n
    return out
