"""The switch side of ``diagnose``: its parsers on the vendors' samples
(docs/reference-notes/diagnose-formats.md), the pure checks, and the planted switch faults on an
emulated cluster of three SONiC switches and one Cumulus NVUE switch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.diagnose.test_parse import sample
from tests.faults.emu_helpers import experiment
from tuner.cli import main
from tuner.diagnose import switch
from tuner.diagnose import switch_parse as sp
from tuner.diagnose.switch import SwitchRead
from tuner.emulated import EmulatedCluster, sshd_available
from tuner.inventory import SwitchEntry


def test_sonic_parsers_on_sonic_utilities_samples() -> None:
    status = sp.sonic_status(sample("sonic-interfaces-status"))
    assert status is not None and len(status) == 5
    assert status["Ethernet0"] == sp.Port(oper="down", speed_mbps=25000)
    assert status["Ethernet28"].speed_mbps == 1000 and status["Ethernet16"].speed_mbps == 100
    assert status["Ethernet24"].oper == "up"  # "DPU-NPU Data Port": a cell with spaces
    counters = sp.sonic_counters(sample("sonic-interfaces-counters"))
    assert counters is not None
    assert (counters["Ethernet0"].rx_err, counters["Ethernet0"].tx_err) == (10, None)  # N/A
    assert counters["Ethernet8"].rx_err == 100
    multi = sp.sonic_counters(sample("sonic-interfaces-counters-multi-asic"))
    assert multi is not None and set(multi) == {"Ethernet0", "Ethernet4"}  # Reminder: ignored
    assert sp.sonic_version(sample("sonic-show-version")) == "SONiC.HEAD.1.2.0-7995b757b"
    assert sp.sonic_status("bash: show: command not found") is None
    assert sp.sonic_version("Error: No such command") is None


def test_nvue_parsers_on_nvue_reference_samples() -> None:
    link = sp.nvue_link(sample("nvue-interface-link"))
    assert link == sp.Port(oper="up", speed_mbps=1000, rx_err=0, tx_err=0, flaps=6)
    assert sp.nvue_build(sample("nvue-show-system")) == "Cumulus Linux 5.5.0"
    assert sp.nvue_link("Error: The requested item does not exist: interface swp9") is None
    assert sp.speed_mbps("auto") is None and sp.speed_mbps("400G") == 400000


def _sonic(name: str, ports: list[str]) -> SwitchEntry:
    return SwitchEntry(name=name, address="10.0.0.2", key_file="/k", platform="sonic",
                       canary_ports=ports)


def test_port_down_below_speed_missing_and_rising_errors() -> None:
    status = sample("sonic-interfaces-status")
    before = sample("sonic-interfaces-counters")
    after = before.replace("Ethernet8      N/A        6  1350.00 KB/s        N/A       100",
                           "Ethernet8      N/A        6  1350.00 KB/s        N/A       140")
    r = SwitchRead("leaf0", _sonic("leaf0", ["Ethernet0", "Ethernet8", "Ethernet16",
                                             "Ethernet24", "Ethernet99"]),
                   first={"status": status, "counters": before, "version": ""},
                   second={"counters": after}, sample_s=2.0)
    rows = switch.port_rows(r, want_mbps=1000)
    found = {(x.check, x.where): x for x in rows if type(x).__name__ == "Finding"}
    assert set(found) == {("switch_port", "leaf0/Ethernet0"),  # oper down
                          ("switch_port", "leaf0/Ethernet16"),  # 100M below 1G
                          ("switch_errors", "leaf0/Ethernet8")}  # RX_ERR 100 -> 140
    assert "oper down" in found["switch_port", "leaf0/Ethernet0"].evidence
    assert "RX_ERR 100 -> 140" in found["switch_errors", "leaf0/Ethernet8"].evidence
    assert all(f.dominant for f in found.values())
    skipped = {(x.check, x.where) for x in rows if type(x).__name__ == "NotChecked"}
    # Ethernet99 is not on the switch; Ethernet16/24 are in the status but not the counters
    assert ("switch_port", "leaf0/Ethernet99") in skipped
    assert ("switch_errors", "leaf0/Ethernet24") in skipped
    unread = SwitchRead("leaf0", _sonic("leaf0", ["Ethernet0"]),
                        first={"status": "bash: show: command not found"})
    assert [(x.check, type(x).__name__) for x in switch.port_rows(unread, 1000)] == [
        ("switch_port", "NotChecked")]


def test_sonic_flap_view_on_sonic_utilities_samples() -> None:
    """``show interfaces flap`` (202505 and later): ``Never`` is no flap recorded (0), and the
    stand-in switch renders the view byte for byte as sonic-utilities' own test expects."""
    from tuner.emulated.tools._fmt import simple_table

    assert sp.sonic_flaps(sample("sonic-interfaces-flap")) == {
        "Ethernet0": 5, "Ethernet4": 0, "Ethernet16": 0, "Ethernet20": 0}
    assert sp.sonic_flaps(sample("sonic-interfaces-flap-one-port")) == {"Ethernet64": 2}
    assert sp.sonic_flaps(sample("sonic-interfaces-status")) is None  # not the flap table
    head = ["Interface", "Flap Count", "Admin", "Oper", "Link Down TimeStamp(UTC)",
            "Link Up TimeStamp(UTC)"]
    rows = [["Ethernet0", "5", "Up", "Up", "Sat Jan 17 00:04:42 2025",
             "Sat Jan 18 00:08:42 2025"], ["Ethernet4", "Never", "Up", "Up", "Never", "Never"],
            *([p, "Never", "Unknown", "Unknown", "Never", "Never"]
              for p in ("Ethernet16", "Ethernet20"))]
    assert simple_table(head, rows) + "\n" == sample("sonic-interfaces-flap")
    assert simple_table(head, [["Ethernet64", "2", "Up", "Up", "Thu Feb 12 23:03:40 2026",
                                "Thu Feb 12 23:25:31 2026"]]) + "\n" == \
        sample("sonic-interfaces-flap-one-port")


