"""Driver command lines and parsing, on the real samples in shared/reference/ (no SSH)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from objectives.parsers import parse_nvue
from tests.ssh.conftest import sample
from tuner.drivers import Mlx5DebugfsDriver, Mlx5SysfsDriver, NvueDriver, SonicDriver
from tuner.drivers._mlx5 import HW_COUNTERS_MARK
from tuner.drivers.sonic import _mark
from tuner.emulated.tools.nv import human_bytes
from tuner.errors import ApplyError
from tuner.inventory import parse_inventory
from tuner.settings import NIC_KNOBS, DcqcnSettings, EcnSettings

FIXTURES = Path(__file__).with_name("fixtures")


@pytest.fixture
def inv(inventory_data: dict[str, Any]) -> Any:
    return parse_inventory(inventory_data)


def test_sysfs_layout_reads_the_ofed_file_names(inv: Any) -> None:
    drv = Mlx5SysfsDriver(None, inv.hosts[0])  # type: ignore[arg-type]
    cmd = drv.read_command()
    assert cmd.startswith("cd /srv/emu/host0/sys/class/net/ens1f0np0/ecn && grep -H . ")
    files = shlex.split(cmd.split("&&", 1)[1])[3:]
    assert files[:3] == ["roce_rp/clamp_tgt_rate", "roce_rp/clamp_tgt_rate_after_time_inc",
                         "roce_rp/rpg_time_reset"]
    assert files[-1] == "roce_np/min_time_between_cnps"
    assert len(files) == len(NIC_KNOBS) == 17


def test_debugfs_layout_uses_the_kernel_names(inv: Any) -> None:
    drv = Mlx5DebugfsDriver(None, inv.hosts[1])  # type: ignore[arg-type]
    assert drv.folder() == "/sys/kernel/debug/mlx5/0000:3b:00.0/cc_params"
    cmd = drv.write_command(DcqcnSettings(),
                            DcqcnSettings(rpg_time_reset=150, min_time_between_cnps=4))
    # Only the two knobs that change are written, each with its debugfs name, between two
    # reads of every knob.
    assert "printf '%s\\n' 150 > rp_time_reset" in cmd
    assert "printf '%s\\n' 4 > np_min_time_between_cnps" in cmd
    assert cmd.count("printf") == 2
    assert cmd.count("grep -H . rp_clamp_tgt_rate rp_clamp_tgt_rate_ati") == 2
    assert "clamp_tgt_rate_after_time_inc" not in cmd


def test_mlx5_values_parse_and_bad_values_are_refused(inv: Any) -> None:
    drv = Mlx5DebugfsDriver(None, inv.hosts[1])  # type: ignore[arg-type]
    ok = "\n".join(f"{drv.names[k]}:{v}" for k, v in DcqcnSettings(rpg_gd=7).model_dump().items())
    assert drv.parse(ok + "\n").rpg_gd == 7
    with pytest.raises(ApplyError, match="rp_gd unreadable"):
        drv.parse(ok.replace("rp_gd:7", ""))
    with pytest.raises(ApplyError, match="holds 'x1'"):
        drv.parse(ok.replace("rp_gd:7", "rp_gd:x1"))
    with pytest.raises(ApplyError, match="out-of-range"):
        drv.parse(ok.replace("rp_gd:7", "rp_gd:99"))


def test_mlx5_counters_merge_ethtool_and_hw_counters(inv: Any) -> None:
    drv = Mlx5SysfsDriver(None, inv.hosts[0])  # type: ignore[arg-type]
    assert drv.counters_command().startswith("ethtool -S ens1f0np0 && echo ")
    assert "/srv/emu/host0/sys/class/infiniband/mlx5_0/ports/1/hw_counters" in \
        drv.counters_command()


def _sonic_counter_text() -> str:
    files = {"pfc": "sonic/show-pfc-counters.txt", "queue": "sonic/show-queue-counters.txt",
             "wred": "sonic/show-queue-wredcounters.txt", "pfcwd": "sonic/show-pfcwd-stats.txt"}
    return "".join(f"{_mark(k)}\n{sample(v)}" for k, v in files.items())


def test_sonic_counters_from_the_real_show_outputs(inv: Any) -> None:
    drv = SonicDriver(None, inv.switches[0])  # type: ignore[arg-type]
    got = drv.counters_from(_sonic_counter_text())
    assert sorted(got) == ["leaf0/Ethernet0", "leaf0/Ethernet4"]  # only inventory ports
    e0 = got["leaf0/Ethernet0"]
    assert e0["pfc0_rx_pkts"] == 1200  # "1,200" in show pfc counters
    assert e0["pfc3_rx_pkts"] == 203 and e0["pfc3_tx_pkts"] == 213
    assert e0["queue3_tx_pkts"] == 52 and e0["queue3_drop_pkts"] == 19
    assert e0["queue3_wred_drop_pkts"] == 52 and e0["queue3_ecn_marked_pkts"] == 19
    assert e0["pfcwd3_storm_detected"] == 1
    assert "queue10_tx_pkts" not in e0  # multicast queues are not the lossless queue


QUEUE_MARK = "==ecntune:queue-table=="
# CONFIG_DB QUEUE binding as in sonic-utilities tests/mock_tables/config_db.json
# (shared/reference/sonic/wred-profile-config-db-schema.txt), one key per port.
BOUND = {f"Ethernet{i}|3": {"scheduler": "[SCHEDULER|scheduler.1]",
                            "wred_profile": "AZURE_LOSSLESS"} for i in (0, 4, 8)}


def _sonic_read(queues: dict[str, Any], extra: str = "") -> str:
    """``read_command`` output: ecnconfig -l (the reference sample), mark, the QUEUE table."""
    return (sample("sonic/ecnconfig-l-show-ecn-single-profile.txt") + extra
            + f"{QUEUE_MARK}\n{json.dumps(queues, indent=4)}\n")


def _canary_profile(kmin: int, kmax: int, pmax: int) -> str:
    return ("Profile: ECNTUNE_CANARY\n-----------------------  -------\n"
            f"green_min_threshold      {kmin}\ngreen_max_threshold      {kmax}\n"
            f"green_drop_probability   {pmax}\necn                      ecn_all\n"
            "-----------------------  -------\n\n")


def test_sonic_reads_the_profile_the_canary_queues_use(inv: Any) -> None:
    drv = SonicDriver(None, inv.switches[0])  # type: ignore[arg-type]
    factory = EcnSettings(kmin_bytes=1048576, kmax_bytes=2097152, pmax_percent=5, enabled=True)
    assert drv.parse(_sonic_read(BOUND)) == factory
    # older releases store the binding as a reference: [WRED_PROFILE|AZURE_LOSSLESS]
    old = {k: {**v, "wred_profile": "[WRED_PROFILE|AZURE_LOSSLESS]"} for k, v in BOUND.items()}
    assert drv.parse(_sonic_read(old)) == factory
    canary = {**BOUND, **{f"Ethernet{i}|3": {"wred_profile": "ECNTUNE_CANARY"} for i in (0, 4)}}
    assert drv.parse(_sonic_read(canary, _canary_profile(100000, 400000, 10))) == EcnSettings(
        kmin_bytes=100000, kmax_bytes=400000, pmax_percent=10)
    assert drv.original_settings() == factory  # what a restore rebinds
    with pytest.raises(ApplyError, match="expected all 'AZURE_LOSSLESS' or all"):
        drv.parse(_sonic_read({**BOUND, "Ethernet0|3": {"wred_profile": "ECNTUNE_CANARY"}},
                              _canary_profile(100000, 400000, 10)))  # a half-done bind
    with pytest.raises(ApplyError, match="together with other ports"):
        drv.parse(_sonic_read({"Ethernet0,Ethernet4|3-4": {"wred_profile": "AZURE_LOSSLESS"}}))
    with pytest.raises(ApplyError, match="'AZURE_LOSSLESS' does not exist"):
        drv.parse(_sonic_read(BOUND).replace("AZURE_LOSSLESS", "OTHER"))
    with pytest.raises(ApplyError, match="did not run"):
        drv.parse(sample("sonic/ecnconfig-l-show-ecn-single-profile.txt"))


def test_sonic_clones_binds_then_moves_thresholds_and_rebinds_the_original(inv: Any) -> None:
    drv = SonicDriver(None, inv.switches[0])  # type: ignore[arg-type]
    cur = drv.parse(_sonic_read(BOUND))
    low = EcnSettings(kmin_bytes=100000, kmax_bytes=400000, pmax_percent=10)
    steps = drv.write_steps(cur, low)
    db = "sonic-db-cli CONFIG_DB"
    # unless the canary queues already use the clone: clone every field of AZURE_LOSSLESS,
    # then bind it to the canary ports' lossless queue only (Ethernet8 is not in the inventory)
    assert steps[0].startswith(f"{{ [ \"$({db} HGET 'QUEUE|Ethernet0|3' wred_profile)\" = "
                               f"ECNTUNE_CANARY ] || {{ {db} HSET 'WRED_PROFILE|ECNTUNE_CANARY' ")
    assert "yellow_max_threshold 2097152" in steps[0] and "ecn ecn_all" in steps[0]
    assert steps[0].endswith(f" && {db} HSET 'QUEUE|Ethernet0|3' wred_profile ECNTUNE_CANARY && "
                             f"{db} HSET 'QUEUE|Ethernet4|3' wred_profile ECNTUNE_CANARY; }}; }}")
    assert "Ethernet8" not in steps[0]
    # Lowering: -gmin first (one ecnconfig call with both would write gmax first); -gdrop
    # rides on the last call, which ecnconfig writes after the threshold.
    assert steps[1:] == ["ecnconfig -p ECNTUNE_CANARY -gmin 100000",
                         "ecnconfig -p ECNTUNE_CANARY -gmax 400000 -gdrop 10"]
    mid = EcnSettings(kmin_bytes=200000, kmax_bytes=800000, pmax_percent=10)
    assert drv.write_steps(low, mid)[1:] == ["ecnconfig -p ECNTUNE_CANARY -gmax 800000",
                                             "ecnconfig -p ECNTUNE_CANARY -gmin 200000"]
    # Back to the original's values: rebind the original, drop the clone, nothing else.
    assert drv.write_steps(low, cur) == [
        f"{db} HSET 'QUEUE|Ethernet0|3' wred_profile AZURE_LOSSLESS",
        f"{db} HSET 'QUEUE|Ethernet4|3' wred_profile AZURE_LOSSLESS",
        f"{db} DEL 'WRED_PROFILE|ECNTUNE_CANARY'"]
    assert "AZURE_LOSSLESS -g" not in drv.write_command(cur, low)  # never the shared profile
    assert drv.write_command(cur, low).startswith(drv.read_command() + " && echo ")
    with pytest.raises(ApplyError, match="on/off is not done by this driver"):
        drv.write_steps(cur, cur.model_copy(update={"enabled": False}))


def test_sonic_blast_radius_comes_from_the_switch_queue_table(inv: Any) -> None:
    drv = SonicDriver(None, inv.switches[0])  # type: ignore[arg-type]
    assert drv.reach(BOUND) == [("Ethernet0", 3), ("Ethernet4", 3)]
    uplink = {**BOUND, "Ethernet8|3": {"wred_profile": "ECNTUNE_CANARY"}}
    assert ("Ethernet8", 3) in drv.reach(uplink)
    shared = inv.switches[0].model_copy(update={"canary_profile": "AZURE_LOSSLESS"})
    assert ("Ethernet8", 3) in SonicDriver(None, shared).reach(BOUND)  # type: ignore[arg-type]


def test_sonic_poll_intervals_from_the_real_format() -> None:
    from tuner.drivers.sonic import parse_counterpoll

    poll = parse_counterpoll(fixture("sonic-counterpoll-show.txt"))
    assert poll["QUEUE_STAT"] == (10.0, True) and poll["PORT_STAT"] == (1.0, True)
    assert poll["WRED_ECN_QUEUE_STAT"] == (10.0, True)
    assert poll["QUEUE_WATERMARK_STAT"] == (60.0, True)  # "default (60000)"
    off = fixture("sonic-counterpoll-show.txt").replace(
        "WRED_ECN_QUEUE_STAT   10000               enable",
        "WRED_ECN_QUEUE_STAT   10000               disable")
    assert parse_counterpoll(off)["WRED_ECN_QUEUE_STAT"] == (10.0, False)


def test_sonic_pg_dynamic_threshold_from_the_real_formats() -> None:
    from tuner.drivers.sonic import parse_mmu, pg_buffer
    from tuner.emulated.switches import stock_buffers

    mmu = parse_mmu(fixture("sonic-mmuconfig-l.txt"))  # a T0's `mmuconfig -l`
    assert mmu["BUFFER_POOL"]["ingress_lossless_pool"] == {
        "mode": "dynamic", "size": "32732160", "type": "ingress", "xoff": "1622016"}
    assert mmu["BUFFER_PROFILE"]["pg_lossless_100000_300m_profile"]["dynamic_th"] == "0"
    # no BUFFER_PG row: the lossless PG profiles (those with xoff headroom) of mmuconfig count
    assert pg_buffer({}, mmu, ["Ethernet0"], 3) == {
        "pool": "ingress_lossless_pool", "pool_bytes": 32732160, "dynamic_th": 0,
        "source": "mmuconfig -l -> pg_lossless_100000_300m_profile"}
    # stock SN2700 CONFIG_DB: BUFFER_PG|<port>|3-4 names the profile; the xoff (30720 B of
    # headroom) plays no part, dynamic_th and the pool size do
    db = stock_buffers(["Ethernet0", "Ethernet4"])
    assert pg_buffer(db, mmu, ["Ethernet4"], 3) == {
        "pool": "ingress_lossless_pool", "pool_bytes": 4580864, "dynamic_th": 0,
        "source": "CONFIG_DB BUFFER_PG|Ethernet4|3-4 -> pg_lossless_100000_5m_profile"}
    # older releases' reference form; the lowest threshold over the canary ports wins
    db["BUFFER_PG"]["Ethernet0|3-4"] = {"profile": "[BUFFER_PROFILE|tight]"}
    db["BUFFER_PROFILE"]["tight"] = {"dynamic_th": "-2",
                                     "pool": "[BUFFER_POOL|ingress_lossless_pool]"}
    tight = pg_buffer(db, {}, ["Ethernet0", "Ethernet4"], 3)
    assert tight is not None and tight["dynamic_th"] == -2
    assert pg_buffer({"BUFFER_PG": {}}, {}, ["Ethernet4"], 3) is None  # nothing to go by
    # the dynamic buffer model (sonic-utilities' own vector): ingress pools carry no size
    dyn = parse_mmu(fixture("sonic-mmuconfig-l-dynamic-model.txt"))
    assert dyn["BUFFER_PROFILE"]["headroom_profile"]["xoff"] == "32768"
    assert pg_buffer({}, dyn, ["Ethernet0"], 3) is None


def test_sonic_cnp_queue_scheduler_follows_the_qos_maps(inv: Any) -> None:
    drv = SonicDriver(None, inv.switches[0])  # type: ignore[arg-type]
    db = {"PORT_QOS_MAP": {p: {"dscp_to_tc_map": "[DSCP_TO_TC_MAP|AZURE]",
                               "tc_to_queue_map": "AZURE"} for p in ("Ethernet0", "Ethernet4")},
          "DSCP_TO_TC_MAP": {"AZURE": {"48": "6", "26": "3"}},
          "TC_TO_QUEUE_MAP": {"AZURE": {"6": "6"}},
          "QUEUE": {"Ethernet0|6": {"scheduler": "[SCHEDULER|scheduler.0]"},
                    "Ethernet4|6": {"scheduler": "scheduler.1"}},
          "SCHEDULER": {"scheduler.0": {"type": "STRICT"}, "scheduler.1": {"type": "DWRR"}}}
    got = drv.cnp_schedulers(db, 48)
    assert got["Ethernet0"].startswith("STRICT") and got["Ethernet4"].startswith("DWRR")


def fixture(name: str) -> str:
    text = (FIXTURES / name).read_text()
    return text.split("\n", 1)[1] if text.startswith("# source:") else text


def _nv_tree(ports: dict[str, str], profiles: dict[str, dict[str, Any]]) -> str:
    """``nv config show -o json``: header, then the applied ``set`` tree."""
    tree = {"interface": {p: {"qos": {"congestion-control": {"profile": prof}}}
                          for p, prof in ports.items()},
            "qos": {"congestion-control": {name: {"traffic-class": {"3": row}}
                                           for name, row in profiles.items()}}}
    return json.dumps([{"header": {"rev-id": 1.0}}, {"set": tree}])


def _nv_read(tree: str, status: str | None = None) -> str:
    status = status or fixture("nvue-show-interface-qos-roce-status.txt")
    return f"{tree}\n==ecntune:port:swp1==\n{status}==ecntune:port:swp2==\n{status}"


def test_nvue_reads_exact_values_and_checks_the_display_within_its_precision(inv: Any) -> None:
    drv = NvueDriver(None, inv.switches[1])  # type: ignore[arg-type]
    # NVIDIA's status sample: the defaults 150000/1500000 B run (and show) as 153.00 KB and
    # 1.43 MB; the exact values come from the applied config
    row = {"min-threshold": 150000, "max-threshold": 1500000, "probability": 100}
    tree = _nv_tree({"swp1": "ECNTUNE_CANARY", "swp2": "ECNTUNE_CANARY"}, {"ECNTUNE_CANARY": row})
    assert drv.parse(_nv_read(tree)) == EcnSettings(kmin_bytes=150000, kmax_bytes=1500000,
                                                    pmax_percent=100)
    # default-global absent from the applied config: the documented defaults
    assert drv.original_settings() == EcnSettings(kmin_bytes=150000, kmax_bytes=1500000,
                                                  pmax_percent=100)
    bad = _nv_tree({"swp1": "ECNTUNE_CANARY", "swp2": "ECNTUNE_CANARY"},
                   {"ECNTUNE_CANARY": {**row, "min-threshold": 160000}})
    # 160000 B runs as 165888 B (18 steps of 9216 B), "162.00 KB": not what the port shows
    with pytest.raises(ApplyError, match=r"swp1 runs min-threshold 153.00 KB, but the applied "
                       r"config says 160000 B, which the ASIC runs as 165888 B \(rounded up to "
                       r"9216 B steps"):
        drv.parse(_nv_read(bad))
    with pytest.raises(ApplyError, match="expected all default-global or all ECNTUNE_CANARY"):
        drv.parse(_nv_read(_nv_tree({"swp1": "ECNTUNE_CANARY"}, {"ECNTUNE_CANARY": row})))


def test_nvue_human_units_compare_within_display_precision() -> None:
    from objectives.parsers._nvue import within_display

    # nvue-roce-show-qos-roce sample: 150000 B and 1500000 B print as 146.48 KB and 1.43 MB
    shown = parse_nvue(fixture("nvue-show-qos-roce.txt")).values
    assert within_display(150000, shown["congestion-control.min-threshold"].value or "")
    assert within_display(1500000, shown["congestion-control.max-threshold"].value or "")
    assert not within_display(151000, "146.48 KB") and not within_display(40001, "40000 B")
    assert human_bytes(150000) == "146.48 KB" and human_bytes(1500000) == "1.43 MB"


def test_nvue_operational_values_within_the_asic_step() -> None:
    """The port view (`nv show interface swp16 qos roce status` sample) shows 150000 B as
    "153.00 KB": Spectrum runs it rounded up to 64 cells of 144 B (156672 B)."""
    from tuner.drivers.nvue import ASIC_STEP, asic_runs, runs_as

    port = parse_nvue(fixture("nvue-show-interface-qos-roce-status.txt")).values
    assert ASIC_STEP == 9216 and asic_runs(150000) == 156672 and asic_runs(9216) == 9216
    assert runs_as(150000, port["congestion-control.min-threshold"].value or "")  # 153.00 KB
    assert runs_as(1500000, port["congestion-control.max-threshold"].value or "")  # 1.43 MB
    assert runs_as(150000, "146.48 KB")  # a view that shows the configured bytes
    # outside the step: 147456 B (one step below) and 160000 B (runs as 162.00 KB)
    assert not runs_as(147456, "153.00 KB") and not runs_as(160000, "153.00 KB")
    assert not runs_as(150000, "1.43 MB")


def test_nvue_writes_its_own_profile_and_unbinds_to_restore(inv: Any) -> None:
    drv = NvueDriver(None, inv.switches[1])  # type: ignore[arg-type]
    cur = drv.parse(_nv_read(_nv_tree({}, {})))
    new = EcnSettings(kmin_bytes=40000, kmax_bytes=200000, pmax_percent=100)
    pre = "nv set qos congestion-control ECNTUNE_CANARY traffic-class 3"
    tc0 = "nv set qos congestion-control ECNTUNE_CANARY traffic-class 0"
    bind = "qos congestion-control profile ECNTUNE_CANARY"
    assert drv.write_steps(cur, new) == [  # default-global's factory TC 0 comes along
        f"{tc0} ecn enable", f"{tc0} red disable", f"{tc0} min-threshold 150000",
        f"{tc0} max-threshold 1500000", f"{tc0} probability 100",
        f"{pre} min-threshold 40000", f"{pre} max-threshold 200000", f"{pre} probability 100",
        f"{pre} ecn enable", f"nv set interface swp1 {bind}", f"nv set interface swp2 {bind}",
        "nv config apply -y >&2"]
    assert "default-global" not in drv.write_command(cur, new)
    assert drv.write_steps(new, cur) == [
        "nv unset interface swp1 qos congestion-control",
        "nv unset interface swp2 qos congestion-control",
        "nv unset qos congestion-control ECNTUNE_CANARY", "nv config apply -y >&2"]
    assert drv.counters_command().count("nv show interface") == 2
    assert drv.reach(json.loads(_nv_tree({"swp9": "ECNTUNE_CANARY"}, {}))[1]["set"]) == [
        "swp1", "swp2", "swp9"]
    glob = inv.switches[1].model_copy(update={"canary_profile": "default-global"})
    assert NvueDriver(None, glob).reach({})[0].startswith("every port")  # type: ignore[arg-type]


def _global_with(tcs: dict[str, Any]) -> str:
    tree = {"interface": {}, "qos": {"congestion-control": {"default-global": {
        "traffic-class": tcs}}}}
    return json.dumps([{"header": {"rev-id": 1.0}}, {"set": tree}])


def test_nvue_canary_profile_copies_every_class_of_default_global(inv: Any) -> None:
    """default-global enables ECN on TC 0 (factory) and here on a storage class 1: the canary
    profile that replaces it on the canary ports carries both, then the tuned TC 3."""
    drv = NvueDriver(None, inv.switches[1])  # type: ignore[arg-type]
    storage = {"ecn": "enable", "min-threshold": 40000, "max-threshold": 400000,
               "probability": 50}
    cur = drv.parse(_nv_read(_global_with({"1": storage})))
    steps = drv.write_steps(cur, EcnSettings(kmin_bytes=40000, kmax_bytes=200000,
                                             pmax_percent=10))
    cc = "nv set qos congestion-control ECNTUNE_CANARY traffic-class"
    for tc, row in (("0", {"ecn": "enable", "min-threshold": 150000,
                           "max-threshold": 1500000, "probability": 100}), ("1", storage)):
        assert {f"{cc} {tc} {k} {v}" for k, v in row.items()} <= set(steps), tc
    assert steps.index(f"{cc} 1 ecn enable") < steps.index("nv config apply -y >&2")
    assert not [s for s in steps if "default-global" in s]  # nothing outside the canary


@pytest.mark.parametrize(("row", "field"), [
    ({"min-threshold": "lots"}, "min-threshold 'lots' is not a byte count"),
    ({"ecn": "on"}, "ecn 'on' is not enable|disable"),
    ({"probability": 120}, "probability 120 is not a percentage 0-100"),
    ({"min-threshold": 2000000}, "min-threshold 2000000 is not below max-threshold 1500000"),
])
def test_nvue_profile_that_cannot_be_cloned_is_bad_input(inv: Any, row: dict[str, Any],
                                                         field: str) -> None:
    from tuner.cli import EXIT_INPUT, exit_code_for

    drv = NvueDriver(None, inv.switches[1])  # type: ignore[arg-type]
    cur = drv.parse(_nv_read(_global_with({"2": row})))
    with pytest.raises(Exception, match="cannot clone") as err:
        drv.write_steps(cur, EcnSettings(kmin_bytes=40000, kmax_bytes=200000, pmax_percent=10))
    assert str(err.value) == (f"{inv.switches[1].name}: cannot clone congestion-control "
                              f"default-global traffic-class 2: {field}")
    assert exit_code_for(err.value) == EXIT_INPUT


def test_mlx5_counters_from_real_ethtool_and_hw_counters_output(inv: Any) -> None:
    drv = Mlx5SysfsDriver(None, inv.hosts[0])  # type: ignore[arg-type]
    eth = sample("mlx5-ethtool/cx4lx-discards-and-global-pause-grep.txt")
    shown = sample("mlx5-rdma-counters/show_counters-and-hw_counters-ls-bond-nonzero-ecn.txt")
    block = shown.split("Port 1 hw counters:\n", 1)[1].split("\n\n", 1)[0]
    row = drv.counters_from(f"{eth}{HW_COUNTERS_MARK}\n{block}\n")["host0/mlx5_0"]
    assert row["rx_steer_missed_packets"] == 24627  # from ethtool -S
    assert row["np_ecn_marked_roce_packets"] == 21278189006  # from hw_counters
    assert row["np_cnp_sent"] == 1052612505 and row["out_of_sequence"] == 1811101
    assert "rx_prio3_pause" not in row  # absent stays absent (not grep'ed here), never 0


def _nvue_block(relpath: str, command: str) -> str:
    """The output printed after ``cumulus@switch:~$ <command>`` in a documentation sample."""
    lines = sample(relpath).splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.rstrip().endswith(command))
    body = []
    for ln in lines[start + 1:]:
        if ln.startswith(("cumulus@", "## [annotation")) or ln.strip() == "...":
            break
        body.append(ln)
    return "\n".join(body) + "\n"


def test_nvue_counters_per_port_from_the_documented_output(inv: Any) -> None:
    drv = NvueDriver(None, inv.switches[1])  # type: ignore[arg-type]
    one = _nvue_block("cumulus-nvue/nvue-show-interface-counters-qos-doc.txt",
                      "nv show interface swp1 counters qos")
    text = "==ecntune:port:swp1==\n" + one + "==ecntune:port:swp2==\n" + one
    got = drv.counters_from(text)
    assert sorted(got) == ["leaf1/swp1", "leaf1/swp2"]
    row = got["leaf1/swp1"]
    assert row["pfc3_rx_pkts"] == 0 and row["pfc3_tx_pkts"] == 0
    assert row["queue3_wred_drop_pkts"] == 0 and row["ecn_marked_pkts"] == 0


def test_nvue_applied_config_as_a_list_or_a_bare_tree() -> None:
    from tuner.drivers.nvue import applied_tree

    tree = {"qos": {"congestion-control": {}}}
    assert applied_tree(json.dumps([{"header": {}}, {"set": tree}])) == tree
    assert applied_tree(json.dumps(tree)) == tree
    with pytest.raises(ApplyError, match="no 'set' section"):
        applied_tree("[]")
    with pytest.raises(ApplyError, match="printed no JSON"):
        applied_tree("Error: not allowed")


def test_a_clone_holding_the_original_values_still_gives_way_on_restore(inv: Any) -> None:
    drv = SonicDriver(None, inv.switches[0])  # type: ignore[arg-type]
    clone = _canary_profile(1048576, 2097152, 5)  # what a write that failed after binding left
    canary = {**BOUND, **{f"Ethernet{i}|3": {"wred_profile": "ECNTUNE_CANARY"} for i in (0, 4)}}
    cur = drv.parse(_sonic_read(canary, clone))
    assert cur == drv.original_settings() and drv.needs_write(cur, cur)
    assert drv.write_steps(cur, cur)[-1] == ("sonic-db-cli CONFIG_DB DEL "
                                             "'WRED_PROFILE|ECNTUNE_CANARY'")
    drv.parse(_sonic_read(BOUND))
    assert not drv.needs_write(cur, cur)  # on the original: nothing to do
    nv = NvueDriver(None, inv.switches[1])  # type: ignore[arg-type]
    row = {"min-threshold": 150000, "max-threshold": 1500000, "probability": 100}
    cur = nv.parse(_nv_read(_nv_tree({"swp1": "ECNTUNE_CANARY", "swp2": "ECNTUNE_CANARY"},
                                     {"ECNTUNE_CANARY": row})))
    assert nv.needs_write(cur, cur) and nv.write_steps(cur, cur)[0].startswith("nv unset")


class _Replies:
    """A runner answering the read command with the next of ``texts``."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)
        self.calls = 0

    def run(self, command: str, **_: Any) -> Any:
        self.calls += 1
        from types import SimpleNamespace

        return SimpleNamespace(stdout=self.texts.pop(0), status=0, stderr="")


