"""Driver command lines and parsing, on the real samples in shared/reference/ (no SSH)."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from tests.ssh.conftest import sample
from tuner.drivers import Mlx5DebugfsDriver, Mlx5SysfsDriver, NvueDriver, SonicDriver
from tuner.drivers._mlx5 import HW_COUNTERS_MARK
from tuner.drivers.sonic import _mark
from tuner.errors import ApplyError
from tuner.inventory import parse_inventory
from tuner.settings import NIC_KNOBS, DcqcnSettings, EcnSettings


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


def test_sonic_reads_the_green_fields_and_refuses_unknown_profiles(inv: Any) -> None:
    drv = SonicDriver(None, inv.switches[0])  # type: ignore[arg-type]
    text = sample("sonic/ecnconfig-l-show-ecn-single-profile.txt")
    assert drv.parse(text) == EcnSettings(kmin_bytes=1048576, kmax_bytes=2097152,
                                                  pmax_percent=5, enabled=True)
    with pytest.raises(ApplyError, match="'AZURE_LOSSLESS' does not exist"):
        drv.parse(text.replace("AZURE_LOSSLESS", "OTHER"))


def test_sonic_writes_one_ecnconfig_call_per_threshold_in_safe_order(inv: Any) -> None:
    drv = SonicDriver(None, inv.switches[0])  # type: ignore[arg-type]
    cur = EcnSettings(kmin_bytes=1048576, kmax_bytes=2097152, pmax_percent=5)
    low = EcnSettings(kmin_bytes=100000, kmax_bytes=400000, pmax_percent=10)
    # Lowering: -gmin first (one ecnconfig call with both would write gmax first); -gdrop
    # rides on the last call, which ecnconfig writes after the threshold.
    assert drv.write_steps(cur, low) == ["ecnconfig -p AZURE_LOSSLESS -gmin 100000",
                                         "ecnconfig -p AZURE_LOSSLESS -gmax 400000 -gdrop 10"]
    assert drv.write_steps(low, cur) == ["ecnconfig -p AZURE_LOSSLESS -gmax 2097152",
                                         "ecnconfig -p AZURE_LOSSLESS -gmin 1048576 -gdrop 5"]
    assert drv.write_steps(cur, cur.model_copy(update={"pmax_percent": 7})) == [
        "ecnconfig -p AZURE_LOSSLESS -gdrop 7"]
    assert drv.write_steps(cur, cur) == []
    # The whole write is one remote command: state before, the writes, state after.
    assert drv.write_command(cur, low).split(" && ") == [
        "ecnconfig -l", "echo ==ecntune:before-write==",
        "ecnconfig -p AZURE_LOSSLESS -gmin 100000",
        "ecnconfig -p AZURE_LOSSLESS -gmax 400000 -gdrop 10",
        "echo ==ecntune:after-write==", "ecnconfig -l"]
    with pytest.raises(ApplyError, match="on/off is not done by this driver"):
        drv.write_steps(cur, cur.model_copy(update={"enabled": False}))


def test_nvue_write_stages_then_applies_then_reads_back(inv: Any) -> None:
    drv = NvueDriver(None, inv.switches[1])  # type: ignore[arg-type]
    cur = EcnSettings(kmin_bytes=150000, kmax_bytes=1500000, pmax_percent=100)
    new = EcnSettings(kmin_bytes=40000, kmax_bytes=200000, pmax_percent=100)
    pre = "nv set qos congestion-control default-global traffic-class 3"
    assert drv.write_steps(cur, new) == [
        f"{pre} min-threshold 40000", f"{pre} max-threshold 200000", "nv config apply -y >&2"]
    assert drv.write_steps(new, new.model_copy(update={"enabled": False}))[-2:] == [
        f"{pre} ecn disable", "nv config apply -y >&2"]
    assert drv.write_steps(new, new) == []
    assert drv.counters_command().count("nv show interface") == 2


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


def test_nvue_reads_one_traffic_class_from_the_documented_output(inv: Any) -> None:
    sw = inv.switches[1].model_copy(update={"lossless_queue": 4})
    drv = NvueDriver(None, sw)  # type: ignore[arg-type]
    text = _nvue_block("cumulus-nvue/nvue-ecn-pfc-pfcwd-set-and-show-cl512-doc.txt",
                       "nv show qos congestion-control default-global traffic-class 4")
    assert drv.parse(text) == EcnSettings(kmin_bytes=40000, kmax_bytes=200000,
                                                  pmax_percent=100, enabled=True)
    profile = _nvue_block("cumulus-nvue/nvue-ecn-pfc-pfcwd-set-and-show-cl512-doc.txt",
                          "nv show qos congestion-control default-global")
    assert drv.parse(profile).kmax_bytes == 200000
    with pytest.raises(ApplyError, match="shows no"):
        NvueDriver(None, inv.switches[1]).parse(profile)  # type: ignore[arg-type]


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
