"""Pre-flight checks on facts built from real tool output (shared/reference)."""

from __future__ import annotations

from pathlib import Path

import pytest

from objectives.parsers import parse_ethtool_info, parse_ethtool_stats, parse_mlnx_qos
from safety.preflight import (
    HostFacts,
    PreflightFacts,
    PreflightSpec,
    SharedJob,
    SwitchFacts,
    failures,
    run_checks,
    summary,
    worst,
)

REF = Path(__file__).resolve().parents[3] / "shared" / "reference"  # beside the repository
QOS_PFC3 = REF / "mlx5-dcqcn-config" / "mlnx_qos-show-fw-dcbx-dscp-trust-pfc3.txt"
SPIDERPOOL = REF / "mlx5-dcqcn-config" / "sysfs-ecn-enable-cnp_dscp-traffic_class-readback-" \
    "spiderpool.txt"
ETHTOOL_I = REF / "mlx5-ethtool" / "cx4-kernel4.15-ethtool-S-head-ethq-issue8.txt"
DISCARDS = REF / "mlx5-ethtool" / "cx4lx-discards-and-global-pause-grep.txt"


def qos_pfc3():
    # Real mlnx_qos: trust dscp, DSCP 26 -> prio 3, PFC on prio 3 only.
    return parse_mlnx_qos(QOS_PFC3.read_text())


def qos_spiderpool():
    # Real set-rdma-qos.sh output: its mlnx_qos part shows PFC on prio 5 only.
    lines = SPIDERPOOL.read_text().splitlines()
    start = next(i for i, ln in enumerate(lines) if "Priority trust state" in ln)
    return parse_mlnx_qos("\n".join(lines[start:start + 5]))


def firmware():
    text = ETHTOOL_I.read_text().split("# ethtool -S output")[0]
    return parse_ethtool_info(text)


def host(name: str, **kw) -> HostFacts:
    info = firmware()
    base = dict(name=name, nic=f"{name}/mlx5_0", mtu=9000, link_up=True, speed_mbps=100_000,
                qos=qos_pfc3(), rp_enabled={p: True for p in range(8)},
                np_enabled={p: True for p in range(8)}, roce_tos=106, cnp_dscp=48,
                driver=info.driver, firmware=info.firmware_version,
                counters_before={"rx_crc_errors_phy": 5, "rx_prio3_packets": 10},
                counters_after={"rx_crc_errors_phy": 5, "rx_prio3_packets": 10}, sample_s=2.0,
                ping={"peer": "ok"})
    base.update(kw)
    return HostFacts(**base)


def switch(name: str = "leaf0", **kw) -> SwitchFacts:
    base = dict(name=name, port_mtu={"Ethernet0": 9000, "Ethernet4": 9000},
                port_up={"Ethernet0": True, "Ethernet4": True},
                lossless={"Ethernet0": [3], "Ethernet4": [3]})
    base.update(kw)
    return SwitchFacts(**base)


def facts(hosts=None, switches=None, backend_="test", **kw) -> PreflightFacts:
    return PreflightFacts(backend=backend_, roce_priority=3,
                          hosts=hosts if hosts is not None else [host("h0"), host("h1")],
                          switches=switches if switches is not None else [switch()],
                          line_rate_mbps=100_000, **kw)


def by_check(results, check):
    return [r for r in results if r.check == check]


def test_samples_parse_as_expected():
    q = qos_pfc3()
    assert q.trust == "dscp" and q.pfc_priorities == [3] and q.dscp2prio[26] == 3
    assert qos_spiderpool().pfc_priorities == [5]
    assert firmware().firmware_version.startswith("14.23.1020")


def test_healthy_fabric_passes_every_check():
    res = run_checks(facts(), PreflightSpec())
    assert worst(res) == "pass", [r for r in res if r.status != "pass"]
    checks = {r.check for r in res}
    assert {"mtu", "df_ping", "pfc_priority", "dscp_trust", "dcqcn_enabled", "link",
            "error_counters", "versions", "blast_radius", "shared_priority"} <= checks
    v = by_check(res, "versions")[0]
    assert "mlx5_core" in v.evidence and "14.23.1020" in v.evidence


def test_mtu_mismatch_on_host_and_switch_port():
    f = facts(hosts=[host("h0"), host("h1"), host("h2", mtu=1500)],
              switches=[switch(port_mtu={"Ethernet0": 9000, "Ethernet4": 9216})])
    bad = failures(by_check(run_checks(f, PreflightSpec()), "mtu"))
    assert sorted(r.target for r in bad) == ["h2", "leaf0/Ethernet4"]
    assert "MTU 1500, most common 9000" in next(r for r in bad if r.target == "h2").evidence


