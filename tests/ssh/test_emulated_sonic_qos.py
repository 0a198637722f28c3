"""Stock SONiC on the emulated cluster: the RoCE DSCP's queue, the operator's QoS fix, a
202411 switch without WRED/ECN queue counters, and a login in alias naming mode
(``config interface_naming_mode alias``: vendor port names, ``etp1``..., in every ``show``)
that changes nothing ecntune reads, since every ``show`` it runs names the default mode
(real sshd, stand-in SONiC CLIs that honour the mode as sonic-utilities does)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from safety.preflight import PreflightSpec, run_checks
from tuner.cluster.ssh import SshCluster
from tuner.diagnose.switch import first_parts
from tuner.diagnose.switch_parse import sonic_status
from tuner.emulated.cluster import EmulatedCluster
from tuner.errors import ConfigError
from tuner.inventory import load_inventory, parse_inventory
from tuner.preflight_facts import enable_counters, ssh_facts
from tuner.workload import Workload

pytestmark = pytest.mark.ssh
SPEC = PreflightSpec(error_sample_s=0, df_ping=False)
ROOT = Path(__file__).resolve().parents[2]
STOCK_HOP = "Ethernet0: DSCP 26 -> TC 1 (AZURE) -> queue 1 (AZURE); tuned queue 3; pfc_enable 3,4"


@pytest.fixture
def emu(emulated_cluster: EmulatedCluster) -> Iterator[EmulatedCluster]:
    yield emulated_cluster
    emulated_cluster.reset()


def _sonic_only(emu: EmulatedCluster) -> SshCluster:
    """One host and the SONiC switch (each target costs a round of tool starts)."""
    data = yaml.safe_load(Path(emu.inventory_path).read_text())
    data["hosts"] = data["hosts"][:1]
    data["switches"] = [s for s in data["switches"] if s["platform"] == "sonic"]
    return SshCluster(parse_inventory(data, str(emu.inventory_path)))


def _lines(c: SshCluster, check: str) -> dict[str, tuple[str, str]]:
    return {r.target: (r.status, r.evidence) for r in run_checks(ssh_facts(c, SPEC), SPEC)
            if r.check == check}


def test_stock_switch_is_refused_until_the_operator_fixes_the_dscp_map(
        emu: EmulatedCluster) -> None:
    emu.reset(operator_fix=False)  # the switch as qos_config.j2 leaves it
    assert emu.state("leaf0")["config_db"]["DSCP_TO_TC_MAP"]["AZURE"]["26"] == "1"
    with _sonic_only(emu) as c:
        stock = _lines(c, "roce_queue")
        assert stock["leaf0/Ethernet0"][0] == "fail"
        assert stock["leaf0/Ethernet0"][1].startswith(STOCK_HOP)
        assert emu.operator_qos_fix() == ["leaf0"]  # DSCP 26 -> TC 3, saved
        fixed = _lines(c, "roce_queue")
    assert fixed and {s for s, _ in fixed.values()} == {"pass"}
    saved = emu.state("leaf0")["saved_config_db"]["DSCP_TO_TC_MAP"]["AZURE"]
    assert saved["26"] == "3"  # survives a reboot, like `config save -y`


@pytest.mark.slow  # two CLI processes (~15 s)
def test_ecntune_preflight_exits_3_on_the_stock_map_and_0_once_fixed(
        emu: EmulatedCluster, tmp_path: Path) -> None:
    env = {**os.environ, "ECNTUNE_EMU_ROOT": str(emu.root)}
    cmd = [sys.executable, "-m", "tuner", "preflight", str(ROOT / "experiments" /
                                                          "emulated-ssh.yaml")]
    emu.reset(operator_fix=False)
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180,
                         check=False, cwd=tmp_path)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 3, out[-2000:]
    assert "roce_queue leaf0/Ethernet0: " + STOCK_HOP in out
    emu.operator_qos_fix()
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180,
                         check=False, cwd=tmp_path)
    assert res.returncode == 0, (res.stdout + res.stderr)[-2000:]


def test_a_202411_switch_reports_ecn_counters_absent_and_still_measures(
        emu: EmulatedCluster) -> None:
    with pytest.raises(ConfigError, match="sonic_release '202412' is not one of"):
        emu.play_release("leaf0", "202412")
    emu.play_release("leaf0", "202411")
    with _sonic_only(emu) as c:
        conn = c.pool["leaf0"]
        res = conn.run("show queue wredcounters", check=False)
        assert res.status == 2 and 'Error: No such command "wredcounters".' in res.stderr
        lines = _lines(c, "counters")
        assert lines["leaf0"][0] == "warn"
        assert lines["leaf0"][1].startswith("ECN counters absent (not zero): no `show queue "
                                            "wredcounters` on this switch (SONiC before 202505)")
        assert enable_counters(c) == []  # nothing to turn on: `counterpoll wredqueue` is absent
        after = c.counters()
    row = after.ports["leaf0/Ethernet0"]
    assert "queue3_drop_pkts" in row and "queue3_ecn_marked_pkts" not in row


@pytest.mark.slow  # one collective over the whole emulated cluster (~15 s)
def test_a_measurement_on_a_202411_switch_works_and_notes_the_absent_ecn_counters(
        emu: EmulatedCluster) -> None:
    emu.play_release("leaf0", "202411")
    tiny = Workload(parts=[{"kind": "collective", "op": "all_reduce", "size_bytes": 65536,
                            "iterations": 1}], time_limit_s=60)
    with SshCluster(load_inventory(emu.inventory_path)) as c:
        m = c.measure(tiny)
    assert m.collectives and m.collectives[0].busbw_gbytes_per_s > 0
    note = next(n for n in m.notes if n.startswith("leaf0/Ethernet0: counters absent"))
    assert "queue3_ecn_marked_pkts" in note
    assert m.counters.total("queue3_drop_pkts") == 0  # the queue counters are still read


@pytest.mark.slow  # two collectives over the emulated cluster (~15 s)
def test_cnp_queue_drops_under_load_are_a_failure(
        emu: EmulatedCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.emulated import state as st
    from tuner.experiment import load_experiment
    from tuner.preflight_facts import cnp_starvation

    monkeypatch.setenv("ECNTUNE_EMU_ROOT", str(emu.root))
    exp = load_experiment(ROOT / "experiments" / "emulated-ssh.yaml")
    tiny = Workload(parts=[{"kind": "collective", "op": "all_reduce", "size_bytes": 65536,
                            "iterations": 1}], time_limit_s=60)
    with SshCluster(load_inventory(emu.inventory_path)) as c:
        quiet = cnp_starvation(exp, c, [c.measure(tiny)])
        assert {(r.target, r.status) for r in quiet} == {("leaf0/Ethernet0", "pass"),
                                                         ("leaf0/Ethernet4", "pass")}
        emu.inject("leaf0", cnp_drops=200)  # a starved DWRR CNP queue under the load
        st.add_counters(emu.target_dir("leaf0"), {"Ethernet0": {"q6_watermark_bytes": 2704}})
        starved = cnp_starvation(exp, c, [c.measure(tiny)])
    bad = [r for r in starved if r.status == "fail"]
    assert [r.target for r in bad] == ["leaf0/Ethernet0", "leaf0/Ethernet4"]
    assert "drops under the baseline load, watermark 2704 B" in bad[0].evidence


@pytest.mark.slow  # `ecntune run` up to its baseline (~30 s)
def test_ecntune_run_stops_after_a_baseline_that_starves_the_cnp_queue(
        emu: EmulatedCluster, tmp_path: Path) -> None:
    with SshCluster(load_inventory(emu.inventory_path)) as c:
        before = c.snapshot()
    emu.inject("leaf0", cnp_drops=200)
    env = {**os.environ, "ECNTUNE_EMU_ROOT": str(emu.root)}
    res = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(ROOT / "experiments" / "emulated-ssh.yaml"),
         "--trials", "1", "--results", str(tmp_path / "results"), "--no-mlflow", "--quiet"],
        capture_output=True, text=True, env=env, timeout=240, check=False, cwd=tmp_path)
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode == 3, out[-2000:]
    assert "cnp_starvation" in out and "drops under the baseline load" in out
    with SshCluster(load_inventory(emu.inventory_path)) as c:
        assert c.snapshot() == before  # no trial ran


def test_a_login_in_alias_mode_changes_nothing_ecntune_reads(emu: EmulatedCluster) -> None:
    with pytest.raises(ConfigError, match="naming mode 'vendor' is not default or alias"):
        emu.set_naming_mode("leaf0", "vendor")
    emu.set_naming_mode("leaf0", "alias")
    with _sonic_only(emu) as c:
        conn = c.pool["leaf0"]
        ports = c.inventory.switches[0].canary_ports
        # What the operator sees: the login's mode renames every port (the test can tell).
        seen = conn.run("show pfc counters").stdout
        assert "etp1" in seen and "Ethernet0" not in seen
        # What ecntune reads: SONiC names, as in the inventory and CONFIG_DB.
        counters = c.counters()
        assert {f"leaf0/{p}" for p in ports} <= set(counters.ports)
        assert "pfc3_rx_pkts" in counters.ports[f"leaf0/{ports[0]}"]
        pfc = _lines(c, "pfc_priority")
        for p in ports:
            assert pfc[f"leaf0/{p}"] == ("warn", "lossless priorities [3, 4]; only 3 carries "
                                                 "RoCE")
        status = sonic_status(conn.run(first_parts(c.inventory.switches[0])["status"]).stdout)
        assert set(ports) <= set(status)
