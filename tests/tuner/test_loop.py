"""The trial lifecycle on a tiny simulated fabric: baseline, verdicts, rollback, MLflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from trial_variants import CALM, STORM, quick_with

from objectives.measurement import Measurement
from safety.journal import Journal
from tuner import optuna_io, study_store
from tuner import study as studies
from tuner.cluster import build_cluster
from tuner.cluster.sim import SimCluster
from tuner.experiment import Experiment
from tuner.loop import NEVER_KEPT, Interrupted, StudyRunner
from tuner.tracking import Tracker

Tiny = Callable[..., tuple[Experiment, str]]


class Spy:
    """Wraps a cluster, counting applies and optionally misbehaving on the n-th measure."""

    def __init__(self, inner: SimCluster, on_measure: Callable[[int], None] | None = None,
                 transform: Callable[[Measurement, Spy], Measurement] | None = None):
        self.inner = inner
        self.transform = transform
        self.applied: list[Any] = []
        self.measures = 0
        self.replicates: list[int] = []
        self.on_measure = on_measure

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply(self, settings: Any) -> None:
        self.applied.append(settings)
        self.inner.apply(settings)

    def measure(self, workload: Any, monitor: Any = None, *, replicate: int = 0) -> Any:
        self.measures += 1
        self.replicates.append(replicate)
        if self.on_measure is not None:
            self.on_measure(self.measures)
        m = self.inner.measure(workload, monitor, replicate=replicate)
        return self.transform(m, self) if self.transform is not None else m


def _runner(exp: Experiment, text: str, cluster: Any, name: str = "s1",
            **kw: Any) -> StudyRunner:
    return StudyRunner(exp, text, cluster, study_name=name, **kw)


def _nested(exp: Experiment, runner: StudyRunner) -> list[Any]:
    return runner.tracker.nested_runs()


def test_study_baseline_trials_mlflow_and_restore(tiny: Tiny) -> None:
    exp, text = tiny(trials=3, repeats=2, confirm=5, top_k=2)
    cluster = build_cluster(exp)
    base = cluster.snapshot()
    runner = _runner(exp, text, cluster)
    res = runner.run()
    assert [o.number for o in res.trials] == [0, 1, 2, 3]
    assert res.trials[0].verdict == "baseline" and res.trials[0].is_baseline
    assert res.baseline is not None and res.baseline.score == 0.0  # paired against itself
    assert res.repeats == 2
    assert cluster.read_back() == base  # back on the baseline at the end
    assert Journal(exp.results_path / "journal.jsonl").dirty() is None
    # Trial 0 has counters before and after (a fresh cluster starts with none: absent = 0).
    st = optuna_io.load_study("s1", exp.storage_url)
    m0 = Measurement.model_validate_json(
        Path(st.trials[0].user_attrs["measurement_path"]).read_text())
    assert m0.counters_after.ports and m0.counters.total("np_ecn_marked_roce_packets") >= 0
    assert set(m0.counters.ports) == set(m0.counters_after.ports)
    # MLflow: one parent run, one nested run per trial, with the documented names.
    runs = _nested(exp, runner)
    assert len(runs) == 4
    by_trial = {int(r.data.tags["ecntune.trial"]): r for r in runs}
    r0 = by_trial[0]
    assert r0.data.tags["ecntune.verdict"] == "baseline"
    assert r0.data.tags["ecntune.origin"] == "baseline"
    for metric in ("score", "busbw_gbytes_per_s.alltoall.4194304", "p50_us", "p99_us",
                   "p999_us", "pfc_pause_frames", "pfc_pause_duration_us",
                   "pfc_pause_transitions", "ecn_marked_pkts", "cnp_sent", "lossless_drops",
                   "noise_cv_busbw_norm"):
        assert metric in r0.data.metrics, metric
    assert r0.data.params["kmin_bytes"] == "1048576"
    arts = runner.tracker.client().list_artifacts(r0.info.run_id)
    assert {"trial-0000.json", "settings_diff.json", "timeseries.png"} <= {a.path for a in arts}
    parent = runner.tracker.client().get_run(res.parent_run_id)
    assert parent.data.params["experiment"] == "tiny"
    assert parent.info.status == "FINISHED"
    # The top candidates and the baseline were re-measured, paired, on fresh replicates.
    conf = res.confirmation
    assert conf is not None and conf.paired_repeats == 5
    cands = studies.candidates(st, 2)
    assert [c.trial for c in conf.candidates] == [c.number for c in cands]
    # The placements were drawn for this study, recorded, and are none of the study's own.
    assert len(set(conf.seeds)) == 5 and min(conf.seeds) >= 1_000_000
    assert st.user_attrs["confirmation_seeds"] == conf.seeds
    for c in conf.candidates:  # no safety limit on this fabric: every repeat was measured
        assert c.problem == "" or c.problem.startswith(("guardrail", "busbw interval"))
        assert len(c.diffs) == 5
        assert c.ci95_low < c.improvement_percent < c.ci95_high
        for metric in ("busbw", "p99_us", "pause_us_per_s", "tenant_goodput"):
            assert set(c.effects[metric]) >= {"change_percent", "ci95_low", "ci95_high",
                                              "per_placement"}
        assert [p["replicate"] for p in c.effects["busbw"]["per_placement"]] == conf.seeds
        saved = sorted((exp.results_path / "s1" / "confirmation").glob(
            f"trial-{c.trial:04d}-p*.json"))
        assert len(saved) == 5  # every confirmation measurement, for audit
    assert parent.data.metrics["confirmed"] == float(conf.winner is not None)
    summary = json.loads(Path(runner.tracker.client().download_artifacts(
        res.parent_run_id, "summary.json")).read_text())
    block = summary["confirmation"]
    assert block["seeds"] == conf.seeds
    assert set(block["effects"]) == {"busbw", "p99_us", "pause_us_per_s", "tenant_goodput"}
    assert len(block["effects"]["busbw"]["per_placement"]) == 5
    assert parent.data.metrics["confirmed_busbw_change_percent"] == pytest.approx(
        block["effects"]["busbw"]["change_percent"])
    # The confirmation's measurements are in the parent run too, one file per measurement.
    logged = runner.tracker.client().list_artifacts(res.parent_run_id, "confirmation")
    assert len(logged) == 5 * (1 + len(conf.candidates))


def test_every_trial_is_measured_on_the_same_paired_replicates(tiny: Tiny) -> None:
    exp, text = tiny(trials=2, repeats=3, confirm=5)
    spy = Spy(build_cluster(exp))  # type: ignore[arg-type]
    runner = _runner(exp, text, spy)
    res = runner.run()
    study_part = spy.replicates[:9]  # the baseline and two trials, 3 replicates each
    assert study_part == [0, 1, 2] * 3
    conf = res.confirmation
    assert conf is not None and len(conf.seeds) == 5
    # Confirmation: the study's drawn placements only, the baseline first on each, then the
    # candidate on the same one (interleaved).
    n = len(conf.candidates) + 1
    assert spy.replicates[9:] == [s for s in conf.seeds for _ in range(n)]
    assert not set(conf.seeds) & set(range(3))
    # Another study draws other placements: no study is tuned to a fixed set.
    runner2 = _runner(exp, text, Spy(build_cluster(exp)), name="s2")  # type: ignore[arg-type]
    conf2 = runner2.run().confirmation
    assert conf2 is not None and not set(conf2.seeds) & set(conf.seeds)


def test_a_would_be_candidate_is_measured_on_further_placements_first(tiny: Tiny) -> None:
    """Intensification: a trial meeting every guardrail on the study's 2 placements, and so
    headed for the confirmation, is measured on up to 4; breaking the tenant guardrail on the
    3rd makes it no candidate, and the 4th is not measured. Placement 2 is made hostile to the
    tenant for every setting but the baseline's (the first 4 measurements)."""
    exp, text = tiny(trials=3, repeats=2, placements=4, tenant_loss=90.0, top_k=1, confirm=5)

    def hostile(m: Measurement, spy: Spy) -> Measurement:
        if spy.measures <= 4 or m.replicate != 2:
            return m
        return m.model_copy(update={"tenants": [
            t.model_copy(update={"goodput_gbps": t.goodput_gbps * 0.05}) for t in m.tenants]})

    spy = Spy(build_cluster(exp), transform=hostile)  # type: ignore[arg-type]
    runner = _runner(exp, text, spy)
    res = runner.run()
    assert spy.replicates[:4] == [0, 1, 2, 3]  # the baseline holds every placement
    proposals = [t for t in res.trials if not t.is_baseline]
    met_first_two = [t for t in proposals if t.verdict.startswith("infeasible:tenant")]
    assert met_first_two, [t.verdict for t in proposals]
    # every one of them was measured on placement 2, that is what it broke, and it stopped there
    assert 3 not in spy.replicates[4:]
    stored = {t.number: study_store.tags(t) for t in optuna_io.trials(runner.study)}
    for t in met_first_two:
        assert stored[t.number].replicates == 3
    assert studies.candidates(runner.study, 3) == []
    assert res.confirmation is None or res.confirmation.candidates == []