def test_mtu_expected_value_wins_over_majority():
    bad = failures(run_checks(facts(), PreflightSpec(mtu=4200)))
    assert len([r for r in bad if r.check == "mtu"]) == 4  # 2 hosts + 2 switch ports


def test_pfc_on_wrong_priority_from_real_sample():
    f = facts(hosts=[host("h0"), host("h1", qos=qos_spiderpool())])
    bad = failures(run_checks(f, PreflightSpec()))
    pfc = [r for r in bad if r.check == "pfc_priority"]
    assert [r.target for r in pfc] == ["h1"]
    assert "priorities [5]" in pfc[0].evidence and "RoCE priority 3" in pfc[0].evidence


def test_pfc_extra_priority_on_host_fails_but_on_switch_warns():
    q = qos_pfc3().model_copy(update={"pfc_enabled": [False, False, False, True, True,
                                                      False, False, False]})
    f = facts(hosts=[host("h0", qos=q), host("h1")],
              switches=[switch(lossless={"Ethernet0": [3, 4], "Ethernet4": [3, 4]})])
    res = by_check(run_checks(f, PreflightSpec()), "pfc_priority")
    assert [(r.target, r.status) for r in res if r.status != "pass"] == [
        ("h0", "fail"), ("leaf0/Ethernet0", "warn"), ("leaf0/Ethernet4", "warn")]


def test_switch_port_without_roce_priority_lossless_fails():
    f = facts(switches=[switch(lossless={"Ethernet0": [3], "Ethernet4": [4]})])
    bad = failures(run_checks(f, PreflightSpec()))
    assert [(r.check, r.target) for r in bad] == [("pfc_priority", "leaf0/Ethernet4")]


def test_trust_pcp_and_wrong_tos_and_cnp_dscp():
    q = qos_pfc3().model_copy(update={"trust": "pcp"})
    f = facts(hosts=[host("h0", qos=q), host("h1", roce_tos=160, cnp_dscp=24)])
    bad = {r.target: r.evidence for r in failures(run_checks(f, PreflightSpec()))
           if r.check == "dscp_trust"}
    assert "trust pcp" in bad["h0"]
    # spiderpool's tclass 160 is DSCP 40 (INDEX.md 3.1: ToS = DSCP*4 + ECN bits)
    assert "DSCP 40" in bad["h1"] and "cnp_dscp 24" in bad["h1"]


def test_dcqcn_disabled_on_roce_priority():
    rp = {p: p != 3 for p in range(8)}
    f = facts(hosts=[host("h0", rp_enabled=rp), host("h1", rp_enabled=None, np_enabled=None)])
    res = by_check(run_checks(f, PreflightSpec()), "dcqcn_enabled")
    assert [(r.target, r.status) for r in res] == [("h0", "fail"), ("h1", "warn")]
    assert "reaction point" in res[0].evidence


def test_link_down_slow_and_fec():
    f = facts(hosts=[host("h0", link_up=False), host("h1", speed_mbps=25_000, fec="baser")],
              switches=[switch(port_up={"Ethernet0": False, "Ethernet4": True})])
    bad = {r.target: r.evidence for r in failures(run_checks(f, PreflightSpec(fec="rs")))
           if r.check == "link"}
    assert bad["h0"] == "link down"
    assert "speed 25000" in bad["h1"] and "FEC baser" in bad["h1"]
    assert "Ethernet0" in bad["leaf0"]


def test_rising_crc_errors_fail_and_static_ones_pass():
    # The real grep'ed counters of a CX-4 Lx: zero discards; add CRC errors that rise.
    row = parse_ethtool_stats(DISCARDS.read_text()).counters
    before = {**row, "rx_crc_errors_phy": 7}
    after = {**row, "rx_crc_errors_phy": 19, "rx_symbol_err_phy": 3}
    f = facts(hosts=[host("h0", counters_before=before, counters_after=after), host("h1")])
    bad = failures(run_checks(f, PreflightSpec()))
    assert [(r.check, r.target) for r in bad] == [("error_counters", "h0")]
    assert "rx_crc_errors_phy +12" in bad[0].evidence and "rx_symbol_err_phy +3" in \
        bad[0].evidence
    assert not failures(run_checks(f, PreflightSpec(max_error_increase=15)))


