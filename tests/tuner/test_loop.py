"""The trial lifecycle on a tiny simulated fabric: baseline, verdicts, rollback, MLflow."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from safety.journal import Journal
from tuner import optuna_io
from tuner.cluster.sim import SimCluster
from tuner.experiment import Experiment
from tuner.loop import Interrupted, StudyRunner, build_cluster
from tuner.tracking import Tracker

Tiny = Callable[..., tuple[Experiment, str]]


class Spy:
    """Wraps a cluster, counting applies and optionally misbehaving on the n-th measure."""

    def __init__(self, inner: SimCluster, on_measure: Callable[[int], None] | None = None):
        self.inner = inner
        self.applied: list[Any] = []
        self.measures = 0
        self.on_measure = on_measure

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply(self, settings: Any) -> None:
        self.applied.append(settings)
        self.inner.apply(settings)

    def measure(self, workload: Any, monitor: Any = None) -> Any:
        self.measures += 1
        if self.on_measure is not None:
            self.on_measure(self.measures)
        return self.inner.measure(workload, monitor)


def _runner(exp: Experiment, text: str, cluster: Any, **kw: Any) -> StudyRunner:
    return StudyRunner(exp, text, cluster, study_name="s1", **kw)


def _nested(exp: Experiment, runner: StudyRunner) -> list[Any]:
    return runner.tracker.nested_runs()


def test_study_baseline_trials_mlflow_and_restore(tiny: Tiny) -> None:
    exp, text = tiny(trials=3)
    cluster = build_cluster(exp)
    base = cluster.snapshot()
    runner = _runner(exp, text, cluster)
    res = runner.run()
    assert [o.number for o in res.trials] == [0, 1, 2, 3]
    assert res.trials[0].verdict == "baseline" and res.trials[0].is_baseline
    assert res.baseline is not None and res.baseline.score is not None
    assert cluster.read_back() == base  # back on the baseline at the end
    assert Journal(exp.results_path / "journal.jsonl").dirty() is None
    # MLflow: one parent run, one nested run per trial, with the documented names.
    runs = _nested(exp, runner)
    assert len(runs) == 4
    by_trial = {int(r.data.tags["ecntune.trial"]): r for r in runs}
    r0 = by_trial[0]
    assert r0.data.tags["ecntune.verdict"] == "baseline"
    for metric in ("score", "busbw_gbytes_per_s.alltoall.4194304", "p50_us", "p99_us",
                   "p999_us", "pfc_pause_frames", "pfc_pause_duration_us",
                   "pfc_pause_transitions", "ecn_marked_pkts", "cnp_sent", "lossless_drops"):
        assert metric in r0.data.metrics, metric
    assert r0.data.params["kmin_bytes"] == "1048576"
    arts = runner.tracker.client().list_artifacts(r0.info.run_id)
    assert {"trial-0000.json", "settings_diff.json", "timeseries.png"} <= {a.path for a in arts}
    parent = runner.tracker.client().get_run(res.parent_run_id)
    assert parent.data.params["experiment"] == "tiny"
    assert "baseline_score" in parent.data.metrics
    assert parent.info.status == "FINISHED"
    # The winner and the baseline were re-measured (fresh runs) before the report.
    if res.best is not None and not res.best.is_baseline:
        conf = res.confirmation
        assert conf is not None and conf["trial"] == res.best.number
        assert len(conf["baseline_scores"]) == 1
        assert len(conf["best_scores"]) == 1 or conf["problem"]
        assert parent.data.metrics["confirmed_baseline_score"] == conf["baseline_score"]
        assert Journal(exp.results_path / "journal.jsonl").entries()[-1].outcomes == [
            "restored"]


def test_rejected_proposals_are_never_applied(tiny: Tiny) -> None:
    exp, text = tiny(trials=3, xoff_margin=99.9)  # Kmax must sit below 0.1 % of XOFF
    spy = Spy(build_cluster(exp))  # type: ignore[arg-type]
    base = spy.snapshot()
    runner = _runner(exp, text, spy)
    res = runner.run()
    later = [o for o in res.trials if not o.is_baseline]
    assert [o.verdict for o in later] == ["rejected:kmax_above_xoff"] * 3
    assert all(o.state == "PRUNED" for o in later)
    assert spy.applied == [base]  # only the end-of-study restore: no proposal was applied
    assert spy.measures == 1  # the baseline only
    tags = sorted(r.data.tags["ecntune.verdict"] for r in _nested(exp, runner))
    assert tags == ["baseline"] + ["rejected:kmax_above_xoff"] * 3


def test_safety_violation_rolls_back_and_is_logged(tiny: Tiny) -> None:
    # A shallow 4 MiB buffer (XOFF ~540 kB), Kmin ~300 kB with 1 % marking and fast additive
    # increase: incast PFC-pauses the senders (measured: ~80 pause frames), and with this
    # limit any pause trips the live monitor.
    exp, text = tiny(trials=2, max_pause_fraction=1e-6, buffer_bytes=4 * 2**20,
                     kmin=(290_000, 310_000), ratio=(1.38, 1.42), pmax=(1, 2), ai=(190, 210))
    cluster = build_cluster(exp)
    base = cluster.snapshot()
    runner = _runner(exp, text, cluster)
    res = runner.run()
    later = [o for o in res.trials if not o.is_baseline]
    assert [o.verdict for o in later] == ["rolled_back:pfc_storm"] * 2
    assert cluster.read_back() == base
    entries = Journal(exp.results_path / "journal.jsonl").entries()
    assert [e.outcomes for e in entries] == [["restored"], ["restored"]]
    runs = [r for r in _nested(exp, runner)
            if r.data.tags["ecntune.verdict"] == "rolled_back:pfc_storm"]
    assert len(runs) == 2
    for r in runs:  # the counters up to the abort are on record, with the violation text
        assert r.data.metrics["pfc_pause_frames"] > 0
        assert "paused" in r.data.tags["ecntune.detail"]


def test_keep_best_leaves_the_confirmed_winner_on_the_canary(tiny: Tiny) -> None:
    exp, text = tiny(trials=3, seed=2)
    cluster = build_cluster(exp)
    base = cluster.snapshot()
    res = _runner(exp, text, cluster, keep_best=True).run()
    assert res.best is not None and not res.best.is_baseline
    conf = res.confirmation
    assert conf is not None and not conf["problem"]
    if conf["best_score"] > conf["baseline_score"]:  # confirmed: promoted and verified
        assert res.final == f"kept:{res.best.number}"
        now = cluster.read_back()
        assert now.switches["leaf0"].kmin_bytes == res.best.values["kmin_bytes"]
        assert now.switches["leaf0"].kmax_bytes == res.best.values["kmax_bytes"]
        assert now.nics[next(iter(now.nics))].rpg_ai_rate == res.best.values["rpg_ai_rate"]
        assert Journal(exp.results_path / "journal.jsonl").entries()[-1].outcomes == ["kept"]
    else:  # the fresh repeats did not confirm it: the canary stays on the baseline
        assert res.final == "baseline"
        assert cluster.read_back() == base


def test_resume_keeps_completed_trials(tiny: Tiny) -> None:
    exp, text = tiny(trials=1)
    _runner(exp, text, build_cluster(exp)).run()
    st = optuna_io.load_study("s1", exp.storage_url)
    first = {t.number: t.params for t in st.trials}
    exp3 = exp.model_copy(update={"budget": exp.budget.model_copy(update={"trials": 3})})
    runner = _runner(exp3, text, build_cluster(exp3))
    res = runner.run(resume=True)
    assert [o.number for o in res.trials] == [0, 1, 2, 3]
    st = optuna_io.load_study("s1", exp.storage_url)
    assert {t.number: t.params for t in st.trials if t.number in first} == first
    assert len(_nested(exp, runner)) == 4  # same parent run, nothing lost or doubled


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_mid_measurement_restores_the_baseline(tiny: Tiny, sig: int) -> None:
    exp, text = tiny(trials=5)

    def kill_on_third(n: int) -> None:
        if n == 3:
            os.kill(os.getpid(), sig)

    spy = Spy(build_cluster(exp), kill_on_third)  # type: ignore[arg-type]
    base = spy.snapshot()
    runner = _runner(exp, text, spy)
    with pytest.raises(Interrupted) as info:
        runner.run()
    assert info.value.signame == signal.Signals(sig).name
    assert spy.read_back() == base
    assert Journal(exp.results_path / "journal.jsonl").dirty() is None
    st = optuna_io.load_study("s1", exp.storage_url)
    states = [(t.number, t.state.name, t.user_attrs.get("verdict")) for t in st.trials]
    assert states[2] == (2, "FAIL", "interrupted")
    assert [s[1] for s in states[:2]] == ["COMPLETE", "COMPLETE"] or states[1][1] != "RUNNING"
    assert signal.getsignal(signal.SIGTERM) is not runner.guard._handler  # handlers put back


def test_failure_restores_the_baseline(tiny: Tiny) -> None:
    exp, text = tiny(trials=5)

    def boom(n: int) -> None:
        if n == 3:
            raise RuntimeError("backend crashed")

    spy = Spy(build_cluster(exp), boom)  # type: ignore[arg-type]
    base = spy.snapshot()
    with pytest.raises(RuntimeError, match="backend crashed"):
        _runner(exp, text, spy).run()
    assert spy.read_back() == base
    assert Journal(exp.results_path / "journal.jsonl").dirty() is None


class FlakyTracker(Tracker):
    """MLflow down for the first ``down`` trial logs."""

    def __init__(self, *a: Any, down: int = 2, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.down = down

    def log_trial(self, rec: Any) -> str | None:
        if self.down > 0:
            self.down -= 1
            self._fail(f"trial {rec.number}", ConnectionError("tracking server unreachable"))
            return None
        return super().log_trial(rec)


def test_tracking_outage_is_backfilled_from_optuna(tiny: Tiny, results: Path) -> None:
    exp, text = tiny(trials=2)
    tracker = FlakyTracker(exp.tracking_uri, exp.tracking_experiment, results / "mlartifacts",
                           down=2)
    runner = _runner(exp, text, build_cluster(exp), tracker=tracker)
    res = runner.run()
    assert len(res.tracking_failures) == 2
    runs = tracker.nested_runs()
    assert sorted(int(r.data.tags["ecntune.trial"]) for r in runs) == [0, 1, 2]
    st = optuna_io.load_study("s1", exp.storage_url)
    assert json.loads(Path(st.trials[0].user_attrs["measurement_path"]).read_text())


def test_multi_objective_reports_pareto_front_with_pfc_constraint(tiny: Tiny) -> None:
    exp, text = tiny(trials=4, mode="multi")
    res = _runner(exp, text, build_cluster(exp)).run()
    st = optuna_io.load_study("s1", exp.storage_url)
    assert optuna_io.directions(st) == ["maximize", "minimize"]
    done = [t for t in st.trials if t.state.name == "COMPLETE"]
    assert done and all(len(t.values) == 2 for t in done)
    for t in done:  # values are (busbw / line rate, p99 µs); the PFC budget is a constraint
        assert t.values[0] == t.user_attrs["metrics"]["busbw_norm"]
        assert t.values[1] == t.user_attrs["metrics"]["p99_us"]
        assert t.constraints == {"pfc_budget": t.user_attrs["metrics"]["pfc_constraint"]}
    assert res.pareto
    front = {o.number for o in res.pareto}
    feasible = [t for t in done if t.constraints["pfc_budget"] <= 0]
    for t in feasible:  # nothing feasible dominates a front member
        for f in front:
            ft = st.trials[f]
            assert not (t.values[0] > ft.values[0] and t.values[1] < ft.values[1])
