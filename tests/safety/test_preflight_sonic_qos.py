"""SONiC QoS facts: where the RoCE DSCP lands, the CNP queue under load, ECN counters by release.

The stock tables are sonic-buildimage's ``files/build_templates/qos_config.j2`` (@0791705b1c8d,
the default branch of each ``generate_*`` macro), as ``tuner.emulated.switches`` keeps them.
"""

from __future__ import annotations

import copy
from typing import Any

from safety.preflight import (
    PreflightFacts,
    PreflightSpec,
    SwitchFacts,
    check_cnp_starvation,
    failures,
    run_checks,
)
from tuner.drivers.sonic import SonicDriver, ecn_counter_state, qos_path
from tuner.emulated.switches import operator_qos_fix, stock_qos_maps
from tuner.inventory import SwitchEntry
from tuner.preflight_facts import switch_facts

PORTS = ["Ethernet0", "Ethernet4"]
SW = SwitchEntry(name="leaf0", address="10.0.0.2", platform="sonic", canary_ports=PORTS)


def _facts(db: dict[str, Any], ecn: tuple[str, str] = ("on", "")) -> SwitchFacts:
    found = {"queue_table": db.get("QUEUE", {}), "config_db": db,
             "counterpoll": {"WRED_ECN_QUEUE_STAT": (10.0, ecn[0] == "on")},
             "ecn_counters": ecn}
    return switch_facts(SW, None, SonicDriver(None, SW), found)  # type: ignore[arg-type]


def _checks(sw: SwitchFacts, check: str) -> dict[str, tuple[str, str]]:
    res = run_checks(PreflightFacts(backend="ssh", roce_priority=3, switches=[sw]),
                     PreflightSpec())
    return {r.target: (r.status, r.evidence) for r in res if r.check == check}


def test_stock_azure_maps_send_roce_to_lossy_tc1_and_are_refused_until_fixed():
    db = stock_qos_maps(PORTS)
    got = _checks(_facts(db), "roce_queue")
    assert set(got) == {"leaf0/Ethernet0", "leaf0/Ethernet4"}
    status, evidence = got["leaf0/Ethernet0"]
    assert status == "fail"
    assert evidence.startswith("Ethernet0: DSCP 26 -> TC 1 (AZURE) -> queue 1 (AZURE); "
                               "tuned queue 3; pfc_enable 3,4 (TC 1 is lossy)")
    assert "HSET 'DSCP_TO_TC_MAP|AZURE' 26 3" in evidence
    operator_qos_fix(db)  # DSCP 26 -> TC 3
    fixed = _checks(_facts(db), "roce_queue")
    assert {t: s for t, (s, _) in fixed.items()} == {"leaf0/Ethernet0": "pass",
                                                      "leaf0/Ethernet4": "pass"}
    assert fixed["leaf0/Ethernet0"][1] == ("Ethernet0: DSCP 26 -> TC 3 (AZURE) -> queue 3 "
                                           "(AZURE); pfc_enable 3,4")


def test_right_queue_without_pfc_on_its_tc_is_refused():
    db = stock_qos_maps(PORTS)
    operator_qos_fix(db)
    db["PORT_QOS_MAP"]["Ethernet4"]["pfc_enable"] = "4"
    got = _checks(_facts(db), "roce_queue")
    assert got["leaf0/Ethernet0"][0] == "pass"
    assert got["leaf0/Ethernet4"][0] == "fail"
    assert "queue 3 (AZURE); pfc_enable 4 (TC 3 is lossy)" in got["leaf0/Ethernet4"][1]


