"""``ecntune watch`` over SSH on the emulated cluster: it reads counters of every target of a
group, changes nothing, stays quiet on an idle fabric and flags a PFC storm that starts on
leaf0 (the emulator adds pause frames on every counter read)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.emulated import EmulatedCluster
from tuner.lifecycle.profile import load_profile

pytestmark = [pytest.mark.ssh, pytest.mark.slow, pytest.mark.timeout(180)]  # ~13 s

ROOT = Path(__file__).resolve().parents[2]


def _config_digest(emu: EmulatedCluster) -> str:
    """Every target's configuration state (settings files and switch config), hashed."""
    h = hashlib.sha256()
    for name in sorted(emu.targets):
        tdir = emu.target_dir(name)
        state = emu.state(name)
        state.pop("counters", None)
        h.update(repr(sorted(state.items())).encode())
        for p in sorted((tdir / "sys").rglob("*")) if (tdir / "sys").exists() else []:
            if p.is_file() and "hw_counters" not in p.parts and "statistics" not in p.parts:
                h.update(p.read_bytes())
    return h.hexdigest()


def test_watch_over_ssh_reads_only_and_flags_a_storm(emulated_cluster: EmulatedCluster,
                                                     tmp_path: Path) -> None:
    emu = emulated_cluster
    text = (ROOT / "experiments/emulated-ssh.yaml").read_text().replace(
        "${ECNTUNE_EMU_ROOT}/inventory.yaml", str(emu.inventory_path))
    exp = tmp_path / "emulated-ssh.yaml"
    exp.write_text(text + f"results_dir: {tmp_path / 'results'}\n")
    fast = ["--intervals", "3", "--interval-s", "0.2"]
    before = _config_digest(emu)

    rec = CliRunner().invoke(main, ["watch", str(exp), "--record", "--probe", *fast])
    assert rec.exit_code == 0, rec.output
    prof = load_profile(tmp_path / "results/traffic-profile.json")
    assert all(x > 0 for x in prof.samples["probe_p99_us"])  # ib_write_lat ran each interval
    quiet = CliRunner().invoke(main, ["watch", str(exp), *fast])
    assert quiet.exit_code == 0, quiet.output
    assert "ecntune watch: OK: mix unchanged" in quiet.output

    emu.inject("leaf0", pfc_storm=400)
    storm = CliRunner().invoke(main, ["watch", str(exp), *fast,
                                      "--textfile", str(tmp_path / "w.prom")])
    assert storm.exit_code == 5, storm.output
    assert "RETUNE ADVISED" in storm.output and "pfc3_rx_pkts" in storm.output
    assert _config_digest(emu) == before  # nothing but counters moved
