"""The ``ecntune`` commands end to end: run, SIGTERM/SIGINT in a real process, resume, show,
export; exit codes as documented in ``tuner/cli/__init__.py``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from safety.journal import Journal
from tuner import optuna_io
from tuner.cli import main
from tuner.cli.export import render
from tuner.cluster.sim import SimCluster
from tuner.cluster.statefile import read_state
from tuner.experiment import Experiment

Tiny = Callable[..., tuple[Experiment, str]]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "tiny.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_bad_experiment_file_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nworkload: {parts: []}\n")
    r = CliRunner().invoke(main, ["run", str(bad)])
    assert r.exit_code == 2
    assert "bad.yaml: workload.parts" in r.output


def test_run_show_export_in_process(tiny: Tiny, tmp_path: Path) -> None:
    exp, text = tiny(trials=2)
    path = _write(tmp_path, text)
    r = CliRunner().invoke(main, ["run", str(path), "--study", "cli1", "--quiet"])
    assert r.exit_code == 0, r.output
    from tuner import optuna_io
    from tuner import study as studies

    win = studies.winner(optuna_io.load_study("cli1", exp.storage_url))
    flat = " ".join(r.output.split())  # the console wraps long lines
    # the search's own numbers are selection-biased for the trial they picked, and say so
    assert ("the search's measurements: baseline (trial 0) vs" in flat
            and "among the best here, so its change reads high" in flat)
    assert "rolled back by a safety stop: 0 of 2 proposals (0%)" in flat
    verdict = (f"winner: trial {win.number}" if win is not None
               else "nothing beat the baseline")  # what the study stored, printed
    assert verdict in r.output
    assert "canary: baseline restored" in r.output
    res = str(exp.results_path)
    r = CliRunner().invoke(main, ["show", "cli1", "--results", res])
    assert r.exit_code == 0, r.output
    assert "baseline (trial 0): paired score 0" in r.output and verdict in r.output
    r = CliRunner().invoke(main, ["export", "cli1", "--results", res, "--format", "sonic",
                                  "--trial", "0", "--all-knobs"])
    assert r.exit_code == 3 and "trial 0 is the baseline" in r.output  # nothing to change
    r = CliRunner().invoke(main, ["export", "cli1", "--results", res, "--format", "sonic",
                                  "--all-knobs", "--unconfirmed"])
    assert r.exit_code == 0, r.output
    assert "HSET 'WRED_PROFILE|ECNTUNE_CANARY' ecn ecn_all" in r.output
    r = CliRunner().invoke(main, ["export", "cli1", "--results", res, "--trial", "99"])
    assert r.exit_code == 2


def test_export_without_a_confirmed_winner_exits_3(tiny: Tiny, tmp_path: Path) -> None:
    # Every proposal equals the baseline: nothing can be confirmed.
    exp, text = tiny(trials=1, kmin=(1048576, 1048576.4), ratio=(2.0, 2.0000001),
                     pmax=(5, 5.4), ai=(5, 5.4), buffer_bytes=32 * 2**20, xoff_margin=0.0)
    path = _write(tmp_path, text)
    r = CliRunner().invoke(main, ["run", str(path), "--study", "nw", "--quiet"])
    assert r.exit_code == 0, r.output
    assert "nothing beat the baseline" in r.output
    res = str(exp.results_path)
    r = CliRunner().invoke(main, ["export", "nw", "--results", res])
    assert r.exit_code == 3 and "no confirmed winner" in r.output
    r = CliRunner().invoke(main, ["export", "nw", "--results", res, "--unconfirmed"])
    assert r.exit_code == 0 and "# study nw, trial 1" in r.output


def test_run_refuses_while_the_journal_is_dirty(tiny: Tiny, tmp_path: Path) -> None:
    """An open change in the journal (a killed run) blocks `run` until `recover` closed it."""
    exp, text = tiny(trials=1)
    path = _write(tmp_path, text)
    sim = SimCluster(exp.fabric, ["leaf0"])
    base = sim.snapshot()
    Journal(exp.results_path / "journal.jsonl").begin("old", 7, base.targets(), base, base)
    r = CliRunner().invoke(main, ["run", str(path), "--study", "d1", "--quiet"])
    assert r.exit_code == 4, r.output
    assert "open change (study old, trial 7)" in r.output and "ecntune recover" in r.output
    # Refused before the study store was opened: no optuna.db, so no study d1 in it.
    assert not (exp.results_path / "optuna.db").exists()
    # Study old is in no store here (a lost one): its baseline has no snapshot to check.
    r = CliRunner().invoke(main, ["recover", str(path)])
    assert r.exit_code == 4 and "no baseline snapshot of study 'old'" in r.output, r.output
    r = CliRunner().invoke(main, ["recover", str(path), "--trust-journal"])
    assert r.exit_code == 0 and "(--trust-journal)" in r.output, r.output
    r = CliRunner().invoke(main, ["run", str(path), "--study", "d1", "--quiet"])
    assert r.exit_code == 0, r.output


def test_a_broken_study_store_is_one_plain_line_exit_2(tiny: Tiny, tmp_path: Path) -> None:
    """optuna.db truncated (a full disk, a copy cut short) or overwritten: every command that
    reads it names the store and what is wrong, exit 2, no traceback."""
    exp, text = tiny(trials=1)
    path = _write(tmp_path, text)
    assert CliRunner().invoke(main, ["run", str(path), "--study", "b1", "--quiet"]).exit_code == 0
    db = exp.results_path / "optuna.db"
    whole = db.read_bytes()
    res = str(exp.results_path)
    for broken, why in ((whole[:5000], "database disk image is malformed"),
                        (b"not a database at all", "file is not a database")):
        db.write_bytes(broken)
        optuna_io._STORAGES.clear()  # one storage object per URL and process
        for args in (["show", "b1", "--results", res], ["export", "b1", "--results", res],
                     ["run", str(path), "--study", "b2", "--quiet"]):
            r = CliRunner().invoke(main, args)
            assert r.exit_code == 2, (args, r.output, r.exception)
            assert f"{db.name}: cannot open it: {why}" in r.output, (args, r.output)
            assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_a_path_name_too_long_for_the_file_system_is_exit_2(tiny: Tiny, tmp_path: Path) -> None:
    """The experiment file, results folder or inventory named past the file system's limit
    (255 bytes a name): one line naming the path, shortened, exit 2, no traceback."""
    exp, text = tiny(trials=1)
    long = tmp_path / ("x" * 300)
    path = _write(tmp_path, text)
    inv = _write(tmp_path, text.replace("backend: sim", f"backend: ssh\n  inventory_file: {long}"))
    for args in (["run", str(long) + ".yaml"], ["run", str(path), "--results", str(long)],
                 ["show", "s", "--results", str(long)], ["preflight", str(inv)]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2, (args, r.output, r.exception)
        out = r.output.strip()
        assert "Traceback" not in out and len(out.splitlines()) == 1 and len(out) < 300, out
        assert out.startswith("ecntune: ConfigError: ") and out.endswith(
            "characters): file name too long for the file system -- shorten the path"), out


def test_export_render_golden() -> None:
    base = {"kmin_bytes": 1_048_576, "kmax_bytes": 2_097_152, "pmax_percent": 5,
            "rpg_ai_rate": 5, "min_time_between_cnps": 0, "rpg_gd": 11}
    best = {**base, "kmin_bytes": 40_000, "kmax_bytes": 120_000, "pmax_percent": 20,
            "rpg_ai_rate": 50, "min_time_between_cnps": 4}
    text = render(best, base, ["leaf0"], ["host0/mlx5_0", "host0/mlx5_1"])
    assert text == "\n".join([
        "# mlx5 DCQCN (runtime: not persistent across reboot; as root)",
        "# on host0",
        "IF=$(ls /sys/class/infiniband/mlx5_0/device/net/ | head -n1)",
        "echo 50 > /sys/class/net/$IF/ecn/roce_rp/rpg_ai_rate",
        "echo 4 > /sys/class/net/$IF/ecn/roce_np/min_time_between_cnps",
        "IF=$(ls /sys/class/infiniband/mlx5_1/device/net/ | head -n1)",
        "echo 50 > /sys/class/net/$IF/ecn/roce_rp/rpg_ai_rate",
        "echo 4 > /sys/class/net/$IF/ecn/roce_np/min_time_between_cnps",
        "",
        "# SONiC WRED/ECN of the host-facing ports (sonic-db-cli)",
        "# on leaf0: WRED profile ECNTUNE_CANARY (the stock AZURE_LOSSLESS fields, every colour "
        "alike, with the new thresholds) on the lossless queue 3 of the host-facing ports only; "
        "every other port, uplinks included, keeps AZURE_LOSSLESS",
        ': "${HOST_PORTS:?set HOST_PORTS to the host-facing ports of this switch, e.g. '
        "'Ethernet0 Ethernet4' (uplinks excluded)}\"",
        "sudo sonic-db-cli CONFIG_DB HSET 'WRED_PROFILE|ECNTUNE_CANARY' ecn ecn_all "
        "wred_green_enable true green_min_threshold 40000 green_max_threshold 120000 "
        "green_drop_probability 20 wred_yellow_enable true yellow_min_threshold 40000 "
        "yellow_max_threshold 120000 yellow_drop_probability 20 wred_red_enable true "
        "red_min_threshold 40000 red_max_threshold 120000 red_drop_probability 20",
        'for p in $HOST_PORTS; do sudo sonic-db-cli CONFIG_DB HSET "QUEUE|$p|3" wred_profile '
        "ECNTUNE_CANARY; done",
        "",
        "# Cumulus Linux NVUE ECN of the host-facing ports",
        "# on leaf0: congestion-control profile ECNTUNE_CANARY on the host-facing ports only, "
        "traffic-class 3 with the new thresholds; every other port, uplinks included, keeps "
        "default-global, which is not written",
        "# ECNTUNE_CANARY replaces default-global on these ports, so it carries default-global's "
        "other classes: NVUE's factory TC 0 below; copy any other class this switch's "
        "default-global sets (nv show qos congestion-control default-global)",
        ': "${HOST_PORTS:?set HOST_PORTS to the host-facing ports of this switch, e.g. '
        "'swp1 swp2' (uplinks excluded)}\"",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 0 ecn enable",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 0 red disable",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 0 min-threshold 150000",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 0 max-threshold 1500000",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 0 probability 100",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 3 min-threshold 40000",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 3 max-threshold 120000",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 3 probability 20",
        "nv set qos congestion-control ECNTUNE_CANARY traffic-class 3 ecn enable",
        'for p in $HOST_PORTS; do nv set interface "$p" qos congestion-control profile '
        "ECNTUNE_CANARY; done",
        "nv config apply",
    ]) + "\n"


def _journal_begins(path: Path) -> int:
    if not path.exists():
        return 0
    return path.read_text().count('"event":"begin"')


# SIGINT's restore-before-exit is also in the default run (tests/faults/test_sim_crash.py).
@pytest.mark.parametrize("sig", [signal.SIGTERM,
                                 pytest.param(signal.SIGINT, marks=pytest.mark.slow)])
def test_signal_to_a_real_run_then_resume(tiny: Tiny, tmp_path: Path, sig: int) -> None:
    exp, text = tiny(trials=400)
    path = _write(tmp_path, text)
    journal = exp.results_path / "journal.jsonl"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(path), "--study", "sig",
                             "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)
    try:
        deadline = time.monotonic() + 120
        while _journal_begins(journal) < 3 and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "Interrupted" in err
    assert Journal(journal).dirty() is None  # every change closed: canary restored
    # The simulated devices' state outlives the process (tuner/cluster/statefile.py): what the
    # killed run left on the canary is exactly the baseline.
    left = read_state(exp.results_path / "sim-state.json")
    assert left is not None and left == SimCluster(exp.fabric, ["leaf0"]).snapshot()
    entries = Journal(journal).entries()
    assert len(entries) >= 3  # the signal came after the third trial's change was journalled
    assert all(e.outcomes == ["restored"] for e in entries)
    st = optuna_io.load_study("sig", exp.storage_url)
    done = {t.number: t.params for t in st.trials if t.state.name in ("COMPLETE", "PRUNED")}
    assert 0 in done and len(done) >= 2
    assert not [t for t in st.trials if t.state.name == "RUNNING"]
    used = len([t for t in st.trials if t.number > 0 and t.state.name != "WAITING"
                and t.user_attrs.get("verdict") != "interrupted"])
    r = CliRunner().invoke(main, ["resume", "sig", "--results", str(exp.results_path),
                                  "--trials", str(used + 2), "--quiet"])
    assert r.exit_code == 0, r.output
    st = optuna_io.load_study("sig", exp.storage_url)
    after = {t.number: t.params for t in st.trials if t.state.name in ("COMPLETE", "PRUNED")}
    assert {n: after[n] for n in done} == done  # no completed trial lost
    counted = [t for t in st.trials if t.number > 0 and t.state.name != "WAITING"
               and t.user_attrs.get("verdict") != "interrupted"]
    assert len(counted) == used + 2  # the budget counts every finished proposal exactly once


@pytest.mark.slow
def test_sigkill_mid_study_then_recover_and_resume(tiny: Tiny,
                                                               tmp_path: Path) -> None:
    """A killed process may leave a change open: resume refuses (exit 4) until `recover` has
    restored the baseline; then it closes the trial left RUNNING and finishes the budget."""
    exp, text = tiny(trials=400)
    path = _write(tmp_path, text)
    journal = exp.results_path / "journal.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "tuner", "run", str(path), "--study", "k",
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while _journal_begins(journal) < 3 and time.monotonic() < deadline:
            assert proc.poll() is None
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    st = optuna_io.load_study("k", exp.storage_url)
    done = {t.number: t.params for t in st.trials if t.state.name in ("COMPLETE", "PRUNED")}
    used = len([t for t in st.trials if t.number > 0 and t.state.name in
                ("COMPLETE", "PRUNED", "FAIL")])
    resume = ["resume", str(exp.results_path), "--trials", str(used + 1), "--quiet"]
    if Journal(journal).dirty() is not None:
        r = CliRunner().invoke(main, resume)
        assert r.exit_code == 4 and "ecntune recover" in r.output, r.output
        r = CliRunner().invoke(main, ["recover", "--results", str(exp.results_path)])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, resume)
    assert r.exit_code == 0, r.output
    assert Journal(journal).dirty() is None
    left = read_state(exp.results_path / "sim-state.json")
    assert left == SimCluster(exp.fabric, ["leaf0"]).snapshot()
    st = optuna_io.load_study("k", exp.storage_url)
    after = {t.number: t.params for t in st.trials if t.state.name in ("COMPLETE", "PRUNED")}
    assert {n: after[n] for n in done} == done
    assert not [t for t in st.trials if t.state.name == "RUNNING"]


def test_twin_trials_are_counted_apart_from_the_canary_budget(tiny: Tiny, tmp_path: Path) -> None:
    """``sampler: twin``: the budget counts canary trials only; the twin trials are counted in
    the study, printed by ``show`` and logged to the MLflow parent run with every one of them."""
    import json

    from mlflow.tracking import MlflowClient

    exp, text = tiny(trials=3)
    text = text.replace("sampler: {name: random, seed: 0}",
                        "sampler: {name: twin, seed: 0, twin_trials: 12}")
    assert "name: twin" in text
    r = CliRunner().invoke(main, ["run", str(_write(tmp_path, text)), "--study", "tw",
                                  "--quiet"])
    assert r.exit_code == 0, r.output
    st = optuna_io.load_study("tw", exp.storage_url)
    canary = [t for t in st.trials if t.user_attrs.get("role") != "baseline"]
    assert len(canary) == 3  # the budget: canary trials only
    twin = st.user_attrs["twin_trials"]
    assert twin >= 12 + 3  # the exploration, plus each canary trial measured on the twin
    r = CliRunner().invoke(main, ["show", "tw", "--results", str(exp.results_path)])
    assert r.exit_code == 0, r.output
    assert f"twin trials: {twin} on the digital twin" in r.output
    client = MlflowClient(exp.tracking_uri)
    parent = next(run for run in client.search_runs(
        [client.get_experiment_by_name(exp.tracking_experiment).experiment_id])
        if "ecntune.trial" not in run.data.tags)
    assert parent.data.metrics["twin_trials"] == twin
    logged = json.loads(Path(client.download_artifacts(
        parent.info.run_id, "twin/trials.json")).read_text())
    assert len(logged) == twin and {"params", "score", "violation", "feasible"} <= set(logged[0])


def test_resume_keeps_the_budget_the_run_was_started_with(tiny: Tiny, tmp_path: Path) -> None:
    """Red team M3: `run --trials 2` then `resume` ran the file's budget (35 more trials on the
    canary in their run); the effective budget is stored with the study."""
    exp, text = tiny(trials=6)
    path = _write(tmp_path, text)
    r = CliRunner().invoke(main, ["run", str(path), "--study", "b2", "--trials", "2", "--quiet"])
    assert r.exit_code == 0, r.output
    st = optuna_io.load_study("b2", exp.storage_url)
    assert st.user_attrs["trials_budget"] == 2 and len(st.trials) == 3  # baseline + 2
    res = str(exp.results_path)
    r = CliRunner().invoke(main, ["resume", "b2", "--results", res, "--quiet"])
    assert r.exit_code == 0, r.output
    assert len(optuna_io.load_study("b2", exp.storage_url).trials) == 3  # nothing more
    r = CliRunner().invoke(main, ["resume", "b2", "--results", res, "--trials", "3", "--quiet"])
    assert r.exit_code == 0, r.output
    st = optuna_io.load_study("b2", exp.storage_url)
    assert len(st.trials) == 4 and st.user_attrs["trials_budget"] == 3


def test_names_and_folders_that_would_escape_or_mislead(tiny: Tiny, tmp_path: Path) -> None:
    """Red team L3: a --study with '..' escaped the results folder, a results_dir that is a file
    exited 3 as if the canary were busy, a slice named '..' was accepted by all but `worker`."""
    exp, text = tiny(trials=1)
    path = _write(tmp_path, text)
    r = CliRunner().invoke(main, ["run", str(path), "--study", "../../escape", "--quiet"])
    assert r.exit_code == 2 and "--study: value '../../escape'" in r.output
    assert not (tmp_path / "escape").exists()
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = CliRunner().invoke(main, ["run", str(path), "--results", str(afile), "--quiet"])
    assert r.exit_code == 2 and "results_dir is a file, not a folder" in r.output
    sliced = _write(tmp_path, text.replace("canary: {switches: [leaf0]}",
                                           "canary: {switches: [leaf0], slices: {'..': [leaf0]}}"))
    r = CliRunner().invoke(main, ["preflight", str(sliced)])
    assert r.exit_code == 2 and "slice name '..'" in r.output


def test_kmin_above_kmax_in_current_is_one_plain_line(tiny: Tiny, tmp_path: Path) -> None:
    """Red team L3: `current` with Kmin > Kmax printed pydantic's raw dump."""
    exp, text = tiny(trials=1)
    path = _write(tmp_path, text + "current: {kmin_bytes: 500000, kmax_bytes: 100000}\n")
    r = CliRunner().invoke(main, ["preflight", str(path)])
    assert r.exit_code == 2
    assert "current: kmin_bytes (500000) must be below kmax_bytes (100000)" in r.output
    assert "validation error" not in r.output and "errors.pydantic.dev" not in r.output


