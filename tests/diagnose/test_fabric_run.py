"""``ecntune run`` does not tune around an ECMP collision (#23): it refuses with exit 3 and the
finding on screen, goes ahead with ``--accept-findings`` and stores the findings with the study
(``show`` lists them), and a clean fabric runs with no finding."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tuner.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _run(name: str, results: Path, *extra: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["run", str(ROOT / "experiments" / name), "--quiet",
                                    "--no-mlflow", "--trials", "1", "--results", str(results),
                                    *extra])
    return res.exit_code, res.output


def _show(results: Path) -> str:
    res = CliRunner().invoke(main, ["show", "--results", str(results)])
    assert res.exit_code == 0, res.output
    return res.output


def test_run_refuses_a_planted_ecmp_collision(tmp_path: Path) -> None:
    code, out = _run("ecmp-collision.yaml", tmp_path)
    assert code == 3, out
    assert "fabric/ecmp_balance on leaf0" in out and "leaf1/Ethernet20" in out.replace("\n", "")
    assert "refusing to tune" in out and "--accept-findings" in out
    assert not (tmp_path / "optuna.db").exists()  # no study was started


def test_accepted_findings_are_stored_with_the_study(tmp_path: Path) -> None:
    code, out = _run("ecmp-collision.yaml", tmp_path, "--accept-findings")
    assert code == 0, out
    shown = _show(tmp_path).replace("\n", "")
    assert "findings the study ran under: 2 (run with --accept-findings)" in shown
    assert "fabric/ecmp_balance on leaf0 [dominant" in shown
    from tuner.report import load, markdown

    md = markdown(load(None, f"sqlite:///{tmp_path}/optuna.db"), {})
    assert "findings the study ran under: 2" in md and "- fabric/ecmp_balance on leaf1" in md


def test_clean_fabric_runs_with_no_finding(tmp_path: Path) -> None:
    code, out = _run("ecmp-collision-fixed.yaml", tmp_path)
    assert code == 0, out
    assert "finding:" not in out
    assert "findings the study ran under: none" in _show(tmp_path)
