"""``ecntune diagnose`` on the emulated cluster over real SSH: each planted host fault is found
and named with its evidence, on the right host and nowhere else; the clean cluster gives no
finding; a missing tool is "not checked"; an unreachable host is a finding; exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.faults.emu_helpers import experiment
from tuner.cli import main
from tuner.emulated import EmulatedCluster, sshd_available

pytestmark = [pytest.mark.ssh, pytest.mark.skipif(
    not sshd_available(), reason="/usr/sbin/sshd missing (apt-get install openssh-server)")]


def run_cli(exp: Path, *extra: str) -> tuple[int, dict, str]:
    res = CliRunner().invoke(main, ["diagnose", str(exp), "--sample-s", "0.5", "--bw-s", "1",
                                      *extra])
    out = exp.parent / "results" / "diagnosis.json"
    return res.exit_code, json.loads(out.read_text()) if out.exists() else {}, res.output


def test_clean_cluster_gives_no_finding(emulated_cluster: EmulatedCluster,
                                        tmp_path: Path) -> None:
    code, diag, out = run_cli(experiment(emulated_cluster, tmp_path))
    assert code == 0, out
    assert diag["findings"] == [] and diag["backend"] == "ssh"
    # what the emulated hosts cannot show is listed, never taken for healthy
    skipped = {(n["check"], n["where"]) for n in diag["not_checked"]}
    assert {("gpu_nic_affinity", h) for h in emulated_cluster.host_names} <= skipped
    assert {("optics", h) for h in emulated_cluster.host_names} <= skipped
    assert set(diag["switch_versions"]) == set(emulated_cluster.switch_names)
    assert not any(c.startswith("switch") for c, _ in skipped)  # the switches were read
    assert {"pcie_link", "numa_irq", "gid", "mtu_path", "crc_errors", "fec"}.isdisjoint(
        c for c, _ in skipped)
    assert set(diag["versions"]) == set(emulated_cluster.host_names)
    assert "no finding" in out


def test_every_planted_fault_is_found_where_it_is(emulated_cluster: EmulatedCluster,
                                                  tmp_path: Path) -> None:
    emu = emulated_cluster
    emu.inject("host0", pcie_width=8, crc_errors=200)
    emu.inject("host1", numa_wrong=True, fec_off=True, firmware="22.39.1002")
    emu.inject("host2", link_flaps=4, gid_v1=True)
    emu.set_qos("host3", mtu=1500)
    code, diag, out = run_cli(experiment(emu, tmp_path))
    assert code == 1, out
    got = {(f["check"], f["where"]): f for f in diag["findings"]}
    assert set(got) == {
        ("pcie_link", "host0/0000:3b:00.0"), ("crc_errors", "host0/ens1f0np0"),
        ("numa_irq", "host1/ens1f0np0"), ("fec", "host1/ens1f0np0"),
        ("firmware_drift", "host1"), ("flaps", "host2/ens1f0np0"), ("gid", "host2/mlx5_0"),
        # host3 at MTU 1500: host2's jumbo ping to it is dropped, its own fails locally
        ("mtu_path", "host2->host3"), ("mtu_path", "host3->host0")}
    assert "Width x8 (downgraded)" in got["pcie_link", "host0/0000:3b:00.0"]["evidence"]
    assert "rx_crc_errors_phy +" in got["crc_errors", "host0/ens1f0np0"]["evidence"]
    assert "on other CPUs: irq 99 -> 17" in got["numa_irq", "host1/ens1f0np0"]["evidence"]
    assert "Active FEC encoding: Off" in got["fec", "host1/ens1f0np0"]["evidence"]
    assert "22.39.1002" in got["firmware_drift", "host1"]["evidence"]
    assert "carrier_changes" in got["flaps", "host2/ens1f0np0"]["evidence"]
    assert "(IB/RoCE v1)" in got["gid", "host2/mlx5_0"]["evidence"]
    assert "mtu=1500" in got["mtu_path", "host3->host0"]["evidence"]
    assert "100% packet loss" in got["mtu_path", "host2->host3"]["evidence"]
    dominant = {k[0] for k, f in got.items() if f["dominant"]}
    assert dominant == {"pcie_link", "crc_errors", "mtu_path"}
    layers = [f["layer"] for f in diag["findings"]]
    assert layers == sorted(layers, key=["physical", "host", "ip", "rdma", "fabric",
                                         "collectives"].index)  # bottom-up


def test_a_pcie_link_that_caps_a_single_qp_is_found_by_ib_write_bw(
        emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    emu = emulated_cluster
    # Gen4 x4 carries 58 Gb/s of a 100G NIC; x8 (115 Gb/s, host0) is degraded but does not cap
    emu.inject("host1", pcie_width=4)
    emu.inject("host0", pcie_width=8)
    code, diag, out = run_cli(experiment(emu, tmp_path))
    assert code == 1, out
    bw = [f for f in diag["findings"] if f["check"] == "single_qp_bw"]
    assert [(f["where"], f["layer"], f["dominant"]) for f in bw] == [
        ("host1/mlx5_0", "rdma", True)]
    assert "host0/mlx5_0 -> host1/mlx5_0 57.61 Gb/s of 100 (58 %)" in bw[0]["evidence"]
    assert "host1/mlx5_0 -> host2/mlx5_0 57.61 Gb/s" in bw[0]["evidence"]
    assert {f["where"] for f in diag["findings"] if f["check"] == "pcie_link"} == {
        "host0/0000:3b:00.0", "host1/0000:3b:00.0"}
    for h in emu.host_names:  # each host served one flow and sent one, one QP, no rate limit
        runs = emu.commands(h, "ib_write_bw")
        assert len(runs) == 2 and all("-q" in a and "--rate_limit" not in " ".join(a)
                                      for a in runs), runs


def test_missing_tool_not_checked_unreachable_is_finding(emulated_cluster: EmulatedCluster,
                                                         tmp_path: Path) -> None:
    emu = emulated_cluster
    exp = experiment(emu, tmp_path)
    emu.inject("host0", exit_code={"lspci": 127, "ib_write_bw": 1},
               pcie_width=8)  # the x8 link is not seen...
    emu.stop_target("host3")
    code, diag, out = run_cli(exp, "--load")
    assert code == 1, out
    # a load that cannot start is said, the window is then idle
    assert [n["reason"][:40] for n in diag["not_checked"] if n["check"] == "crc_under_load"] \
        == ["ib_write_bw load could not start: perfte"]
    found = {(f["check"], f["where"]) for f in diag["findings"]}
    assert ("reachable", "host3") in found
    assert not any(c == "pcie_link" for c, _ in found)  # ... and not called healthy either:
    assert any(n["check"] == "pcie_link" and n["where"] == "host0"
               for n in diag["not_checked"])
    for h in emu.host_names:
        emu.stop_target(h)
    code, diag, out = run_cli(exp)
    assert code == 3, out
    assert {f["check"] for f in diag["findings"]} == {"reachable"}
    assert "could not check" in out


def test_load_runs_flows_during_the_counter_window(emulated_cluster: EmulatedCluster,
                                                   tmp_path: Path) -> None:
    emu = emulated_cluster
    emu.inject("host1", crc_errors=100)
    exp = experiment(emu, tmp_path)
    res = CliRunner().invoke(main, ["diagnose", str(exp), "--sample-s", "1", "--load",
                                      "--bw-s", "0"])
    assert res.exit_code == 1, res.output
    diag = json.loads((tmp_path / "results" / "diagnosis.json").read_text())
    crc = [f for f in diag["findings"] if f["check"] == "crc_errors"]
    assert [f["where"] for f in crc] == ["host1/ens1f0np0"]
    assert "under ib_write_bw load (4 flows)" in crc[0]["evidence"]
    for h in emu.host_names:  # each host served one flow and sent one (-D: timed, line rate)
        runs = emu.commands(h, "ib_write_bw")
        assert len(runs) == 2 and all("-D" in argv for argv in runs), runs
    assert not any(n["check"] == "crc_under_load" for n in diag["not_checked"])