def test_no_intensification_where_the_backend_cannot_vary_placements(tiny: Tiny) -> None:
    """A backend that repeats one placement (``placements: fixed``, an SSH canary of two
    hosts): the baseline and every trial are measured on their paired repeats only."""
    exp, text = tiny(trials=4, repeats=2, placements=4, top_k=3, confirm=5)

    class Fixed(Spy):
        def describe(self) -> Any:
            d = self.inner.describe()
            return d.model_copy(update={"facts": {**d.facts, "placements": "fixed"}})

    spy = Fixed(build_cluster(exp))  # type: ignore[arg-type]
    runner = _runner(exp, text, spy)
    res = runner.run()
    assert [t for t in res.trials if t.candidate], "a trial headed for the confirmation"
    stored = {t.number: study_store.tags(t) for t in optuna_io.trials(runner.study)}
    assert {stored[t.number].replicates for t in res.trials
            if stored[t.number].replicates} == {2}
    study_measures = sum(stored[t.number].replicates for t in res.trials)
    assert sorted(set(spy.replicates[:study_measures])) == [0, 1]


def test_a_setting_is_confirmed_once_however_many_trials_measured_it(tiny: Tiny) -> None:
    exp, text = tiny(trials=2, repeats=2, confirm=5, top_k=2)
    runner = _runner(exp, text, build_cluster(exp))
    runner.run()
    c = studies.candidates(runner.study, 2)
    assert c, "the tiny study has a candidate"
    # the best candidate's settings measured again (as params that round to them would be)
    t = next(t for t in optuna_io.trials(runner.study) if t.number == c[0].number)
    runner.study.add_trial(optuna.trial.create_trial(
        state=t.state, values=t.values, params=t.params, distributions=t.distributions,
        user_attrs=t.user_attrs, system_attrs=t.system_attrs))
    again = studies.candidates(runner.study, 2)
    assert [o.values for o in again].count(c[0].values) == 1


