"""The diagnose parsers and pure checks on the public samples of
docs/reference-notes/diagnose-formats.md (read from the note itself, block by heading)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tuner.diagnose import checks, parse
from tuner.diagnose.collect import HostRead
from tuner.inventory import HostEntry

NOTE = Path(__file__).resolve().parents[2] / "docs/reference-notes/diagnose-formats.md"


def sample(name: str) -> str:
    text = NOTE.read_text()
    m = re.search(rf"^### sample: {re.escape(name)}\nsource: \S[^\n]*\n```\n(.*?)```$", text,
                  re.M | re.S)
    assert m, f"sample {name} (with its source line) missing from {NOTE}"
    return m.group(1)


def test_lspci_speed_downgraded() -> None:
    link = parse.parse_lspci(sample("lspci-speed-downgraded"))
    assert link is not None
    assert (link.cap_speed, link.cap_width, link.sta_speed, link.sta_width) == (5, 1, 2.5, 1)
    assert link.degraded and link.sta_line.endswith("Width x1 (ok)")


def test_lspci_link_down_and_devctl() -> None:
    link = parse.parse_lspci(sample("lspci-link-down"))
    assert link is not None and (link.sta_speed, link.sta_width) == (0, 0) and link.degraded
    assert (link.max_payload, link.max_read_req) == (128, 128)  # DevCtl's, not DevCap's 512


def test_lspci_ok_and_truncated() -> None:
    link = parse.parse_lspci(sample("lspci-ok"))
    assert link is not None and not link.degraded and link.max_read_req == 512
    # a post cut after LnkCap has no status: not parsed, so "not checked", never "healthy"
    assert parse.parse_lspci(sample("lspci-connectx6dx-head")) is None
    assert parse.parse_lspci("\tCapabilities: <access denied>\n") is None


def test_optics_samples() -> None:
    o = parse.parse_optics(sample("optics-qsfp28"))
    assert o is not None and len(o.rx_dbm) == 4 and o.low_dbm is None
    assert o.rx_dbm["Rcvr signal avg optical power(Channel 4)"] == -0.60
    t = parse.parse_optics(sample("optics-qsfp28") + sample("optics-thresholds"))
    assert t is not None and t.low_dbm == -0.85  # the warning threshold wins over the alarm
    one_lane = ("Rcvr signal avg optical power(Channel 1)  : 0.7682 mW / -1.15 dBm\n"
                "Rcvr signal avg optical power(Channel 2)  : 0.0000 mW / -inf dBm\n")
    o1 = parse.parse_optics(one_lane)
    assert o1 is not None and list(o1.rx_dbm.values()) == [-1.15]  # unused lanes dropped
    assert parse.parse_optics("Cannot get module EEPROM information: Operation not supported"
                              ) is None


def test_cpulists_gids() -> None:
    assert parse.parse_cpulist("0-3,8,10-11") == {0, 1, 2, 3, 8, 10, 11}
    assert parse.parse_cpulist("ff") is None
    nodes = parse.parse_node_cpulists("/sys/devices/system/node/node0/cpulist:0-15\n"
                                      "/sys/devices/system/node/node1/cpulist:16-31\n")
    assert nodes[1] == set(range(16, 32))
    assert parse.ipv4_gid("192.168.1.1") == "0000:0000:0000:0000:0000:ffff:c0a8:0101"
    assert parse.ipv4_gid("fe80::1") is None
    gids = parse.parse_gids("3 0000:0000:0000:0000:0000:ffff:c0a8:0101 RoCE v2\n")
    assert gids == [parse.Gid(3, "0000:0000:0000:0000:0000:ffff:c0a8:0101", "RoCE v2")]


def _read(**sections: str) -> HostRead:
    entry = HostEntry(name="h0", address="192.168.1.1", key_file="/k", netdev="ens1f0np0",
                      rdma_device="mlx5_0", pci="0000:3b:00.0", nic_gbps=100)
    return HostRead("h0", entry, sections=dict(sections))


@pytest.mark.parametrize(("name", "found"), [("lspci-speed-downgraded", True),
                                             ("lspci-ok", False)])
def test_pcie_check_on_samples(name: str, found: bool) -> None:
    rows = checks.pcie(_read(pcie=sample(name)))
    assert [type(r).__name__ for r in rows] == (["Finding"] if found else [])
    if found:
        assert "(downgraded)" in rows[0].evidence and rows[0].dominant  # type: ignore[union-attr]


def test_optics_check_flags_low_light_and_not_checked() -> None:
    healthy = sample("optics-qsfp28") + sample("optics-thresholds")  # all lanes above -0.85
    assert checks.optics(_read(optics=healthy)) == []
    low = ("Rcvr signal avg optical power(Channel 1)  : 0.7682 mW / -1.15 dBm\n"
           + sample("optics-thresholds"))
    rows = checks.optics(_read(optics=low))
    assert len(rows) == 1 and "-1.15 dBm below the module's low threshold -0.85 dBm" in \
        rows[0].evidence  # type: ignore[union-attr]
    nc = checks.optics(_read(optics="Cannot get module EEPROM information: Operation not "
                                    "supported"))
    assert type(nc[0]).__name__ == "NotChecked"


def test_numa_and_gid_checks() -> None:
    r = _read(numa="1", nodes="x/node0/cpulist:0-15\nx/node1/cpulist:16-31",
              irqs="99 16\n100 3\n", gids="3 0000:0000:0000:0000:0000:ffff:c0a8:0101 "
                                         "IB/RoCE v1\n5 0000:0000:0000:0000:0000:ffff:c0a8:0101 "
                                         "RoCE v2")
    numa = checks.numa(r)
    assert len(numa) == 1 and "1 of 2 mlx5_comp IRQs" in numa[0].evidence  # type: ignore
    gid = checks.gid(r)
    assert "gids/3" in gid[0].evidence and "index 5" in gid[0].evidence  # type: ignore
    assert "NCCL_IB_GID_INDEX=5" in gid[0].action  # type: ignore[union-attr]
    assert checks.numa(_read(numa="-1"))[0].reason.startswith("numa_node -1")  # type: ignore


LEGEND = "\nNIC Legend:\n\n" + "".join(f"  NIC{k}: mlx5_{k}\n" for k in range(9))  # its format


def test_topo_matrix_and_gpu_affinity_check() -> None:
    rows = sample("topo-h20-rows")
    topo = parse.parse_topo(rows + LEGEND)
    assert topo is not None and topo["mlx5_0"]["GPU0"] == "PIX"
    assert topo["mlx5_4"] == {"GPU0": "SYS", "GPU1": "SYS", "GPU2": "SYS", "GPU3": "PIX",
                              "GPU4": "SYS", "GPU5": "SYS"}
    assert set(parse.parse_topo(rows) or {}) >= {"NIC0", "NIC8"}  # no legend: column names
    assert parse.parse_topo("bash: nvidia-smi: command not found") is None
    assert checks.gpu_affinity(_read(gpu=rows + LEGEND)) == []  # mlx5_0: GPU0 is PIX
    far = _read(gpu=rows + LEGEND)
    far.entry = far.entry.model_copy(update={"rdma_device": "mlx5_8"})
    found = checks.gpu_affinity(far)
    assert len(found) == 1 and "best: SYS" in found[0].cause  # type: ignore[union-attr]
    unnamed = checks.gpu_affinity(_read(gpu=rows))
    assert type(unnamed[0]).__name__ == "NotChecked"
