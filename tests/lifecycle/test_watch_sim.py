"""``ecntune watch`` on the simulated backend (slow: ~15 s of rocesim runs).

The new-cluster.yaml fabric and settings, its AllReduce-heavy workload as the production
traffic the profile is recorded on; then the same mix (fresh seeds: quiet) and moe-mix.yaml's
AlltoAll + storage-incast workload (flagged)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.lifecycle.profile import load_profile

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("watch")
    exp = d / "new-cluster.yaml"
    text = (ROOT / "experiments/new-cluster.yaml").read_text()
    exp.write_text(text + f"results_dir: {d / 'results'}\n")
    shutil.copy(ROOT / "experiments/moe-mix.yaml", d / "moe-mix.yaml")
    res = CliRunner().invoke(main, ["watch", str(exp), "--record", "--intervals", "4"])
    assert res.exit_code == 0, res.output
    return exp, d


@pytest.mark.slow
def test_record_writes_the_profile(recorded: tuple[Path, Path]) -> None:
    exp, d = recorded
    prof = load_profile(d / "results/traffic-profile.json")
    assert prof.study == "new-cluster" and prof.n == 4
    assert {"queue3_ecn_marked_pkts", "np_cnp_sent", "tx_prio3_bytes",
            "rx_prio3_pause_duration", "probe_p99_us"} <= set(prof.samples)
    assert prof.settings["kmin_bytes"] == 1_048_576  # the fabric's live (vendor) settings


@pytest.mark.slow
def test_unchanged_mix_stays_quiet(recorded: tuple[Path, Path]) -> None:
    exp, d = recorded
    prom = d / "quiet.prom"
    res = CliRunner().invoke(main, ["watch", str(exp), "--intervals", "4",
                                    "--textfile", str(prom)])
    assert res.exit_code == 0, res.output
    assert "ecntune watch: OK: mix unchanged" in res.output
    assert "ecntune_watch_retune_advised{study=\"new-cluster\"} 0.0" in prom.read_text()


@pytest.mark.slow
def test_moe_mix_is_flagged(recorded: tuple[Path, Path]) -> None:
    exp, d = recorded
    prom = d / "moe.prom"
    res = CliRunner().invoke(main, ["watch", str(exp), "--intervals", "4", "--traffic",
                                    str(d / "moe-mix.yaml"), "--textfile", str(prom)])
    assert res.exit_code == 5, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("ecntune watch: RETUNE ADVISED: traffic mix moved:")
    # The AlltoAll + storage incast marks where the AllReduce mix never did.
    assert "queue3_ecn_marked_pkts" in last and "np_cnp_sent" in last
    assert "ecntune_watch_retune_advised{study=\"new-cluster\"} 1.0" in prom.read_text()


def test_missing_profile_is_bad_input(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["watch", str(ROOT / "experiments/new-cluster.yaml"),
                                    "--profile", str(tmp_path / "no.json")])
    assert res.exit_code == 2
    assert "no.json: cannot read traffic profile" in res.output