def test_rejected_proposals_are_never_applied(tiny: Tiny) -> None:
    exp, text = tiny(trials=3, xoff_margin=99.9)  # Kmax must sit below 0.1 % of XOFF
    spy = Spy(build_cluster(exp))  # type: ignore[arg-type]
    base = spy.snapshot()
    runner = _runner(exp, text, spy)
    res = runner.run()
    later = [o for o in res.trials if not o.is_baseline]
    assert [o.verdict for o in later] == ["rejected:kmax_above_pfc_threshold"] * 3
    assert all(o.state == "PRUNED" for o in later)
    assert spy.applied == [base]  # only the end-of-study restore: no proposal was applied
    assert spy.measures == 1  # the baseline only
    tags = sorted(r.data.tags["ecntune.verdict"] for r in _nested(exp, runner))
    assert tags == ["baseline"] + ["rejected:kmax_above_pfc_threshold"] * 3


def test_safety_violation_rolls_back_and_is_logged(results: Path) -> None:
    # STORM (tests/tuner/conftest.py) keeps the incast senders paused most of every window:
    # the live monitor stops it, the baseline is restored, MLflow has the counters to the abort.
    exp, text = quick_with(STORM, results, trials=2, tracking=True)
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
        assert r.data.metrics["constraint_safety"] == NEVER_KEPT  # the sampler learns from it