def test_the_tc_to_queue_hop_is_followed_and_the_global_dscp_map_applies():
    db = stock_qos_maps(PORTS)
    operator_qos_fix(db)
    # TC 3 -> queue 1 on a custom map: the right TC, the wrong queue
    db["TC_TO_QUEUE_MAP"]["ROCE"] = {**db["TC_TO_QUEUE_MAP"]["AZURE"], "3": "1"}
    db["PORT_QOS_MAP"]["Ethernet4"]["tc_to_queue_map"] = "[TC_TO_QUEUE_MAP|ROCE]"  # old form
    # a port row without its own dscp_to_tc_map uses PORT_QOS_MAP|global's
    del db["PORT_QOS_MAP"]["Ethernet0"]["dscp_to_tc_map"]
    got = _checks(_facts(db), "roce_queue")
    assert got["leaf0/Ethernet0"][0] == "pass"
    assert got["leaf0/Ethernet4"][0] == "fail"
    assert "TC 3 (AZURE) -> queue 1 (ROCE); tuned queue 3" in got["leaf0/Ethernet4"][1]
    del db["PORT_QOS_MAP"]["global"]
    p = qos_path(db, "Ethernet0", 26)
    assert (p["dscp_map"], p["tc"], p["queue"]) == (None, None, None)
    assert "do not place it in any queue" in _checks(_facts(db), "roce_queue")[
        "leaf0/Ethernet0"][1]


def test_stock_cnp_queue_is_dwrr_a_warning_and_its_queue_is_known():
    sw = _facts(stock_qos_maps(PORTS))
    got = _checks(sw, "cnp_queue")
    assert {s for s, _ in got.values()} == {"warn"}
    assert got["leaf0/Ethernet0"][1].startswith("CNPs (DSCP 48) leave by a DWRR (DSCP 48 -> "
                                                "TC 6 -> queue 6) queue: not strict priority")
    assert sw.cnp_queue_index == {"Ethernet0": 6, "Ethernet4": 6}


def test_cnp_queue_drops_under_the_baseline_load_fail():
    sw = _facts(stock_qos_maps(PORTS))
    quiet = {"leaf0/Ethernet0": {"queue6_drop_pkts": 0, "queue3_drop_pkts": 9},
             "leaf0/Ethernet4": {"queue6_drop_pkts": 0}}
    res = check_cnp_starvation([sw], quiet, {"leaf0/Ethernet0": 2704})
    assert [r.status for r in res] == ["pass", "pass"]
    assert res[0].evidence == "CNP queue 6: 0 drops under the baseline load, watermark 2704 B"
    starved = copy.deepcopy(quiet)
    starved["leaf0/Ethernet4"]["queue6_drop_pkts"] = 12
    res = check_cnp_starvation([sw], starved)
    assert [(r.target, r.status) for r in failures(res)] == [("leaf0/Ethernet4", "fail")]
    assert "12 drops under the baseline load" in res[1].evidence
    # a drop counter the switch did not report is not read as zero
    assert [r.status for r in check_cnp_starvation([sw], {})] == ["warn", "warn"]


def test_ecn_counter_state_by_release_capability_and_flex_counter_row():
    on = {"WRED_ECN_QUEUE_STAT": (10.0, True)}
    assert ecn_counter_state("true", "present", on)[0] == "on"
    # 202505+: no FLEX_COUNTER_TABLE|WRED_ECN_QUEUE row at all means off, not on
    assert ecn_counter_state("true", "present", {}) == (
        "off", "WRED_ECN_QUEUE_STAT not polled (no FLEX_COUNTER row)")
    # 202411: no `show queue wredcounters`, no capability key
    state, why = ecn_counter_state("", "absent", {})
    assert state == "absent" and "before 202505" in why
    state, why = ecn_counter_state("false", "present", on)
    assert state == "absent" and "isSupported is false" in why


def test_absent_ecn_counters_are_reported_as_absent_not_as_off():
    db = stock_qos_maps(PORTS)
    operator_qos_fix(db)
    got = _facts(db, ecn_counter_state("", "absent", {}))
    assert got.counters_off == [] and got.ecn_counters_absent
    lines = _checks(got, "counters")
    assert lines["leaf0"][0] == "warn"
    assert lines["leaf0"][1].startswith("ECN counters absent (not zero): no `show queue "
                                        "wredcounters` on this switch (SONiC before 202505)")
    off = _facts(db, ecn_counter_state("true", "present", {}))
    assert off.counters_off == ["WRED_ECN_QUEUE_STAT"] and off.ecn_counters_absent is None