def test_blast_radius_refused_unless_acknowledged():
    f = facts(switches=[switch(outside_ports=["Ethernet8"])])
    bad = failures(run_checks(f, PreflightSpec()))
    assert [(r.check, r.target) for r in bad] == [("blast_radius", "leaf0")]
    res = run_checks(f, PreflightSpec(acknowledge_shared_switches=["leaf0"]))
    assert worst(res) == "warn"


def test_shared_priority_declared_job_and_idle_traffic():
    spec = PreflightSpec(shared_jobs=[SharedJob(name="backup", priority=3, hosts=["h1"]),
                                      SharedJob(name="logs", priority=0)])
    bad = failures(run_checks(facts(), spec))
    assert [(r.check, r.target) for r in bad] == [("shared_priority", "backup")]
    busy = host("h1", counters_before={"rx_prio3_packets": 100},
                counters_after={"rx_prio3_packets": 250_100})
    bad = failures(run_checks(facts(hosts=[host("h0"), busy]), PreflightSpec()))
    assert [(r.check, r.target) for r in bad] == [("shared_priority", "h1")]
    assert "250000 packets" in bad[0].evidence


def test_workload_background_on_roce_is_a_warning_only():
    res = run_checks(facts(workload_on_roce=True), PreflightSpec())
    assert worst(res) == "warn"


def test_unreachable_target_fails_and_is_skipped_by_other_checks():
    f = facts(hosts=[host("h0"), HostFacts(name="h1", nic="h1/mlx5_0",
                                            error="cannot connect to 10.0.0.2:22")])
    res = run_checks(f, PreflightSpec())
    assert [(r.check, r.target) for r in failures(res)] == [("facts", "h1")]
    assert "h1" in summary(res)


def test_the_df_ping_leaves_by_the_roce_port() -> None:
    """`ping -I <netdev>`: with several interfaces (a management port, eight rails) the route
    to the peer's data address need not be the RoCE port whose MTU is under test."""
    from tuner.inventory import HostEntry
    from tuner.preflight_facts import _ping
    from tuner.ssh.transport import Result

    sent: list[str] = []

    class Conn:
        def run(self, command: str, **_: object) -> Result:
            sent.append(command)
            return Result("gpu01", command, 0, "", "", 0.0)

    own, peer = (HostEntry(name=n, address=a, data_address=d, netdev="ens1f0np0",
                           rdma_device="mlx5_0", pci="0000:3b:00.0", nic_gbps=400)
                 for n, a, d in (("gpu01", "10.0.0.11", "192.168.1.11"),
                                 ("gpu02", "10.0.0.12", "192.168.1.12")))
    assert _ping(Conn(), own, peer, 4200) == "ok"  # type: ignore[arg-type]
    assert sent == ["ping -M do -c 1 -W 1 -s 4172 -I ens1f0np0 192.168.1.12"]


@pytest.mark.parametrize("ping,status", [({"h1": "ok"}, "pass"),
                                         ({"h1": "Message too long, mtu=1500"}, "fail")])
def test_df_ping(ping, status):
    f = facts(hosts=[host("h0", ping=ping), host("h1", ping={})])
    res = by_check(run_checks(f, PreflightSpec()), "df_ping")
    assert worst(res) == status


def test_sonic_show_pfc_priority_sample_feeds_the_switch_check():
    from tuner.inventory import SwitchEntry
    from tuner.preflight_facts import parse_pfc_priority, switch_facts

    doc = (REF / "sonic" / "command-reference-doc-examples.txt").read_text()
    sample = doc.split("**show pfc priority**", 1)[1].split("......", 1)[0]
    table = parse_pfc_priority(sample)
    assert table == {p: [3, 4] for p in ("Ethernet0", "Ethernet2", "Ethernet8", "Ethernet10",
                                         "Ethernet16")}
    sw = SwitchEntry(name="leaf0", address="10.0.0.2", platform="sonic",
                     canary_ports=["Ethernet0", "Ethernet8"], other_ports=["Ethernet16"])
    facts_sw = switch_facts(sw, sample)
    assert facts_sw.lossless == {"Ethernet0": [3, 4], "Ethernet8": [3, 4]}
    res = run_checks(facts(switches=[facts_sw]), PreflightSpec())
    # SONiC's default 3,4: a warning per port; Ethernet16 serves hosts outside the canary
    assert [(r.check, r.target, r.status) for r in res if r.status != "pass"] == [
        ("pfc_priority", "leaf0/Ethernet0", "warn"), ("pfc_priority", "leaf0/Ethernet8", "warn"),
        ("blast_radius", "leaf0", "fail")]