def test_keep_best_leaves_the_confirmed_winner_on_the_canary(tmp_path: Path) -> None:
    # quick.yaml's vendor defaults pause ~1.3 % of the time, over the 0.1 % PFC guardrail; CALM
    # brings the pause to 0 on every placement: a winner, confirmed with its trade stated.
    exp, text = quick_with(CALM, tmp_path, confirm_repeats=5)
    cluster = build_cluster(exp)
    base = cluster.snapshot()
    res = _runner(exp, text, cluster, keep_best=True).run()
    assert res.winner is not None and res.winner.number == 1
    assert res.confirmation is not None and res.confirmation.winner == 1
    win = res.confirmation.best
    assert win is not None and win.confirmed
    assert win.price.endswith("% of the time to 0 %, on every placement")
    assert "for busbw +" in win.price  # a gain, so no busbw price is stated
    assert win.effects["pause_us_per_s"]["candidate_mean"] == 0.0
    assert res.final == "kept:1"
    now = cluster.read_back()
    assert now != base
    assert now.switches["leaf0"].kmin_bytes == CALM["kmin_bytes"]
    assert now.switches["leaf0"].kmax_bytes == CALM["kmax_bytes"]
    assert Journal(exp.results_path / "journal.jsonl").entries()[-1].outcomes == ["kept"]


def test_a_trial_equal_to_the_baseline_is_never_confirmed(tiny: Tiny) -> None:
    # Every proposal is the baseline itself: each paired difference is exactly 0, the
    # interval is [0, 0], and "nothing beat the baseline" is the honest answer.
    exp, text = tiny(trials=2, kmin=(1048576, 1048576.4), ratio=(2.0, 2.0000001),
                     pmax=(5, 5.4), ai=(5, 5.4), confirm=5,  # rounds to the baseline's values
                     buffer_bytes=32 * 2**20, xoff_margin=0.0)  # room for Kmax 2 MiB
    cluster = build_cluster(exp)
    base = cluster.snapshot()
    res = _runner(exp, text, cluster, keep_best=True).run()
    assert res.confirmation is not None and res.confirmation.candidates
    assert all(c.diffs == [0.0] * 5 and not c.confirmed
               for c in res.confirmation.candidates)
    assert res.winner is None and res.final == "baseline"
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
    assert states[0][1] == "COMPLETE"
    assert states[1][1] in ("COMPLETE", "PRUNED")  # finished, whatever its verdict
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


def test_protection_lost_mid_trial_fails_the_trial_unscored(tiny: Tiny) -> None:
    """Red team H4: the dead-man timer claimed (a ``recover`` elsewhere judged this tuner dead)
    during the second replicate: the trial is ``failed:protection_lost``, FAIL, with no score
    even from the replicate measured before -- and the canary is restored."""
    from tuner.errors import ProtectionLost

    exp, text = tiny(trials=1, repeats=2)

    def claimed(n: int) -> None:
        if n == 4:  # baseline: measures 1-2; the trial's replicates: 3 (fine), 4
            raise ProtectionLost("dead-man timer claimed on h0/mlx5_0 during the trial")

    spy = Spy(build_cluster(exp), claimed)  # type: ignore[arg-type]
    base = spy.snapshot()
    res = _runner(exp, text, spy).run()
    (o,) = [o for o in res.trials if not o.is_baseline]
    assert (o.verdict, o.state, o.score, o.objective) == (
        "failed:protection_lost", "FAIL", None, None)
    assert spy.measures == 4 and spy.read_back() == base