def test_sonic_flaps_rising_and_a_release_without_the_view() -> None:
    status, counters = sample("sonic-interfaces-status"), sample("sonic-interfaces-counters")
    flap = sample("sonic-interfaces-flap")
    r = SwitchRead("leaf0", _sonic("leaf0", ["Ethernet0", "Ethernet4", "Ethernet8"]),
                   first={"status": status, "counters": counters, "flap": flap},
                   second={"counters": counters,
                           "flap": flap.replace("Ethernet0    5 ", "Ethernet0    7 ")},
                   sample_s=2.0)
    rows = switch.port_rows(r, want_mbps=1000)
    flaps = [x for x in rows if x.check == "switch_flaps"]
    assert [(type(x).__name__, x.where) for x in flaps] == [
        ("Finding", "leaf0/Ethernet0"), ("NotChecked", "leaf0/Ethernet8")]  # Ethernet4: 0 -> 0
    assert flaps[0].evidence == "show interfaces flap: Flap Count 5 -> 7 in 2.0 s"  # type: ignore
    assert flaps[1].reason == "the port is not in `show interfaces flap`"  # type: ignore
    # SONiC before 202505 (click's error, exit 2): not checked, never a silent "no flaps"
    old = ('Usage: show interfaces [OPTIONS] COMMAND [ARGS]...\nTry "show interfaces -h" for '
           'help.\n\nError: No such command "flap".\n')
    r.first["flap"] = r.second["flap"] = old
    flaps = [x for x in switch.port_rows(r, want_mbps=1000) if x.check == "switch_flaps"]
    assert {(type(x).__name__, x.where) for x in flaps} == {
        ("NotChecked", f"leaf0/{p}") for p in ("Ethernet0", "Ethernet4", "Ethernet8")}
    assert "`show interfaces flap` (SONiC 202505 and later) not readable: Usage: show" in \
        flaps[0].reason  # type: ignore[union-attr]


def _versioned(name: str, build: str) -> SwitchRead:
    return SwitchRead(name, _sonic(name, ["Ethernet0"]),
                      first={"version": f"\nSONiC Software Version: SONiC.{build}\n"})


def test_switch_os_table_and_drift() -> None:
    reads = [_versioned("a", "202505.1"), _versioned("b", "202505.1"),
             _versioned("c", "202411.3"), SwitchRead("d", _sonic("d", ["Ethernet0"]),
                                                     error="timed out")]
    rows, table = switch.os_rows(reads)
    assert table == {n: {"platform": "sonic", "os": f"SONiC.{b}"}
                     for n, b in (("a", "202505.1"), ("b", "202505.1"), ("c", "202411.3"))}
    assert [(x.check, x.where) for x in rows] == [("switch_os", "d"),
                                                  ("switch_os_drift", "c")]
    assert "2 of 3 sonic canary switches run SONiC.202505.1" in rows[1].evidence  # type: ignore
    tie, _ = switch.os_rows(reads[1:3])  # one each: no majority, both are named
    assert [x.where for x in tie] == ["b", "c"]
    same, _ = switch.os_rows(reads[:2])
    assert same == []