def test_a_worker_refuses_a_study_name_that_would_escape(tiny: Tiny, tmp_path: Path) -> None:
    """Red team L3 "Paths", the `worker` form: its --study names the folder of the trials'
    files under the slice's results folder, so '../../../escape' would write beside it."""
    exp, text = tiny(trials=1)
    path = _write(tmp_path, text.replace("canary: {switches: [leaf0]}",
                                         "canary: {switches: [leaf0], slices: 2}"))
    r = CliRunner().invoke(main, ["worker", str(path), "--slice", "sim0",
                                  "--study", "../../../escape"])
    assert r.exit_code == 2, r.output
    assert "--study: value '../../../escape'" in r.output
    assert not (tmp_path / "escape").exists()
    assert not (exp.results_path / "slices" / "sim0" / "journal.jsonl").exists()


def test_rocesims_compile_notes_are_shown_for_the_command_only(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A first run compiles rocesim's kernel (seconds with nothing else on screen): rocesim says
    so on its ``rocesim.compile`` logger (tests/rocesim/test_compile.py), the CLI shows it."""
    import logging

    log = logging.getLogger("rocesim.compile")
    monkeypatch.setattr(main.commands["show"], "callback",
                        lambda **kw: log.info("compiling rocesim's kernel (here)"))
    r = CliRunner().invoke(main, ["show", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert r.stderr == "ecntune: compiling rocesim's kernel (here)\n"
    assert not log.handlers and log.level == logging.NOTSET  # a library again after the command
