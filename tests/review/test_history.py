"""``ecntune history`` against the session's real MLflow server: filters and the comparison of
the ``before`` and ``after`` studies (the AlltoAll weight of the mix changed in between)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.review.conftest import TRIALS, Server, Study
from tuner import optuna_io
from tuner.cli import main
from tuner.errors import ConfigError
from tuner.history import Filters, History, parse_when, searched_knobs, stores


@pytest.fixture(scope="module")
def history(mlflow_server: Server, studies: dict[str, Study]) -> History:
    return History([mlflow_server.url])


def _optuna_verdicts(st: Study) -> list[str]:
    return [t.user_attrs["verdict"] for t in optuna_io.trials(
        optuna_io.load_study(st.name, st.storage))]


def test_studies_and_filters(history: History, studies: dict[str, Study]) -> None:
    names = [r.study for r in history.studies()]
    assert names == ["review-after", "review-before"]  # newest first
    row = history.study("review-before")
    assert row.run_id == studies["before"].result.parent_run_id
    assert row.cluster == "quick" and row.experiment == "quick" and row.backend == "sim"
    assert len(history.studies(Filters(cluster="quick", experiment="quick"))) == 2
    assert history.studies(Filters(cluster="elsewhere")) == []
    assert history.studies(Filters(experiment="moe-mix")) == []
    tomorrow = parse_when("2999-01-01")
    assert history.studies(Filters(since_ms=tomorrow)) == []
    assert len(history.studies(Filters(until_ms=tomorrow))) == 2
    with pytest.raises(ConfigError, match="no study 'nope'"):
        history.study("nope")


def test_trials_by_verdict_match_optuna(history: History, studies: dict[str, Study]) -> None:
    st = studies["before"]
    trials = history.trials(Filters(study=st.name))
    assert [t.trial for t in trials] == list(range(TRIALS + 1))
    assert [t.verdict for t in trials] == _optuna_verdicts(st)
    both = _optuna_verdicts(studies["before"]) + _optuna_verdicts(studies["after"])
    for kind in ("ok", "rolled_back", "rejected"):
        got = history.trials(Filters(verdict=kind))
        assert len(got) == sum(v.startswith(kind) for v in both), kind
        assert all(t.verdict.startswith(kind) for t in got)
    exact = next(v for v in both if ":" in v) if any(":" in v for v in both) else None
    if exact is not None:
        assert {t.verdict for t in history.trials(Filters(verdict=exact))} == {exact}


def test_compare_before_and_after_a_mix_change(history: History,
                                               studies: dict[str, Study]) -> None:
    c = history.compare("review-before", "review-after")
    assert (c.a.study, c.b.study) == ("review-before", "review-after")
    assert c.best_a is not None and c.best_b is not None
    assert c.best_a.trial == studies["before"].result.best.number
    assert c.best_b.trial == studies["after"].result.best.number
    assert sum(c.verdicts_a.values()) == TRIALS + 1
    # quick.yaml searches 8 dimensions; kmax_ratio sets kmax_bytes
    assert searched_knobs(c.a) == {"kmin_bytes", "kmax_ratio", "kmax_bytes", "pmax_percent",
                                   "rpg_ai_rate", "rpg_hai_rate", "rpg_time_reset",
                                   "rpg_min_dec_fac", "min_time_between_cnps"}
    diff = {what: (a, b) for what, a, b in c.setup_diff}
    # the mix change is found in the logged experiment.yaml: weight 2 -> 4 of the alltoall
    (what, (a, b)), = [(w, v) for w, v in diff.items() if w.startswith("workload")]
    assert "op=alltoall" in a and "weight=2" in a and "weight=4" in b


def test_history_cli(mlflow_server: Server, studies: dict[str, Study]) -> None:
    run = CliRunner().invoke
    res = run(main, ["history", "--tracking-uri", mlflow_server.url])
    assert res.exit_code == 0, res.output
    assert "review-before" in res.output and "review-after" in res.output
    res = run(main, ["history", "--tracking-uri", mlflow_server.url, "--compare",
                     "review-before", "review-after"])
    assert res.exit_code == 0, res.output
    assert "review-before  vs  review-after" in res.output
    assert "workload part 1" in res.output and "recommended settings" in res.output
    res = run(main, ["history", "--tracking-uri", mlflow_server.url, "--study",
                     "review-after", "--trials", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["trial"] for r in rows] == list(range(TRIALS + 1))
    assert {r["study"] for r in rows} == {"review-after"}
    res = run(main, ["history", "--tracking-uri", mlflow_server.url, "--since", "30-11-2026"])
    assert res.exit_code == 2 and "use YYYY-MM-DD" in res.output


def test_stores_of_a_results_folder(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "mlflow.db").write_bytes(b"")
    (tmp_path / "mlflow.db").write_bytes(b"")
    assert stores(tmp_path) == [f"sqlite:///{tmp_path / 'mlflow.db'}",
                                f"sqlite:///{tmp_path / 'a' / 'mlflow.db'}"]
    res = CliRunner().invoke(main, ["history", "--results", str(tmp_path / "b")])
    assert res.exit_code == 2 and "no mlflow.db" in res.output
