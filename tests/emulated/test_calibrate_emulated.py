"""``ecntune calibrate`` on the emulated cluster: its SONiC switches run a lossless pool of
4 MiB (planted: the physics and CONFIG_DB ``BUFFER_POOL`` agree), the twin is declared with a
buffer 40 % larger and rocesim's default PFC threshold; calibrate takes both from the switches
(``CONFIG_DB BUFFER_PG`` -> the lossless profile -> its pool), within 15 % as issue #24 asks
(exactly, as read); and the twin, declared with 200G NICs and 400G uplinks, takes the NICs'
100G from ``ethtool`` and the leaves' uplinks' 100G from CONFIG_DB ``PORT``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.tuner.test_calibrate import PARTS
from tuner.cli import main
from tuner.emulated import EmulatedCluster, sshd_available

PLANTED = 4 * 2**20
INCAST = {"pattern": "incast", "load": 1.0, "fan_in": 3, "priority": "roce"}


@pytest.fixture
def emu(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[EmulatedCluster]:
    """The emulated cluster, its switches' pool ``PLANTED`` (or the test's parameter)."""
    if not sshd_available():
        pytest.skip("/usr/sbin/sshd missing")
    from tuner.emulated.cluster import free_base_address

    cluster = EmulatedCluster(tmp_path / "emu", hosts=8, switches=[("leaf0", "sonic"),
                                                                   ("leaf1", "sonic")],
                              operator_fix=True, base_address=free_base_address(switches=2),
                              background=[INCAST],
                              buffer_bytes=getattr(request, "param", PLANTED))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _experiment(emu: EmulatedCluster, tmp_path: Path, declared: int) -> Path:
    exp = tmp_path / "calib.yaml"
    exp.write_text(f"""
name: calib
fabric: {{backend: ssh, inventory_file: {emu.inventory_path}}}
canary: {{switches: [leaf0]}}
workload:
  time_limit_s: 120
{PARTS}screen:
  fabric:
    backend: sim
    topology: {{kind: leaf_spine, leaves: 2, spines: 1, hosts_per_leaf: 4, nic_gbps: 200,
               uplink_gbps: 400, buffer_bytes: {declared}, dce_tcp_g_reading: kept}}
    max_time_us: 6000
    step_us: 250
tracking: {{enabled: false}}
results_dir: {tmp_path / "results"}
""")
    return exp


@pytest.mark.ssh
def test_calibrate_takes_the_planted_buffer_from_the_switches(emu: EmulatedCluster,
                                                              tmp_path: Path) -> None:
    declared = int(PLANTED * 1.4)
    exp = _experiment(emu, tmp_path, declared)
    r = CliRunner().invoke(main, ["calibrate", str(exp), "--replicates", "1"])
    assert r.exit_code == 0, r.output
    saved = json.loads((tmp_path / "results" / "twin-calibration.json").read_text())
    # the twin was declared with 200G NICs and 400G uplinks: ethtool and CONFIG_DB say 100G
    # and the link delay, which nothing reports, is fitted to the probes' p50: the stand-in's
    # 2.1 µs is the declared 1-µs twin's
    assert saved["overrides"] == {"buffer_bytes": PLANTED, "pfc_alpha_log2": 0, "nic_gbps": 100,
                                  "uplink_gbps": 100, "link_delay_us": 1.0}
    assert abs(saved["overrides"]["buffer_bytes"] / PLANTED - 1) <= 0.15
    assert saved["declared"] == {"buffer_bytes": declared, "pfc_alpha_log2": -3,
                                 "nic_gbps": 200, "uplink_gbps": 400, "link_delay_us": 1.0}
    assert saved["fitted"] == {"link_delay_us": 1.0}  # the gear reported the other four
    assert "CONFIG_DB BUFFER_PG|Ethernet0|3-4 -> pg_lossless_100000_5m_profile" in saved["source"]
    assert "the canary: CONFIG_DB BUFFER_PG" in r.output
    assert "the canary: ethtool Speed 100000Mb/s on 8 NICs" in r.output
    assert "the canary: CONFIG_DB PORT speed 100000Mb/s on 2 uplinks" in r.output


@pytest.mark.ssh
@pytest.mark.parametrize("emu", [3 * 2**30], indirect=True)
def test_a_reading_the_twin_cannot_take_is_named_and_nothing_is_saved(
        emu: EmulatedCluster, tmp_path: Path) -> None:
    """Switches that report a 3 GiB pool: the experiment file takes at most 2 GiB, so `run`
    would refuse the calibration file; calibrate says so and saves none."""
    exp = _experiment(emu, tmp_path, int(PLANTED * 1.4))
    r = CliRunner().invoke(main, ["calibrate", str(exp), "--replicates", "1"])
    assert r.exit_code == 2, r.output
    assert "the twin cannot take the calibration (buffer_bytes: Input should be less than or " \
           "equal to 2147483648" in r.stderr and "nothing was saved" in r.stderr, r.stderr
    assert not (tmp_path / "results" / "twin-calibration.json").exists()
