"""A short study logged to a real ``mlflow server`` over HTTP, checked through its REST API:
the parent run, one nested run per finished Optuna trial with the same verdict, metrics, knob
params, and the artifacts (measurement, settings diff, raw outputs, time series, report)."""

from __future__ import annotations

from typing import Any

from tests.review.conftest import TRIALS, Server, Study
from tuner import optuna_io


def _search(server: Server, exp_id: str, flt: str) -> list[dict[str, Any]]:
    body = {"experiment_ids": [exp_id], "filter": flt, "max_results": 1000}
    return list(server.post("/api/2.0/mlflow/runs/search", body).get("runs", []))


def _tags(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def _metrics(run: dict[str, Any]) -> dict[str, float]:
    return {m["key"]: float(m["value"]) for m in run["data"].get("metrics", [])}


def _params(run: dict[str, Any]) -> dict[str, str]:
    return {p["key"]: p["value"] for p in run["data"].get("params", [])}


def _artifacts(server: Server, run_id: str, path: str = "") -> set[str]:
    params = {"run_id": run_id, **({"path": path} if path else {})}
    files = server.get("/api/2.0/mlflow/artifacts/list", **params).get("files", [])
    return {f["path"] for f in files}


def test_parent_and_nested_runs_over_rest(mlflow_server: Server,
                                          studies: dict[str, Study]) -> None:
    st = studies["before"]
    exp = mlflow_server.get("/api/2.0/mlflow/experiments/get-by-name",
                            experiment_name=st.experiment)["experiment"]
    parents = _search(mlflow_server, exp["experiment_id"],
                      f"tags.ecntune.role = 'study' and tags.ecntune.study = '{st.name}'")
    assert len(parents) == 1
    parent = parents[0]
    pid = parent["info"]["run_id"]
    assert pid == st.result.parent_run_id
    assert parent["info"]["status"] == "FINISHED"
    assert parent["info"]["run_name"] == st.name
    pparams = _params(parent)
    assert pparams["experiment"] == "quick" and pparams["backend"] == "sim"
    assert pparams["trials_budget"] == str(TRIALS)
    # the twin screen and its copies (none on rocesim unless the file writes them)
    assert (pparams["screen"], pparams["screen.copies"]) == ("twin", "none")
    pm = _metrics(parent)
    assert pm["confirmed"] == float(st.result.winner is not None)
    if st.result.best is not None:  # the best candidate's paired score (0 = the baseline)
        assert pm["best_score"] == st.result.best.score

    optuna_trials = {t.number: t for t in optuna_io.trials(
        optuna_io.load_study(st.name, st.storage))}
    nested = _search(mlflow_server, exp["experiment_id"], f"tags.mlflow.parentRunId = '{pid}'")
    by_trial = {int(_tags(r)["ecntune.trial"]): r for r in nested}
    # baseline + TRIALS proposals, one nested run each, numbered like the Optuna trials
    assert sorted(by_trial) == list(range(TRIALS + 1)) == sorted(optuna_trials)
    counts = {"ok": 0, "rolled_back": 0, "rejected": 0, "failed": 0}
    for n, run in by_trial.items():
        tags, t = _tags(run), optuna_trials[n]
        assert tags["ecntune.verdict"] == t.user_attrs["verdict"]
        assert tags["ecntune.state"] == t.state.name
        assert tags["ecntune.role"] == "trial"
        assert run["info"]["run_name"] == f"trial-{n:04d}"
        assert _params(run)["kmin_bytes"] == str(t.user_attrs["values"]["kmin_bytes"])
        head = tags["ecntune.verdict"].split(":")[0]
        counts[head] = counts.get(head, 0) + 1
        m = _metrics(run)
        om = t.user_attrs.get("metrics", {})
        finite = {k: float(v) for k, v in om.items() if abs(float(v)) < float("inf")}
        assert finite == m  # every (finite) metric, same value
        if "score" in t.user_attrs:  # scored: the headline metrics are there
            assert m["score"] == t.user_attrs["score"]
            assert {"busbw_norm", "p99_us", "pause_us_per_s", "ecn_marked_pkts", "cnp_sent",
                    "pfc_pause_duration_us"} <= set(m)
    for key in ("ok", "rolled_back", "rejected", "failed"):
        assert pm[f"trials_{key}"] == counts[key]


def test_trial_artifacts_over_rest(mlflow_server: Server, studies: dict[str, Study]) -> None:
    st = studies["before"]
    exp = mlflow_server.get("/api/2.0/mlflow/experiments/get-by-name",
                            experiment_name=st.experiment)["experiment"]
    nested = _search(mlflow_server, exp["experiment_id"],
                     f"tags.mlflow.parentRunId = '{st.result.parent_run_id}'")
    base = next(r for r in nested if _tags(r)["ecntune.verdict"] == "baseline")
    rid = base["info"]["run_id"]
    files = _artifacts(mlflow_server, rid)
    assert {"trial-0000.json", "settings_diff.json", "counters_before.json",
            "counters_after.json", "counters_delta.json", "timeseries.png", "raw"} <= files
    assert {"raw/rocesim.json", "raw/rocesim_timeseries.json"} <= _artifacts(
        mlflow_server, rid, "raw")
    png = mlflow_server.raw("/get-artifact", path="timeseries.png", run_uuid=rid)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    diff = mlflow_server.get("/get-artifact", path="settings_diff.json", run_uuid=rid)
    assert {row["knob"] for row in diff} >= {"kmin_bytes", "kmax_bytes", "pmax_percent"}
    assert not any(row["changed"] for row in diff)  # the baseline differs from nothing
    # every nested run has at least its settings diff, measured or not
    for run in nested:
        assert "settings_diff.json" in _artifacts(mlflow_server, run["info"]["run_id"])


def test_study_report_is_a_parent_artifact(mlflow_server: Server,
                                           studies: dict[str, Study]) -> None:
    st = studies["before"]
    pid = st.result.parent_run_id
    assert {"report/report.html", "report/report.md", "report/img"} <= _artifacts(
        mlflow_server, pid, "report")
    imgs = _artifacts(mlflow_server, pid, "report/img")
    scored = [t for t in optuna_io.trials(optuna_io.load_study(st.name, st.storage))
              if t.state.name == "COMPLETE" and t.user_attrs.get("score") is not None]
    expect = {"convergence", "pareto", "knob_slices"} | (
        {"importance"} if len(scored) >= 3 else set())
    assert {f"report/img/{n}.png" for n in expect} <= imgs
    page = mlflow_server.raw("/get-artifact", path="report/report.html", run_uuid=pid).decode()
    assert f"ecntune study <code>{st.name}</code>" in page
    assert page.count("data:image/png;base64,") == len(imgs)


def test_timings_reported(mlflow_server: Server, studies: dict[str, Study],
                          capsys: object) -> None:
    """Not a benchmark: keeps the cost of this folder visible in ``-s`` output."""
    print(f"\nmlflow server up in {mlflow_server.start_s:.1f} s; studies: "
          + ", ".join(f"{k} {v.seconds:.1f} s" for k, v in studies.items()))
    assert mlflow_server.proc.poll() is None
