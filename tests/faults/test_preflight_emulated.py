"""``ecntune preflight`` on the emulated cluster catches the three classic bring-up mistakes:
an MTU mismatch, PFC on the wrong priority and a storage job sharing the RoCE priority -- and
``ecntune run`` refuses to start on them, with nothing changed."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.faults.emu_helpers import experiment, off_baseline, read_canary
from tuner.cli import main
from tuner.emulated import state as st

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(180)]


def set_mtu(emu, host: str, mtu: int) -> None:
    tdir = emu.target_dir(host)
    with st.locked(tdir):
        s = st.load_state(tdir)
        s["mtu"] = mtu
        st.write_json(tdir / "state.json", s)


def mlnx_qos(emu, host: str, *args: str) -> None:
    """The operator's mistake, made with the (stand-in) tool itself on that host."""
    subprocess.run([str(emu.bin_dir / "mlnx_qos"), "-i", "ens1f0np0", *args],
                   env=emu.env(host), check=True, capture_output=True)


class StorageJob:
    """Traffic on the RoCE priority that is not ours: prio-3 packets keep arriving."""

    def __init__(self, emu, host: str) -> None:
        self.tdir = emu.target_dir(host)
        self.netdev = emu.state(host)["netdev"]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(0.02):
            st.add_counters(self.tdir, {self.netdev: {"rx_prio3_packets": 4000,
                                                      "rx_prio3_bytes": 4000 * 4096}})

    def __enter__(self) -> StorageJob:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def preflight(exp: Path) -> tuple[int, list[dict], str]:
    res = CliRunner().invoke(main, ["preflight", str(exp), "--json"])
    rows = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    return res.exit_code, rows, res.stderr


def test_clean_emulated_cluster_passes(emu, tmp_path: Path) -> None:
    code, rows, err = preflight(experiment(emu, tmp_path))
    assert code == 0, err
    assert not [r for r in rows if r["status"] == "fail"]
    assert {r["check"] for r in rows if r["status"] == "pass"} >= {
        "mtu", "pfc_priority", "dscp_trust", "link", "error_counters", "versions",
        "blast_radius", "shared_priority", "df_ping"}
    # NVUE (leaf1): the stock RoCE maps reach TC 3; the trials' confirm window is named
    by = {(r["check"], r["target"]): (r["status"], r["evidence"]) for r in rows}
    assert by[("roce_queue", "leaf1")][0] == "pass"
    status, why = by[("nvue_confirm", "leaf1")]
    assert status == "warn" and "--confirm 10`" in why and "up to 600 s per trial" in why


def test_mtu_mismatch_wrong_pfc_priority_and_shared_storage_job(emu, tmp_path: Path) -> None:
    hosts = emu.host_names
    set_mtu(emu, hosts[2], 1500)
    mlnx_qos(emu, hosts[1], "--pfc", "0,0,0,0,1,0,0,0")
    exp = experiment(emu, tmp_path)
    before = read_canary(emu)
    with StorageJob(emu, hosts[3]):
        code, rows, err = preflight(exp)
        run = CliRunner().invoke(main, ["run", str(exp), "--quiet", "--no-mlflow"])
    fails = {(r["check"], r["target"]): r["evidence"] for r in rows if r["status"] == "fail"}
    assert code == 3, err
    assert "MTU 1500, most common 9000" in fails[("mtu", hosts[2])]
    assert "priorities [4], not on the RoCE priority 3" in fails[("pfc_priority", hosts[1])]
    assert "another job (storage/backup?) shares the priority" in \
        fails[("shared_priority", hosts[3])]
    # the emulated hosts answer `ping` (tuner/emulated/tools/ping.py): the don't-fragment ping
    # at MTU 9000 into and out of the 1500-byte host fails too
    assert "mtu=1500" in fails[("df_ping", f"{hosts[2]}->{hosts[3]}")]
    assert set(fails) == {("mtu", hosts[2]), ("pfc_priority", hosts[1]),
                          ("shared_priority", hosts[3]), ("df_ping", f"{hosts[1]}->{hosts[2]}"),
                          ("df_ping", f"{hosts[2]}->{hosts[3]}")}
    # run refuses to start: exit 3, the three findings named, nothing applied or journalled
    assert run.exit_code == 3, run.stderr
    assert "preflight" in run.stderr and hosts[2] in run.stderr
    assert not (tmp_path / "results" / "journal.jsonl").exists()
    assert off_baseline(read_canary(emu), before) == []
