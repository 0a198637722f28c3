"""Stand-in tools over real SSH: their output is accepted by the project's parsers, their
writes behave like the devices', and the numbers come from rocesim."""

from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from objectives import parsers
from tests.emulated.helpers import run
from tuner.emulated import EmulatedCluster, sshd_available

pytestmark = [pytest.mark.ssh, pytest.mark.skipif(
    not sshd_available(), reason="/usr/sbin/sshd missing (apt-get install openssh-server)")]

HW = "sys/class/infiniband/mlx5_0/ports/1/hw_counters"
MPIRUN = ("mpirun --allow-run-as-root -np 4 -H host0,host1,host2,host3 "
          "alltoall_perf -b 2M -e 2M -f 2 -g 1 -n 5 -w 1 -c 1")
SWEEP = MPIRUN.replace("-b 2M", "-b 1M").replace("-np 4", "-np 4 -x NCCL_DEBUG=INFO")


def ok(emu: EmulatedCluster, target: str, command: str) -> str:
    code, out, err = run(emu, target, command)
    assert code == 0, f"{command!r} on {target}: rc={code} stderr={err!r}"
    return out


def test_host_outputs_parse(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    stats = parsers.parse_ethtool_stats(ok(emu, "host0", "ethtool -S ens1f0np0"))
    assert stats.counters["rx_prio3_pause"] == 0  # PFC on prio 3 -> the pause rows exist
    assert "rx_prio4_pause" not in stats.counters  # ... and only for PFC priorities
    info = parsers.parse_ethtool_info(ok(emu, "host0", "ethtool -i ens1f0np0"))
    assert info.driver == "mlx5_core"
    qos = parsers.parse_mlnx_qos(ok(emu, "host1", "mlnx_qos -i ens1f0np0"))
    assert qos.trust == "dscp" and qos.pfc_priorities == [3]
    hw = parsers.parse_hw_counters(
        ok(emu, "host1", f"cd $ECNTUNE_EMU_ROOT/host1/{HW} && grep . *"))
    assert hw.counters()["np_cnp_sent"] == 0 and "rp_cnp_handled" in hw.counters()


def test_set_qos_breaks_preflight_facts(emulated_cluster: EmulatedCluster) -> None:
    emulated_cluster.set_qos("host3", trust="pcp", pfc=[0, 0, 0, 0, 1, 0, 0, 0], mtu=1500)
    qos = parsers.parse_mlnx_qos(ok(emulated_cluster, "host3", "mlnx_qos -i ens1f0np0"))
    assert qos.trust == "pcp" and qos.pfc_priorities == [4]
    assert " mtu 1500 " in ok(emulated_cluster, "host3", "ip link show ens1f0np0")


def test_mlnx_qos_change_is_visible(emulated_cluster: EmulatedCluster) -> None:
    out = ok(emulated_cluster, "host2", "mlnx_qos -i ens1f0np0 --trust pcp -f 0,0,0,0,0,0,0,0")
    qos = parsers.parse_mlnx_qos(out)
    assert qos.trust == "pcp" and qos.pfc_priorities == []
    stats = parsers.parse_ethtool_stats(ok(emulated_cluster, "host2", "ethtool -S ens1f0np0"))
    assert "rx_prio3_pause" not in stats.counters


def test_sonic_outputs_parse(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    cfg = parsers.parse_ecnconfig(ok(emu, "leaf0", "ecnconfig -l"))
    prof = cfg.profiles["AZURE_LOSSLESS"]
    assert (prof["green_min_threshold"], prof["green_max_threshold"]) == (1048576, 2097152)
    assert prof["green_drop_probability"] == 5
    pfc = parsers.parse_pfcstat(ok(emu, "leaf0", "show pfc counters"))
    assert pfc.rx["Ethernet0"][3] == 0 and set(pfc.tx) == {"Ethernet0", "Ethernet4", "Ethernet8"}
    q = parsers.parse_queue_counters(ok(emu, "leaf0", "show queue counters"))
    assert q.get("Ethernet4", "UC3").values["Counter/pkts"] == 0
    qj = parsers.parse_queue_counters(ok(emu, "leaf0", "show queue counters --json"))
    assert qj.get("Ethernet0", "UC3") is not None
    w = parsers.parse_wredcounters(ok(emu, "leaf0", "show queue wredcounters"))
    assert w.get("Ethernet0", "UC3").values["EcnMarked/pkts"] == 0
    wd = parsers.parse_pfcwd_stats(ok(emu, "leaf0", "show pfcwd stats"))
    assert [(r.port, r.queue, r.status) for r in wd.rows][:1] == [("Ethernet0", 3, "operational")]


def test_ecnconfig_validates_and_writes_field_by_field(emulated_cluster: EmulatedCluster
                                                       ) -> None:
    emu = emulated_cluster
    code, out, err = run(emu, "leaf0", "ecnconfig -p AZURE_LOSSLESS -gmin 3000000")
    assert code == 1  # merged with the stored gmax 2097152 -> min > max
    assert out == ("Invalid gmin (3000000) and gmax (2097152). gmin should be smaller than "
                   "gmax\n")
    assert "Invalid WRED profile parameters" in err
    code, _, err = run(emu, "leaf0", "ecnconfig -p NO_SUCH -gmin 1")
    assert code == 1
    assert err == ("Exception caught:  Input arguments error. Invalid WRED profile NO_SUCH "
                   "for namespace None\n")
    out = ok(emu, "leaf0", "ecnconfig -p AZURE_LOSSLESS -gmax 4000000 -gmin 3000000 -gdrop 20 -vv")
    assert out.splitlines() == ["Setting green_max_threshold value to 4000000",
                                "Setting green_min_threshold value to 3000000",
                                "Setting green_drop_probability value to 20%"]
    # A failure between CONFIG_DB writes leaves the earlier fields applied.
    emu.inject("leaf0", ecnconfig_fail_after=1)
    code, _, _ = run(emu, "leaf0", "ecnconfig -p AZURE_LOSSLESS -gmax 5000000 -gmin 4500000")
    assert code == 1
    prof = parsers.parse_ecnconfig(ok(emu, "leaf0", "ecnconfig -l")).profiles["AZURE_LOSSLESS"]
    assert (prof["green_max_threshold"], prof["green_min_threshold"]) == (5000000, 3000000)
    assert ok(emu, "leaf0", "ecnconfig -q 3") == "ECN status:\nqueue 3: on\n"


def test_nvue_pending_then_applied(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    base = "nv set qos congestion-control default-global traffic-class 3"
    ok(emu, "leaf1", f"{base} min-threshold 40000 && {base} max-threshold 200000")
    show = "nv show qos congestion-control default-global traffic-class 3 -o json"
    assert json.loads(ok(emu, "leaf1", show))["min-threshold"] == 1048576  # not applied yet
    assert json.loads(ok(emu, "leaf1", show + " -r pending"))["min-threshold"] == 40000
    assert ok(emu, "leaf1", "nv config apply -y").startswith("applied [rev_id: ")
    assert json.loads(ok(emu, "leaf1", show))["max-threshold"] == 200000
    table = ok(emu, "leaf1", "nv show qos congestion-control default-global")
    assert "    3              enable  disable  40000 B   200000 B   5" in table
    code, _, err = run(emu, "leaf1", f"{base} probability 150")
    assert code == 1 and "0-100" in err
    counters = ok(emu, "leaf1", "nv show interface swp1 counters qos")
    assert "PFC Statistics" in counters and "ecn-marked-packets  n/a      0" in counters


def test_mpirun_output_parses_and_moves_counters(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    res = parsers.parse_nccl_tests(ok(emu, "host0", SWEEP))
    assert [r.size_bytes for r in res.rows] == [1048576, 2097152]
    assert res.out_of_bounds_ok is True and res.wrong_total == 0 and res.nranks == 4
    assert 1.0 < res.rows[0].out_of_place.busbw_gbytes_per_s < 12.5  # under 100 Gb/s per NIC
    stats = parsers.parse_ethtool_stats(ok(emu, "host1", "ethtool -S ens1f0np0"))
    # -w 1 + 2 x -n 5 iterations per size (warmup, out-of-place, in-place) of 1 and 2 MiB;
    # alltoall sends 3/4 of each rank's buffer to other hosts.
    sent = (1 + 2) * 2**20 * (1 + 2 * 5) * 3 / 4
    assert sent * 0.9 < stats.counters["tx_prio3_bytes"] < sent * 1.3
    hw = ok(emu, "host1", f"cat $ECNTUNE_EMU_ROOT/host1/{HW}/rx_write_requests")
    assert int(hw) > 0
    q = parsers.parse_queue_counters(ok(emu, "leaf0", "show queue counters Ethernet0"))
    assert q.get("Ethernet0", "UC3").values["Counter/bytes"] > 0


def test_mpirun_numbers_follow_switch_ecn(emulated_cluster: EmulatedCluster) -> None:
    """Aggressive marking on the 2:1 oversubscribed uplinks throttles alltoall (DCQCN)."""
    emu = emulated_cluster
    before = parsers.parse_nccl_tests(ok(emu, "host0", MPIRUN))
    ok(emu, "leaf0", "ecnconfig -p AZURE_LOSSLESS -gmin 20000 -gmax 200000 -gdrop 50")
    base = "nv set qos congestion-control default-global traffic-class 3"
    ok(emu, "leaf1", f"{base} min-threshold 20000 && {base} max-threshold 200000 && "
                     f"{base} probability 50 && nv config apply -y")
    after = parsers.parse_nccl_tests(ok(emu, "host0", MPIRUN))
    b0 = before.rows[-1].out_of_place.busbw_gbytes_per_s
    b1 = after.rows[-1].out_of_place.busbw_gbytes_per_s
    assert b1 < 0.9 * b0, (b0, b1)
    marked = parsers.parse_wredcounters(ok(emu, "leaf0", "show queue wredcounters Ethernet8"))
    assert marked.get("Ethernet8", "UC3").values["EcnMarked/pkts"] > 0
    cnp = ok(emu, "host0", f"cat $ECNTUNE_EMU_ROOT/host0/{HW}/rp_cnp_handled")
    assert int(cnp) > 0
    parse_nvue = getattr(parsers, "parse_nvue", None)
    if parse_nvue is not None:  # the NVUE leaf: host port carried traffic, uplink marked
        nv = parse_nvue(ok(emu, "leaf1", "nv show interface swp1 counters qos")).to_counters()
        assert nv["queue3_tx_pkts"] > 0
        up = parse_nvue(ok(emu, "leaf1", "nv show interface swp3 counters qos")).to_counters()
        assert up["ecn_marked_pkts"] > 0


def test_mpirun_faults(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    emu.inject("host2", nccl_wrong=3, nccl_warn="NET/IB : async event: local catastrophic error")
    code, out, _ = run(emu, "host0", MPIRUN)
    assert code == 1
    res = parsers.parse_nccl_tests(out)
    assert res.wrong_total > 0 and res.out_of_bounds_ok is False
    assert any("catastrophic" in w for w in res.nccl_warnings)
    emu.clear_faults("host2")
    wrong_hca = MPIRUN.replace("-np 4", "-np 4 -x NCCL_IB_HCA")
    code, _, err = run(emu, "host0", f"NCCL_IB_HCA=mlx5_9 {wrong_hca}")
    assert code == 1 and "NET/IB : No device found." in err
    emu.inject("host3", link_down=True)
    code, _, err = run(emu, "host0", MPIRUN)
    assert code == 1 and "NCCL WARN" in err
    assert "state DOWN" in ok(emu, "host3", "ip link show ens1f0np0")


def test_counter_faults_are_rates_in_time(emulated_cluster: EmulatedCluster) -> None:
    """A storm is pause frames per second, as on a real port: what two reads see depends on the
    time between them, not on how many reads there were."""
    emu = emulated_cluster
    emu.inject("host0", pfc_storm=1000, crc_errors=70, lossless_drops=50)
    t0 = time.monotonic()
    first = parsers.parse_ethtool_stats(ok(emu, "host0", "ethtool -S ens1f0np0")).counters
    t1 = time.monotonic()
    time.sleep(0.5)
    t2 = time.monotonic()
    second = parsers.parse_ethtool_stats(ok(emu, "host0", "ethtool -S ens1f0np0")).counters
    t3 = time.monotonic()
    for name, rate in (("rx_prio3_pause", 1000), ("rx_crc_errors_phy", 70),
                       ("rx_prio3_discards", 50)):
        rise = second[name] - first[name]
        assert rate * (t2 - t1) - 1 <= rise <= rate * (t3 - t0) + 1, (name, rise)
    assert second["rx_prio3_pause_duration"] == 50 * second["rx_prio3_pause"]
    emu.inject("host0", pfc_storm=0, crc_errors=0, lossless_drops=0)
    stopped = parsers.parse_ethtool_stats(ok(emu, "host0", "ethtool -S ens1f0np0")).counters
    time.sleep(0.2)
    assert parsers.parse_ethtool_stats(ok(emu, "host0", "ethtool -S ens1f0np0")).counters[
        "rx_prio3_pause"] == stopped["rx_prio3_pause"]
    emu.inject("leaf0", pfc_storm=500)
    time.sleep(0.2)
    pfc = parsers.parse_pfcstat(ok(emu, "leaf0", "show pfc counters"))
    assert pfc.rx["Ethernet0"][3] >= 100
    wd = parsers.parse_pfcwd_stats(ok(emu, "leaf0", "show pfcwd stats"))
    assert wd.rows[0].status == "stormed"


def test_a_reading_beside_another_sees_every_event_taken(emulated_cluster: EmulatedCluster,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Two counter commands at once on a stormed switch (the SONiC driver runs its four
    ``show`` commands as parallel channels): while one has taken the storm's events, the
    other's reading waits until they are counted, so no reading misses them (a lull) and the
    next doubles them (a burst) -- the flake that made ``watch`` call a storm noise."""
    from tuner.emulated import state as st
    from tuner.emulated import switches
    from tuner.emulated.tools._base import Target

    emu = emulated_cluster
    emu.inject("leaf0", pfc_storm=1000)
    tdir = emu.target_dir("leaf0")
    time.sleep(0.3)  # ~300 events due
    inside, release = threading.Event(), threading.Event()
    plain = switches.fault_counter_deltas

    def held(state: dict, events: dict[str, int]) -> dict[str, dict[str, int]]:
        if threading.current_thread().name == "first":
            inside.set()
            release.wait(5.0)
        return plain(state, events)

    monkeypatch.setattr(switches, "fault_counter_deltas", held)

    def reading(out: list[int]) -> None:
        t = Target(emu.root, tdir, "leaf0", st.load_state(tdir), st.load_faults(tdir))
        t.tick_counter_faults()
        out.append(t.counters()["Ethernet0"].get("pfc_rx_3", 0))

    first: list[int] = []
    second: list[int] = []
    a = threading.Thread(target=reading, args=(first,), name="first")
    a.start()
    assert inside.wait(5.0)
    b = threading.Thread(target=reading, args=(second,), name="second")
    b.start()
    b.join(1.0)  # the second reading may not finish while the first holds its events
    release.set()
    a.join(5.0)
    b.join(5.0)
    assert first and first[0] >= 250
    assert second and second[0] >= first[0]


def test_ib_write_lat_client_server(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    code, _, err = run(emu, "host0", "ib_write_lat -d mlx5_0 -s 64 -n 1000 host2")
    assert code == 1 and "Couldn't connect to host2:18515" in err  # no server yet
    server = subprocess.Popen(
        ["ssh", "-i", str(emu.client_key), "-o", f"UserKnownHostsFile={emu.known_hosts}",
         "-o", "BatchMode=yes", f"root@{emu.targets['host2'].address}",
         "ib_write_lat -d mlx5_0 -s 64 -n 1000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while not (emu.target_dir("host2") / "perftest_server-18515.json").exists():
            assert time.monotonic() < deadline, "ib_write_lat server did not start"
            time.sleep(0.05)
        server_addr = emu.targets["host2"].address  # by address, like a real client
        client = ok(emu, "host0", f"ib_write_lat -d mlx5_0 -s 64 -n 1000 {server_addr}")
        srv_out, _ = server.communicate(timeout=20)
    finally:
        server.kill()
    lat = parsers.parse_perftest(client).run.latency[0]
    assert (lat.bytes, lat.iterations) == (64, 1000)
    assert 1.0 < lat.t_typical_us < 20.0 and lat.t_min_us <= lat.t_avg_us <= lat.t_max_us
    assert parsers.parse_perftest(srv_out).run.latency[0].t_typical_us == lat.t_typical_us


def test_nvue_outputs_parse(emulated_cluster: EmulatedCluster) -> None:
    parse_nvue = parsers.parse_nvue
    emu = emulated_cluster
    base = "nv set qos congestion-control default-global traffic-class 3"
    ok(emu, "leaf1", f"{base} min-threshold 40000 && {base} max-threshold 300000")
    cc = "nv show qos congestion-control default-global"
    table = parse_nvue(ok(emu, "leaf1", cc)).ecn_profiles()
    assert table[3]["min_threshold_bytes"] == 1048576 and table[0]["probability"] == 100
    pending = parse_nvue(ok(emu, "leaf1", f"{cc} traffic-class 3 -r pending"))
    assert pending.values["min-threshold"].pending == "40000 B"
    ok(emu, "leaf1", "nv config apply -y")
    kv = parse_nvue(ok(emu, "leaf1", f"{cc} traffic-class 3"))
    assert kv.values["max-threshold"].as_int() == 300000 and kv.values["ecn"].value == "enable"
    js = parse_nvue(ok(emu, "leaf1", f"{cc} -o json")).ecn_profiles()
    assert js[3]["min_threshold_bytes"] == 40000 and js[3]["probability"] == 5
    emu.inject("leaf1", pfc_storm=1000)
    time.sleep(0.1)
    counters = parse_nvue(ok(emu, "leaf1", "nv show interface swp1 counters qos"))
    c = counters.to_counters()
    assert c["queue3_tx_pkts"] == 0 and c["pfc3_rx_pkts"] >= 100
    time.sleep(0.1)
    as_json = parse_nvue(ok(emu, "leaf1", "nv show interface swp1 counters qos -o json"))
    assert as_json.numbers()["pfc-stats.3.rx-pause-frames"] >= c["pfc3_rx_pkts"] + 100