SWITCHES = [("leaf0", "sonic"), ("leaf1", "sonic"), ("leaf2", "sonic"), ("leaf3", "nvue")]


@pytest.fixture(scope="module")
def fabric(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmulatedCluster]:
    if not sshd_available():
        pytest.skip("/usr/sbin/sshd missing")
    from tuner.emulated.cluster import free_base_address

    emu = EmulatedCluster(tmp_path_factory.mktemp("switches"), hosts=4, switches=SWITCHES,
                          operator_fix=True, base_address=free_base_address(switches=4))
    emu.start()
    try:
        yield emu
    finally:
        emu.stop()


def _diagnose(emu: EmulatedCluster, tmp_path: Path) -> tuple[int, dict, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    exp = experiment(emu, tmp_path)
    res = CliRunner().invoke(main, ["diagnose", str(exp), "--sample-s", "0.5", "--bw-s", "0"])
    return res.exit_code, json.loads((tmp_path / "results" / "diagnosis.json").read_text()), \
        res.output


@pytest.mark.ssh
def test_planted_switch_faults_are_found_and_a_clean_fabric_has_none(
        fabric: EmulatedCluster, tmp_path: Path) -> None:
    fabric.reset()
    code, diag, out = _diagnose(fabric, tmp_path / "clean")
    assert code == 0 and diag["findings"] == [], out
    assert diag["switch_versions"] == {
        "leaf0": {"platform": "sonic", "os": "SONiC.202505.1"},
        "leaf1": {"platform": "sonic", "os": "SONiC.202505.1"},
        "leaf2": {"platform": "sonic", "os": "SONiC.202505.1"},
        "leaf3": {"platform": "nvue", "os": "Cumulus Linux 5.12.0"}}
    assert not any(n["check"].startswith("switch") for n in diag["not_checked"])
    assert "OS per switch" in out

    fabric.inject("leaf1", port_rx_errors={"Ethernet0": 40})
    fabric.inject("leaf3", port_rx_errors={"swp1": 25})
    fabric.inject("leaf2", os_version="202411.3")
    fabric.inject("leaf0", port_down=["Ethernet0"])
    fabric.inject("leaf2", port_flaps={"Ethernet0": 4})  # SONiC 202505: show interfaces flap
    fabric.inject("leaf3", port_flaps={"swp1": 4})
    code, diag, out = _diagnose(fabric, tmp_path / "planted")
    assert code == 1, out
    got = {(f["check"], f["where"]): f for f in diag["findings"]}
    switch_side = {k for k in got if k[0].startswith("switch")}
    assert switch_side == {("switch_port", "leaf0/Ethernet0"),
                           ("switch_errors", "leaf1/Ethernet0"),
                           ("switch_errors", "leaf3/swp1"), ("switch_os_drift", "leaf2"),
                           ("switch_flaps", "leaf2/Ethernet0"), ("switch_flaps", "leaf3/swp1")}
    assert got["switch_flaps", "leaf2/Ethernet0"]["evidence"].startswith(
        "show interfaces flap: Flap Count ")
    assert "carrier-transitions" in got["switch_flaps", "leaf3/swp1"]["evidence"]
    assert got["switch_port", "leaf0/Ethernet0"]["evidence"] == \
        "show interfaces status: oper down"
    assert "RX_ERR" in got["switch_errors", "leaf1/Ethernet0"]["evidence"]
    assert "in-errors" in got["switch_errors", "leaf3/swp1"]["evidence"]
    assert "SONiC.202411.3; 2 of 3 sonic canary switches run SONiC.202505.1" in \
        got["switch_os_drift", "leaf2"]["evidence"]
    # the cable's other end: host0 (on leaf0/Ethernet0) sees its link down too
    assert ("link_speed", "host0/ens1f0np0") in got


@pytest.mark.ssh
def test_a_port_below_the_nics_speed(fabric: EmulatedCluster, tmp_path: Path) -> None:
    fabric.reset()
    fabric.inject("leaf3", port_speed_gbps={"swp1": 40})
    code, diag, out = _diagnose(fabric, tmp_path)
    assert code == 1, out
    assert [(f["check"], f["where"], f["evidence"]) for f in diag["findings"]] == [
        ("switch_port", "leaf3/swp1",
         "nv show interface swp1 link: speed 40G; the canary hosts' nic_gbps 100")]