def test_blast_radius_from_the_switch_configuration_not_the_inventory():
    ok = switch(canary_ports=["Ethernet0", "Ethernet4"], written="ECNTUNE_CANARY",
                reach=["Ethernet0", "Ethernet4"])
    assert by_check(run_checks(facts(switches=[ok]), PreflightSpec()), "blast_radius")[0] \
        .status == "pass"
    # the profile is also bound to an uplink: refused even though the inventory lists no
    # other ports, and an acknowledgement does not help
    wide = ok.model_copy(update={"reach": ["Ethernet0", "Ethernet4", "Ethernet8"]})
    for spec in (PreflightSpec(), PreflightSpec(acknowledge_shared_switches=["leaf0"])):
        bad = failures(run_checks(facts(switches=[wide]), spec))
        assert [(r.check, r.target) for r in bad] == [("blast_radius", "leaf0")]
        assert "['Ethernet8'] outside the canary" in bad[0].evidence


def test_pfc_threshold_unknown_on_an_ssh_switch_fails():
    from safety.limits import PfcThreshold

    pfc = PfcThreshold(pool="ingress_lossless_pool", pool_bytes=4580864, dynamic_th=0, fan_in=2,
                       source="CONFIG_DB BUFFER_PG|Ethernet0|3-4 -> pg_lossless_100000_5m_profile")
    known = switch(pfc_threshold=pfc)
    res = by_check(run_checks(facts(switches=[known], backend_="ssh"), PreflightSpec()),
                   "pfc_threshold")
    assert [(r.status, r.evidence) for r in res] == [(
        "pass", "2 ingress PGs at alpha 1 (dynamic_th 0) of pool ingress_lossless_pool 4580864 B "
                "send PFC XOFF at an egress queue of 3053909 B; CONFIG_DB "
                "BUFFER_PG|Ethernet0|3-4 -> pg_lossless_100000_5m_profile")]
    res = run_checks(facts(switches=[switch()], backend_="ssh"), PreflightSpec())
    assert [(r.check, r.status) for r in failures(res)] == [("pfc_threshold", "fail")]
    assert "set pfc_pool_bytes and pfc_dynamic_th" in failures(res)[0].evidence
    assert not by_check(run_checks(facts(), PreflightSpec()), "pfc_threshold")  # simulated


def test_counter_groups_not_polled_warn():
    res = run_checks(facts(switches=[switch(counter_poll_s={"pfc": 1.0, "queue": 10.0},
                                            counters_off=["WRED_ECN_QUEUE_STAT"])]),
                     PreflightSpec())
    (c,) = by_check(res, "counters")
    assert c.status == "warn" and "--enable-counters" in c.evidence


@pytest.mark.parametrize("algo,status", [("ECN(0)", "pass"), ("QCN(1)", "fail")])
def test_nic_congestion_control_algorithm(algo, status):
    # mstconfig sample: ROCE_CC_ALGORITHM_P1 ECN(0); the mstflint DB: ECN=0x0, QCN=0x1
    res = run_checks(facts(hosts=[host("h0", cc_algorithm=algo), host("h1")]), PreflightSpec())
    assert by_check(res, "cc_algorithm")[0].status == status
    res = run_checks(facts(hosts=[host("h0", cc_params=False), host("h1")]), PreflightSpec())
    assert [(r.check, r.target) for r in failures(res)] == [("cc_algorithm", "h0")]


def test_roce_mtu_must_follow_the_netdev_mtu():
    from safety.preflight import roce_mtu_for

    assert (roce_mtu_for(9000), roce_mtu_for(1500), roce_mtu_for(4200)) == (4096, 1024, 4096)
    assert roce_mtu_for(4183) == 2048  # 4183 - 88 < 4096
    res = run_checks(facts(hosts=[host("h0", roce_mtu=4096), host("h1", roce_mtu=1024)]),
                     PreflightSpec())
    assert [(r.check, r.target) for r in failures(res)] == [("roce_mtu", "h1")]


def test_a_cnp_queue_that_is_not_strict_priority_is_a_warning_only():
    sw = switch(cnp_queue={"Ethernet0": "STRICT (DSCP 48 -> TC 6 -> queue 6)",
                           "Ethernet4": "DWRR (DSCP 48 -> TC 6 -> queue 6)"})  # stock SONiC
    res = run_checks(facts(switches=[sw]), PreflightSpec())
    assert not failures(res)
    got = {r.target: r.status for r in by_check(res, "cnp_queue")}
    assert got == {"leaf0/Ethernet0": "pass", "leaf0/Ethernet4": "warn"}