def test_nvue_read_again_when_a_change_lands_between_config_and_status(
        inv: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Config and port status are two commands: an apply (or NVUE's confirm timer rolling one
    back) between them shows as a disagreement that the next read does not repeat."""
    import tuner.drivers.nvue as nvue

    monkeypatch.setattr(nvue, "REREAD_S", 0.0)
    row = {"min-threshold": 150000, "max-threshold": 1500000, "probability": 100}
    good = _nv_tree({"swp1": "ECNTUNE_CANARY", "swp2": "ECNTUNE_CANARY"}, {"ECNTUNE_CANARY": row})
    moved = _nv_tree({"swp1": "ECNTUNE_CANARY", "swp2": "ECNTUNE_CANARY"},
                     {"ECNTUNE_CANARY": {**row, "min-threshold": 160000}})
    runner = _Replies([_nv_read(moved), _nv_read(good)])
    drv = NvueDriver(runner, inv.switches[1])  # type: ignore[arg-type]
    assert drv.read().kmin_bytes == 150000 and runner.calls == 2
    # a disagreement that stays is the switch's: reported after REREADS reads
    runner = _Replies([_nv_read(moved)] * nvue.REREADS)
    drv = NvueDriver(runner, inv.switches[1])  # type: ignore[arg-type]
    with pytest.raises(ApplyError, match="swp1 runs min-threshold 153.00 KB"):
        drv.read()
    assert runner.calls == nvue.REREADS
