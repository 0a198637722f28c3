"""Red team H3's override: a safety limit past its bound is refused (exit 2, the bound named)
unless ``ecntune --i-know``, which prints each one and tags the MLflow parent run with it.
Finiteness never gives way, and ``recover`` (a restore, not a tuning run) is never blocked."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from tuner.cli import main
from tuner.experiment import Experiment

PAST = "  max_lossless_drops: 5000000\n  deadman_timeout_s: 7200\n"


def _file(tmp_path: Path, text: str, extra: str) -> Path:
    f = tmp_path / "tiny.yaml"
    f.write_text(text.replace("safety:\n", "safety:\n" + extra, 1))
    return f


def test_a_limit_past_its_bound_needs_i_know_and_is_logged(
        tiny: Callable[..., tuple[Experiment, str]], tmp_path: Path) -> None:
    exp, text = tiny(trials=1, confirm=0)
    f = _file(tmp_path, text, PAST)
    r = CliRunner().invoke(main, ["run", str(f), "--study", "k", "--quiet"])
    assert r.exit_code == 2, r.output
    assert "safety.max_lossless_drops" in r.output and "less than or equal to 1000000" in \
        r.output and "--i-know" in r.output

    r = CliRunner().invoke(main, ["--i-know", "run", str(f), "--study", "k", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "safety.max_lossless_drops = 5000000 (bound 1000000): past its bound" in r.output
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=exp.tracking_uri)
    (parent,) = [run for e in client.search_experiments() for run in client.search_runs(
        [e.experiment_id], "tags.`ecntune.role` = 'study'")]
    assert parent.data.tags["ecntune.i_know"] == (
        "safety.max_lossless_drops=5000000 (bound 1000000); "
        "safety.deadman_timeout_s=7200 (bound 3600)")
    assert parent.data.params["safety.max_lossless_drops"] == "5000000"
    # the flag is the command's: the next command without it is refused again
    r = CliRunner().invoke(main, ["preflight", str(f)])
    assert r.exit_code == 2 and "safety.deadman_timeout_s" in r.output, r.output
    # but a restore never waits for it
    r = CliRunner().invoke(main, ["recover", str(f)])
    assert r.exit_code == 0 and "no open change" in r.output, r.output


def test_i_know_never_accepts_an_infinite_limit(
        tiny: Callable[..., tuple[Experiment, str]], tmp_path: Path) -> None:
    _exp, text = tiny(trials=1, confirm=0)
    f = _file(tmp_path, text, "  storm_window_s: .inf\n")
    r = CliRunner().invoke(main, ["--i-know", "run", str(f), "--quiet"])
    assert r.exit_code == 2 and "safety.storm_window_s" in r.output
    assert "not a finite number" in r.output, r.output
