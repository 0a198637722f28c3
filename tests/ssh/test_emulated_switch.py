"""Switch canary, PFC threshold, counters and NIC facts against the emulated cluster (real
sshd, stand-in switch CLIs that keep CONFIG_DB / NVUE config on disk)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from objectives.parsers import parse_nvue
from safety.limits import PfcThreshold, SafetyLimits, check_proposal
from safety.preflight import PreflightFacts, PreflightSpec, failures, run_checks
from tuner.cli import EXIT_FAILED, EXIT_INPUT, exit_code_for
from tuner.cluster.ssh import SshCluster
from tuner.drivers import switch_driver
from tuner.emulated.cluster import EmulatedCluster
from tuner.errors import TunerError
from tuner.inventory import parse_inventory
from tuner.preflight_facts import enable_counters, ssh_facts, switch_facts
from tuner.settings import Settings

pytestmark = pytest.mark.ssh
SPEC = PreflightSpec(error_sample_s=0, df_ping=False)


def _cluster(emu: EmulatedCluster, hosts: int = 1, **switch: Any) -> SshCluster:
    """The emulated inventory; only the first ``hosts`` hosts (switch tests need no more, and
    each host costs a pre-flight round of tool starts)."""
    data = yaml.safe_load(Path(emu.inventory_path).read_text())
    data["hosts"] = data["hosts"][:hosts]
    for sw in data["switches"]:
        sw.update(switch.get(sw["platform"], {}))
    return SshCluster(parse_inventory(data, str(emu.inventory_path)))


@pytest.fixture
def emu(emulated_cluster: EmulatedCluster) -> Iterator[EmulatedCluster]:
    yield emulated_cluster
    emulated_cluster.reset()


def _bad(c: SshCluster) -> list[tuple[str, str]]:
    return [(r.check, r.target) for r in failures(run_checks(ssh_facts(c, SPEC), SPEC))]


def test_a_trial_touches_only_the_canary_queues_and_restore_rebinds_the_original(
        emu: EmulatedCluster) -> None:
    with _cluster(emu) as c:
        base = c.snapshot()
        sonic_before = emu.state("leaf0")["config_db"]
        new = Settings.uniform(list(base.switches), list(base.nics),
                               {"kmin_bytes": 150000, "kmax_bytes": 1500000, "pmax_percent": 20})
        c.apply(new)
        assert c.read_back() == new
        db = emu.state("leaf0")["config_db"]
        canary = emu.state("leaf0")["host_ports"]
        bound = {k: v.get("wred_profile") for k, v in db["QUEUE"].items() if k.endswith("|3")}
        assert bound == {f"{p}|3": "ECNTUNE_CANARY" if p in canary else "AZURE_LOSSLESS"
                         for p in [*canary, *emu.state("leaf0")["uplink_ports"]]}
        # the shared profile is untouched; the clone kept its yellow/red fields
        assert db["WRED_PROFILE"]["AZURE_LOSSLESS"] == sonic_before["WRED_PROFILE"][
            "AZURE_LOSSLESS"]
        assert db["WRED_PROFILE"]["ECNTUNE_CANARY"]["yellow_max_threshold"] == "2097152"
        nv = emu.state("leaf1")["applied"]
        assert nv["qos"]["congestion-control"]["default-global"] == emu.state("leaf1")[
            "pending"]["qos"]["congestion-control"]["default-global"]
        hosts = emu.state("leaf1")["host_ports"]
        assert {p: b["qos"]["congestion-control"]["profile"]
                for p, b in nv["interface"].items()} == dict.fromkeys(hosts, "ECNTUNE_CANARY")
        c.apply(base)
        assert c.read_back() == base
    db = emu.state("leaf0")["config_db"]
    assert db["QUEUE"] == sonic_before["QUEUE"] and "ECNTUNE_CANARY" not in db["WRED_PROFILE"]
    assert "ECNTUNE_CANARY" not in emu.state("leaf1")["applied"]["qos"]["congestion-control"]


def test_nvue_read_back_of_150000_b_shown_as_153_00_kb_passes(emu: EmulatedCluster) -> None:
    """The port's operational view shows what Spectrum runs (whole 9216 B steps), like
    NVIDIA's sample: 150000 B as "153.00 KB". The read-back takes the exact value from the
    applied config and accepts the operational one within the step."""
    with _cluster(emu) as c:
        base = c.snapshot()
        new = base.model_copy(update={"switches": {**base.switches, "leaf1": base.switches[
            "leaf1"].model_copy(update={"kmin_bytes": 150000, "kmax_bytes": 1500000})}})
        c.apply(new)  # read-back sees "153.00 KB" / "1.43 MB" on the ports: no ApplyError
        shown = c.pool.conns["leaf1"].run("nv show interface swp1 qos roce status").stdout
        assert "153.00 KB" in shown and "1.43 MB" in shown
        assert c.read_back().switches["leaf1"].kmin_bytes == 150000  # exact, from the config
        c.apply(base)
        assert c.read_back() == base


def test_nvue_canary_profile_keeps_tc0_and_storage_ecn(emu: EmulatedCluster) -> None:
    """The canary ports leave default-global for the canary profile: ECN on TC 0 (factory) and
    on a storage class stays on for them; default-global itself is untouched."""
    pre = "nv set qos congestion-control default-global traffic-class 1"
    with _cluster(emu) as c:
        sw = c.pool.conns["leaf1"]
        sw.run(f"{pre} ecn enable && {pre} min-threshold 60000 && {pre} max-threshold 600000 "
               f"&& {pre} probability 40 && nv config apply -y")
        before = emu.state("leaf1")["applied"]["qos"]["congestion-control"]["default-global"]
        base = c.snapshot()
        new = base.model_copy(update={"switches": {**base.switches, "leaf1": base.switches[
            "leaf1"].model_copy(update={"kmin_bytes": 100000, "kmax_bytes": 400000})}})
        c.apply(new)
        cc = emu.state("leaf1")["applied"]["qos"]["congestion-control"]
        assert cc["default-global"] == before
        for tc in ("0", "1"):
            assert cc["ECNTUNE_CANARY"]["traffic-class"][tc] == {"red": "disable", **before[
                "traffic-class"][tc]}, tc
        shown = sw.run("nv show interface swp1 qos roce status").stdout
        assert parse_nvue(shown).values["congestion-control.enabled-tc"].value == "0,1,3"
        c.apply(base)
        assert c.read_back() == base


def _checks(c: SshCluster, name: str, confirm_s: int = 0) -> list[tuple[str, str, str]]:
    """One check on the NVUE switch's own facts (what ``ssh_facts`` collects for it; the hosts'
    facts are left out to keep this fast)."""
    sw = next(s for s in c.inventory.switches if s.platform == "nvue")
    found = c.switch_facts(refresh=True)[sw.name].value
    facts = PreflightFacts(backend="ssh", roce_priority=3, switches=[switch_facts(
        sw, None, switch_driver(c.pool.conns[sw.name], sw), found, SPEC.cnp_dscp,
        SPEC.roce_dscp, confirm_s)])
    return [(r.status, r.target, r.evidence) for r in run_checks(facts, SPEC) if r.check == name]


def test_preflight_follows_the_nvue_roce_maps_for_the_data_dscp(emu: EmulatedCluster) -> None:
    """The emulated switch starts from the stock `nv set qos roce` maps (DSCP 26 -> switch-
    priority 3 -> TC 3, PFC on 3): accepted. Remapped to switch-priority 2 (RoCE doc example)
    the data lands in TC 0: refused, and accepted again once mapped back."""
    with _cluster(emu) as c:
        sw = c.pool.conns["leaf1"]
        assert _checks(c, "roce_queue") == [("pass", "leaf1", "DSCP 26 -> switch-priority 3 -> "
                                            "TC 3, PFC on switch-priorities [3], RoCE mode "
                                            "lossless")]
        sw.run("nv set qos mapping default-global dscp 26 switch-priority 2 && "
               "nv config apply -y")
        [(status, _, why)] = _checks(c, "roce_queue")
        assert status == "fail" and "TC 0, not the tuned lossless TC 3" in why
        sw.run("nv set qos egress-queue-mapping default-global switch-priority 2 traffic-class 3"
               " && nv config apply -y")  # TC 3 now, but switch-priority 2 has no PFC
        [(status, _, why)] = _checks(c, "roce_queue")
        assert status == "fail" and "no PFC on switch-priority 2" in why
        sw.run("nv set qos mapping default-global dscp 26 switch-priority 3 && "
               "nv config apply -y")
        assert [s for s, _, _ in _checks(c, "roce_queue")] == ["pass"]


def test_preflight_names_the_nvue_confirm_window_and_refuses_a_pending_one(
        emu: EmulatedCluster) -> None:
    with _cluster(emu) as c:
        assert _checks(c, "nvue_confirm") == []  # plain applies: nothing blocks anyone
        [(status, target, why)] = _checks(c, "nvue_confirm", 600)
        assert (status, target) == ("warn", "leaf1") and "up to 600 s per trial" in why
        sw = c.pool.conns["leaf1"]
        sw.run("nv set qos congestion-control default-global traffic-class 1 ecn enable && "
               "nv config apply --confirm 10m -y")  # someone else's apply, unconfirmed
        [(status, _, why)] = _checks(c, "nvue_confirm", 600)
        assert status == "fail" and "waits for confirmation" in why
        sw.run("nv config apply --confirm-no")


def test_an_nvue_profile_that_cannot_be_cloned_is_refused_before_any_change(
        emu: EmulatedCluster) -> None:
    """default-global holds a class no profile can (a threshold that is not a byte count):
    pre-flight names the switch, class and field; an apply stops on it and leaves every target
    as it was (the other targets' writes are put back)."""
    def bad_class(s: dict[str, Any]) -> None:
        s["applied"]["qos"]["congestion-control"]["default-global"]["traffic-class"]["2"] = {
            "ecn": "enable", "min-threshold": "lots"}

    emu.edit_state("leaf1", bad_class)
    why = "leaf1: cannot clone congestion-control default-global traffic-class 2: " \
          "min-threshold 'lots' is not a byte count"
    with _cluster(emu) as c:
        assert [(r.check, r.target, r.status) for r in run_checks(ssh_facts(c, SPEC), SPEC)
                if why in r.evidence] == [("facts", "leaf1", "fail")]
        base = c.snapshot()
        new = Settings.uniform(list(base.switches), [],
                               {"kmin_bytes": 100000, "kmax_bytes": 400000, "pmax_percent": 20})
        new = base.model_copy(update={"switches": new.switches})
        with pytest.raises(TunerError, match=why) as err:
            c.apply(new)
        assert exit_code_for(err.value) in (EXIT_INPUT, EXIT_FAILED)
        assert c.read_back() == base
    assert "ECNTUNE_CANARY" not in emu.state("leaf1")["applied"]["qos"]["congestion-control"]


def test_preflight_refuses_a_sonic_profile_bound_to_a_non_canary_port(
        emu: EmulatedCluster) -> None:
    with _cluster(emu) as c:
        assert _bad(c) == []
    # writing the shared profile itself reaches every port bound to it (the uplink too)
    with _cluster(emu, sonic={"canary_profile": "AZURE_LOSSLESS"}) as c:
        assert _bad(c) == [("blast_radius", "leaf0")]
    uplink = emu.state("leaf0")["uplink_ports"][0]

    def bind_uplink(s: dict[str, Any]) -> None:
        db = s["config_db"]
        db["WRED_PROFILE"]["ECNTUNE_CANARY"] = dict(db["WRED_PROFILE"]["AZURE_LOSSLESS"])
        db["QUEUE"][f"{uplink}|3"]["wred_profile"] = "ECNTUNE_CANARY"

    emu.edit_state("leaf0", bind_uplink)
    with _cluster(emu) as c:
        res = run_checks(ssh_facts(c, SPEC), SPEC)
    bad = failures(res)
    assert [(r.check, r.target) for r in bad] == [("blast_radius", "leaf0")]
    assert f"['{uplink}'] outside the canary" in bad[0].evidence


def test_preflight_refuses_an_nvue_default_global_write(emu: EmulatedCluster) -> None:
    with _cluster(emu, nvue={"canary_profile": "default-global"}) as c:
        res = failures(run_checks(ssh_facts(c, SPEC), SPEC))
    assert [(r.check, r.target) for r in res] == [("blast_radius", "leaf1")]
    assert "every port without its own congestion-control profile" in res[0].evidence
    port = emu.state("leaf1")["uplink_ports"][0]
    emu.edit_state("leaf1", lambda s: s["applied"]["interface"].update(
        {port: {"qos": {"congestion-control": {"profile": "ECNTUNE_CANARY"}}}}))
    with _cluster(emu) as c:
        assert _bad(c) == [("blast_radius", "leaf1")]


def test_pfc_threshold_comes_from_each_switch_and_bounds_kmax(emu: EmulatedCluster) -> None:
    limits = SafetyLimits()
    stock = {"kmin_bytes": 1_048_576, "kmax_bytes": 2_097_152}  # AZURE_LOSSLESS
    with _cluster(emu) as c:
        leaf0, leaf1 = (s.pfc_threshold for s in ssh_facts(c, SPEC).switches)
        pfc = PfcThreshold.from_facts(c.describe().facts)
    # the SONiC leaf: stock SN2700 buffers read over SSH (BUFFER_PG -> profile -> pool)
    assert leaf0 is not None and leaf0.explain() == (
        "2 ingress PGs at alpha 1 (dynamic_th 0) of pool ingress_lossless_pool 4580864 B send "
        "PFC XOFF at an egress queue of 3053909 B; CONFIG_DB BUFFER_PG|Ethernet0|3-4 -> "
        "pg_lossless_100000_5m_profile; incast_fan_in 2 (inventory)")
    # the NVUE leaf shows no pool: the inventory's (its rocesim leaf, 32 MiB at alpha 1/8)
    assert leaf1 is not None and leaf1.onset_bytes() == 2**25 // 5
    assert leaf1.source == "inventory pfc_dynamic_th; incast_fan_in 2 (inventory)"
    assert pfc == leaf0  # the switch that pauses first bounds Kmax
    # the loop's rule (tuner/loop.py reads desc.facts["pfc_threshold"]): the stock profile
    # passes on the SONiC leaf's own threshold, and 1/8 of its pool refuses it
    assert check_proposal(stock, pfc=leaf0, line_rate_mbps=100_000, limits=limits) == []
    emu.edit_state("leaf0", lambda s: s["config_db"]["BUFFER_PROFILE"][
        "pg_lossless_100000_5m_profile"].update(dynamic_th="-3"))
    with _cluster(emu, nvue={"pfc_pool_bytes": 0}) as c:
        assert c.describe().facts["pfc_threshold_unknown"] == "leaf1"
        pfc = PfcThreshold.from_facts(c.describe().facts)
    assert pfc is not None and pfc.dynamic_th == -3
    assert [v.code for v in check_proposal(stock, pfc=pfc, line_rate_mbps=100_000,
                                           limits=limits)] == ["kmax_above_pfc_threshold"]
    emu.edit_state("leaf0", lambda s: s["config_db"].update(BUFFER_PROFILE={}))
    with _cluster(emu) as c:
        assert c.describe().facts["pfc_threshold_unknown"] == "leaf0"
        assert ("pfc_threshold", "leaf0") in _bad(c)
    with _cluster(emu, sonic={"pfc_pool_bytes": 4580864, "pfc_dynamic_th": 0}) as c:
        assert "pfc_threshold_unknown" not in c.describe().facts  # inventory fallback


def test_enable_counters_turns_on_the_wred_ecn_queue_group(emu: EmulatedCluster) -> None:
    with _cluster(emu) as c:
        warn = [r for r in run_checks(ssh_facts(c, SPEC), SPEC) if r.check == "counters"]
        assert [r.status for r in warn] == ["warn"]
        assert c.describe().facts["counter_poll_s"] == "pfc=1,queue=1"  # wred: off
        assert enable_counters(c) == ["leaf0"]
        res = [r for r in run_checks(ssh_facts(c, SPEC), SPEC) if r.check == "counters"]
        assert [r.status for r in res] == ["pass"] and "wred 10 s" in res[0].evidence
        assert enable_counters(c) == []  # already on: nothing written


def test_nic_facts_algorithm_roce_mtu_and_cnp_queue(emu: EmulatedCluster) -> None:
    with _cluster(emu) as c:
        res = run_checks(ssh_facts(c, SPEC), SPEC)
        got = {(r.check, r.target): r.status for r in res
               if r.check in ("cc_algorithm", "roce_mtu", "cnp_queue")}
        # stock SONiC runs the CNP queue (6) on DWRR scheduler.0: a warning, not a refusal
        sonic = {k: got.pop(k) for k in list(got) if k[1].startswith("leaf0/")}
        assert sonic == {("cnp_queue", "leaf0/Ethernet0"): "warn",
                         ("cnp_queue", "leaf0/Ethernet4"): "warn"}
        assert set(got.values()) == {"pass"} and ("cnp_queue", "leaf1/swp1") in got
    emu.edit_state("host1", lambda s: s.update(cc_algorithm="QCN(1)", roce_mtu=1024))
    emu.edit_state("leaf0", lambda s: s["config_db"]["SCHEDULER"]["scheduler.0"].update(
        type="STRICT"))
    with _cluster(emu, hosts=2) as c:
        res = run_checks(ssh_facts(c, SPEC), SPEC)
    assert {("cc_algorithm", "host1"), ("roce_mtu", "host1")} <= {
        (r.check, r.target) for r in failures(res)}
    assert [r.status for r in res if r.target == "leaf0/Ethernet0"
            and r.check == "cnp_queue"] == ["pass"]


def test_final_counters_wait_one_switch_poll_interval(emu: EmulatedCluster) -> None:
    from objectives.measurement import Measurement
    from tuner.emulated import state as st

    with _cluster(emu) as c:
        before = c.counters()
        m = Measurement(counters_before=before, counters_after=c.counters())
        port = emu.state("leaf0")["host_ports"][0]
        # drops the switch publishes only at its next poll (queue stats: every 1 s here)
        st.add_counters(emu.target_dir("leaf0"), {port: {"q3_drop_pkts": 7}})
        got = c.settled(m)
        # the final read comes one poll interval after the counters the traffic ended with
        assert got.counters_after.taken_at_s - m.counters_after.taken_at_s >= 1.0
        assert got.counters.ports[f"leaf0/{port}"]["queue3_drop_pkts"] == 7
        assert "1 s after the traffic" in got.notes[-1]


def test_restore_rebinds_even_when_the_canary_holds_the_original_values(
        emu: EmulatedCluster) -> None:
    """What a write that failed right after binding leaves: same values, wrong profile."""
    sonic_before = emu.state("leaf0")["config_db"]

    def leftover_sonic(s: dict[str, Any]) -> None:
        db = s["config_db"]
        db["WRED_PROFILE"]["ECNTUNE_CANARY"] = dict(db["WRED_PROFILE"]["AZURE_LOSSLESS"])
        for p in s["host_ports"]:
            db["QUEUE"][f"{p}|3"]["wred_profile"] = "ECNTUNE_CANARY"

    def leftover_nvue(s: dict[str, Any]) -> None:
        for conf in (s["applied"], s["pending"]):
            cc = conf["qos"]["congestion-control"]
            cc["ECNTUNE_CANARY"] = {"traffic-class": {"3": dict(
                cc["default-global"]["traffic-class"]["3"])}}
            for p in s["host_ports"]:
                conf["interface"][p] = {"qos": {"congestion-control": {
                    "profile": "ECNTUNE_CANARY"}}}

    emu.edit_state("leaf0", leftover_sonic)
    emu.edit_state("leaf1", leftover_nvue)
    with _cluster(emu) as c:
        base = c.snapshot()
        c.apply(base)  # equal values: still rebinds the originals
        assert c.read_back() == base
    db = emu.state("leaf0")["config_db"]
    assert db["QUEUE"] == sonic_before["QUEUE"] and "ECNTUNE_CANARY" not in db["WRED_PROFILE"]
    nv = emu.state("leaf1")["applied"]
    assert "ECNTUNE_CANARY" not in nv["qos"]["congestion-control"]
    assert all(not (b.get("qos") or {}) for b in nv["interface"].values())
