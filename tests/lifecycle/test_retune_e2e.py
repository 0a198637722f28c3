"""The issue's flow end to end on the simulated backend, as an operator types it (slow: ~3 min).

``ecntune run experiments/new-cluster.yaml`` then ``ecntune retune --from <its results>
experiments/moe-mix.yaml`` with moe-mix.yaml's own budget, both logging to MLflow's default
store (sqlite next to the old study's Optuna database; the re-tune logs there too). Only the
results folders are redirected. new-cluster runs 3 proposals: its AllReduce mix never builds a
canary queue of 5 KB, the lowest Kmin in the space, so no setting can differ from the vendor
defaults there (docs/lifecycle.md) and a longer budget changes nothing.

Asserted: the two parent runs share one store and are linked by tag; the CLI shows the old
choice on the new mix, a confirmed re-tune winner and the recovered busbw with its 95 %
interval; MLflow's metrics and summary.json carry the same numbers. moe-mix is multi-objective
(busbw up, p99 down): on this study's placements the winner is confirmed on p99 (its interval
below 0: 49.9 -> 28.2 µs at the study level) while its busbw change, +1.5 % [-14.2, +20.0], is
not significant; the recovered number says so rather than claiming a gain."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tuner import optuna_io
from tuner.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
INTERVAL = r"([+-]\d+\.\d) % \(95 % interval ([+-]\d+\.\d) % to ([+-]\d+\.\d) %, (\d+) "


def _study(results: Path) -> Any:
    url = f"sqlite:///{results / 'optuna.db'}"
    return optuna_io.load_study(optuna_io.study_names(url)[-1], url)


def _parent(client: Any, study: str) -> Any:
    exps = [x.experiment_id for x in client.search_experiments()]
    runs = client.search_runs(exps, filter_string=f"tags.`ecntune.study` = '{study}'")
    return next(r for r in runs if "mlflow.parentRunId" not in r.data.tags)


def test_new_cluster_then_retune_on_moe_mix(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    old_dir, new_dir = tmp_path / "new-cluster", tmp_path / "moe-mix"
    first = CliRunner().invoke(main, ["run", str(ROOT / "experiments/new-cluster.yaml"),
                                      "--trials", "3", "--results", str(old_dir), "--quiet",
                                      "--study", "new-cluster-e2e"])
    assert first.exit_code == 0, first.output
    assert "nothing beat the baseline" in first.output
    res = CliRunner().invoke(main, ["retune", "--from", str(old_dir),
                                    str(ROOT / "experiments/moe-mix.yaml"),
                                    "--results", str(new_dir), "--quiet",
                                    # a named study: its confirmation placements are drawn
                                    # from the name, so the test measures the same ones
                                    "--study", "moe-mix-e2e"])
    assert res.exit_code == 0, res.output
    old, new = _study(old_dir), _study(new_dir)
    out = res.output[res.output.index("re-tune of study"):]
    assert out.startswith(f"re-tune of study {old.study_name} as {new.study_name}"), out

    # What the old study chose, and that choice under the new mix: it is what runs now.
    assert "  old choice: its baseline: nothing beat it on its own mix" in out, out
    assert "old choice on the new mix: it is what runs now (trial 0" in out, out
    # The re-tune's confirmed winner and what it recovered, both paired, intervals above 0.
    win = re.search(r"re-tune winner \(trial (\d+)\): .*vs the deployed settings busbw "
                    + INTERVAL, out)
    rec = re.search(r"recovered by the re-tune \(new winner vs old choice, same replicates\): "
                    + INTERVAL, out)
    assert win and rec, out
    # the old choice is the baseline: the winner's change and the recovered one are the same
    assert win.groups()[1:4] == rec.groups()[:3] and int(rec[4]) >= 8, out
    conf = new.user_attrs["confirmation"]
    assert conf["winner"] == int(win[1])
    assert float(rec[2]) < 0 < float(rec[3]), out  # busbw: not significant here, and said so

    # MLflow: one store (the old study's default), two parent runs linked by tag.
    store = f"sqlite:///{old_dir / 'mlflow.db'}"
    assert f"in {store} (metrics retune_*" in out and "in the same store" in out, out
    assert not (new_dir / "mlflow.db").exists()
    client = MlflowClient(tracking_uri=store)
    old_run, run = _parent(client, old.study_name), _parent(client, new.study_name)
    tags = run.data.tags
    assert tags["ecntune.retuned_from"] == old.study_name
    assert tags["ecntune.retuned_from_run"] == old_run.info.run_id
    assert tags["ecntune.retuned_from_choice"] == "baseline"
    m = run.data.metrics
    assert m["retune_old_is_baseline"] == 1.0 and m["retune_old_busbw_norm"] > 0
    assert f"{m['retune_recovered_percent']:+.1f}" == rec[1]
    assert (f"{m['retune_recovered_ci95_low']:+.1f}",
            f"{m['retune_recovered_ci95_high']:+.1f}") == (rec[2], rec[3])
    got = client.download_artifacts(run.info.run_id, "summary.json", str(tmp_path))
    summary = json.loads(Path(got).read_text())
    p99 = summary["confirmation"]["effects"]["p99_us"]
    assert p99["ci95_high"] < 0, p99  # confirmed on p99 (multi-objective)
    block = summary["retune"]
    assert block["from_run"] == old_run.info.run_id and block["old_on_new_mix"]["is_baseline"]
    assert block["new_winner"]["paired"]["confirmed"]
    assert f"{block['recovered']['ci95_low']:+.1f}" == rec[2]
    assert block["recovered"]["percent"] == pytest.approx(m["retune_recovered_percent"])