class FlakyTracker(Tracker):
    """MLflow down for the first ``down`` trial logs."""

    def __init__(self, *a: Any, down: int = 2, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.down = down

    def log_trial(self, rec: Any, into: str | None = None) -> str | None:
        if self.down > 0:
            self.down -= 1
            self._fail(f"trial {rec.number}", ConnectionError("tracking server unreachable"))
            return None
        return super().log_trial(rec, into)


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


class KilledWhileLogging(Tracker):
    """Trial 1's nested run is created (an hour ago) and never finished: the process that was
    logging it was SIGKILLed between create_run and set_terminated, after one param. With
    ``twice``, trial 2 also has a run of its own that finished beside such a lost one."""

    def __init__(self, *args: Any, twice: bool = False) -> None:
        super().__init__(*args)
        self.lost: dict[int, str] = {}
        self.twice = twice

    def _lose(self, number: int) -> None:
        rid = self.client().create_run(
            self._experiment_id(), run_name=f"trial-{number:04d}",
            start_time=int(time.time() * 1000) - 3_600_000,
            tags={"mlflow.parentRunId": str(self.parent_run_id), "ecntune.trial": str(number),
                  "ecntune.role": "trial"}).info.run_id
        self.client().log_param(rid, "kmin_bytes", "lost-writer's value")
        self.lost[number] = rid

    def log_trial(self, rec: Any, into: str | None = None) -> str | None:
        if rec.number == 1 and 1 not in self.lost:
            self._lose(1)
            return None
        if rec.number == 2 and self.twice and 2 not in self.lost:
            self._lose(2)
        return super().log_trial(rec, into)


def test_a_run_left_running_by_a_killed_process_is_completed_in_place(
        tiny: Tiny, results: Path) -> None:
    """The back-fill finishes the lost run itself (the CI flake of stop 30: a server killed
    mid-log left trial 3 with a RUNNING run, and a second, new run made it count twice)."""
    exp, text = tiny(trials=2)
    tracker = KilledWhileLogging(exp.tracking_uri, exp.tracking_experiment,
                                 results / "mlartifacts")
    _runner(exp, text, build_cluster(exp), tracker=tracker).run()
    runs = tracker.nested_runs()
    assert sorted((int(r.data.tags["ecntune.trial"]), r.info.status) for r in runs) == [
        (0, "FINISHED"), (1, "FINISHED"), (2, "FINISHED")]
    (one,) = [r for r in runs if r.data.tags["ecntune.trial"] == "1"]
    assert one.info.run_id == tracker.lost[1]
    assert one.data.tags["ecntune.completed_by_backfill"] == "true"
    assert one.data.tags["ecntune.verdict"] and "score" in one.data.metrics
    # the param the lost writer logged stays (write-once); the others are the trial's
    assert one.data.params["kmin_bytes"] == "lost-writer's value" and len(one.data.params) > 3


def test_a_lost_run_beside_a_finished_one_is_closed(tiny: Tiny, results: Path) -> None:
    exp, text = tiny(trials=2)
    tracker = KilledWhileLogging(exp.tracking_uri, exp.tracking_experiment,
                                 results / "mlartifacts", twice=True)
    _runner(exp, text, build_cluster(exp), tracker=tracker).run()
    runs = {(r.info.run_id, int(r.data.tags["ecntune.trial"]), r.info.status)
            for r in tracker.nested_runs()}
    assert {(n, s) for _, n, s in runs} == {(0, "FINISHED"), (1, "FINISHED"), (2, "FINISHED"),
                                            (2, "KILLED")}
    assert (tracker.lost[2], 2, "KILLED") in runs


class KilledJustNow(Tracker):
    """The same kill a moment before the resume: trial 1's run was created just now by a
    process that has ended since (its ``ecntune.writer`` tag); beside it, a run a live process
    (this one) is still logging."""

    killed = False

    def log_trial(self, rec: Any, into: str | None = None) -> str | None:
        if rec.number == 1 and not self.killed:
            self.killed = True
            child = subprocess.Popen([sys.executable, "-c", "pass"])
            gone = optuna_io.process_owner(child.pid)
            child.wait()
            for number, writer in ((1, gone), (99, optuna_io.process_owner())):
                self.client().create_run(
                    self._experiment_id(), run_name=f"trial-{number:04d}",
                    tags={"mlflow.parentRunId": str(self.parent_run_id),
                          "ecntune.trial": str(number), "ecntune.role": "trial",
                          "ecntune.writer": json.dumps(writer)})
            return None
        return super().log_trial(rec, into)


def test_a_run_whose_writer_is_gone_is_completed_without_waiting(tiny: Tiny,
                                                                 results: Path) -> None:
    """Red team L3 "Runs left RUNNING", with `resume` run at once: a run left RUNNING minutes
    ago was never closed (it waited ORPHAN_AFTER_S), so the trial was never logged again. A run
    whose writer is proved gone is completed at once; a live writer's run is left alone."""
    exp, text = tiny(trials=2)
    tracker = KilledJustNow(exp.tracking_uri, exp.tracking_experiment, results / "mlartifacts")
    _runner(exp, text, build_cluster(exp), tracker=tracker).run()
    runs = {(int(r.data.tags["ecntune.trial"]), r.info.status) for r in tracker.nested_runs()}
    assert runs == {(0, "FINISHED"), (1, "FINISHED"), (2, "FINISHED"), (99, "RUNNING")}
    # every run this process logged names it as its writer
    assert {json.loads(r.data.tags["ecntune.writer"])["pid"] for r in tracker.nested_runs()
            if r.info.status == "FINISHED"} == {os.getpid()}


def test_multi_objective_front_holds_only_feasible_trials(tiny: Tiny) -> None:
    # A 4 MiB buffer, and the incast tenant may lose at most half its goodput: the trials that
    # throttle it harder (often those with the lowest p99) are infeasible however good their
    # busbw and p99; the front must leave them out.
    exp, text = tiny(trials=8, mode="multi", seed=3, buffer_bytes=4 * 2**20, tenant_loss=50.0)
    res = _runner(exp, text, build_cluster(exp)).run()
    st = optuna_io.load_study("s1", exp.storage_url)
    assert optuna_io.directions(st) == ["maximize", "minimize"]
    done = [t for t in st.trials if t.state.name == "COMPLETE"]
    assert done and all(len(t.values) == 2 for t in done)
    for t in done:  # values are (busbw / line rate, p99 µs); PFC is a constraint
        assert t.values[0] == pytest.approx(t.user_attrs["metrics"]["busbw_norm"])
        assert t.values[1] == pytest.approx(t.user_attrs["metrics"]["p99_us"])
        assert t.constraints["pfc_pause"] == pytest.approx(
            t.user_attrs["metrics"]["constraint_pfc_pause"])
    infeasible = [t for t in done if any(v > 0 for v in t.constraints.values())]
    feasible = [t for t in done if t not in infeasible and t.number != 0]
    assert infeasible and feasible  # the test can tell the two apart
    front = {o.number for o in res.pareto}
    assert front and front <= {t.number for t in feasible}
    # Some infeasible trial is not dominated by any feasible one: without the feasibility
    # filter it would sit on the front, so this test fails if the filter goes.
    from objectives.score import pareto_front

    unfiltered = pareto_front([(t.number, tuple(t.values)) for t in done if t.number != 0],
                              ["maximize", "minimize"])
    assert set(unfiltered) - front
    for t in feasible:  # nothing feasible dominates a front member
        for f in front:
            ft = st.trials[f]
            assert not (t.values[0] > ft.values[0] and t.values[1] < ft.values[1])