def test_cc_algorithm_from_the_real_mstconfig_query():
    from tuner.preflight_facts import cc_algorithm

    text = (REF / "mlx5-dcqcn-config" / "mstconfig-query-cx4lx-roce-cc-defaults.txt").read_text()
    assert cc_algorithm(text, 1) == "ECN(0)" and cc_algorithm(text, 2) == "ECN(0)"
    extended = ("Device #1:\n----------\n\nDevice type:    ConnectX6DX\n\n"
                "Configurations:          Default         Current         Next Boot\n"
                "         ROCE_CC_ALGORITHM_P1    ECN(0)          QCN(1)          ECN(0)\n")
    assert cc_algorithm(extended, 1) == "QCN(1)"  # what runs now, not what boots next
    assert cc_algorithm("bash: mstconfig: command not found", 1) is None


def test_watched_other_ports_are_not_a_blast_radius_once_the_switch_is_read():
    from tuner.drivers import SonicDriver
    from tuner.inventory import SwitchEntry
    from tuner.preflight_facts import switch_facts

    sw = SwitchEntry(name="leaf0", address="10.0.0.2", platform="sonic",
                     canary_ports=["Ethernet0"], other_ports=["Ethernet8"])
    queue = {p: {"wred_profile": "AZURE_LOSSLESS"} for p in ("Ethernet0|3", "Ethernet8|3")}
    found = {"queue_table": queue, "counterpoll": {}, "config_db": {"QUEUE": queue}}
    got = switch_facts(sw, None, SonicDriver(None, sw), found)  # type: ignore[arg-type]
    assert got.reach == ["Ethernet0"] and got.outside_ports == []
    res = run_checks(facts(switches=[got]), PreflightSpec())
    assert by_check(res, "blast_radius")[0].status == "pass"
    bound = {**queue, "Ethernet8|3": {"wred_profile": "ECNTUNE_CANARY"}}
    got = switch_facts(sw, None, SonicDriver(None, sw),  # type: ignore[arg-type]
                       {**found, "queue_table": bound})
    assert by_check(run_checks(facts(switches=[got]), PreflightSpec()),
                    "blast_radius")[0].status == "fail"


def test_nvue_roce_path_from_the_documented_maps():
    """`nv show qos roce` (NVIDIA's sample): DSCP 26 -> switch-priority 3 -> TC 3 with PFC on
    3 reaches the tuned TC 3; DSCP 10 lands in TC 0; a tuned TC 4 is not where RoCE goes."""
    from safety.preflight import RocePath
    from tuner.drivers.nvue import roce_path

    text = (Path(__file__).resolve().parents[1] / "ssh" / "fixtures" / "nvue-show-qos-roce.txt"
            ).read_text().split("\n", 1)[1]

    def verdict(dscp: int, tc: int = 3, **kw) -> tuple[str, str]:
        path = RocePath(**{**roce_path(text, dscp), **kw})
        [r] = by_check(run_checks(facts(switches=[switch(roce_maps=path, lossless_queue=tc)]),
                                  PreflightSpec()), "roce_queue")
        return r.status, r.evidence

    assert verdict(26)[0] == "pass"
    assert "lands in TC 0, not the tuned lossless TC 3" in verdict(10)[1]
    assert "not the tuned lossless TC 4" in verdict(26, tc=4)[1]
    assert "no PFC on switch-priority 3" in verdict(26, pfc=[4])[1]
    assert "RoCE runs lossy" in verdict(26, mode="lossy")[1]
    assert "in no switch-priority" in verdict(64 - 1, switch_prio=None)[1]
    assert by_check(run_checks(facts(), PreflightSpec()), "roce_queue") == []  # not NVUE
    # RoCE not set up with `nv set qos roce`: no tables to follow, said, not guessed
    bare = text.split("RoCE PCP/DSCP->SP")[0]
    assert verdict(26, maps=roce_path(bare, 26)["maps"])[0] == "warn"


def test_nvue_confirm_window_warns_and_a_pending_confirm_refuses():
    def one(**kw):
        return by_check(run_checks(facts(switches=[switch(**kw)]), PreflightSpec()),
                        "nvue_confirm")

    [warn] = one(confirm_window_s=600, confirm_pending=[])
    assert warn.status == "warn" and "--confirm 10`" in warn.evidence  # minutes, documented
    [fail] = one(confirm_window_s=600, confirm_pending=["7"])
    assert fail.status == "fail" and "revision 7 waits for confirmation" in fail.evidence
    assert one() == []
