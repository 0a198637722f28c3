"""``ecntune export`` and ``ecntune promote`` act on the confirmed winner only: every other trial
is refused (exit 3) with its reason and the override, ``--unconfirmed`` lets a completed
non-baseline trial through marked UNCONFIRMED, and never the baseline or a trial that did not
complete. Four real studies on the tiny fabric (run once per module, no MLflow): a 4 MiB buffer
and a p99 guardrail of 20 µs or the baseline's +25 % give infeasible and feasible trials;
``a`` re-measures the top two candidates (one confirmed, one over the p99 guardrail on some
placement), ``b`` only the top one, ``c`` none (no confirmation, so no winner); in ``d`` no
Kmax of the space is under the ceiling, so every proposal is rejected."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.tuner.conftest import TINY_YAML
from tuner import optuna_io
from tuner import study as studies
from tuner.cli import main
from tuner.study import TrialOutcome

# seed 6: study a keeps an unconfirmed candidate under the PFC-threshold Kmax ceiling (#22)
SETTINGS = dict(trials=8, max_pause_fraction=1.0, xoff_margin=20.0, seed=6,
                buffer_bytes=4 * 2**20, kmin_low=5000, kmin_high=10**6, ratio_low=1.5,
                ratio_high=10.0, pmax_low=1, pmax_high=100, ai_low=1, ai_high=200,
                mode="primary", repeats=1, warm="false", confirm=5, pfc_budget=1e6,
                tenant_loss=100.0, p99_allowance=25.0, placements=0)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gates")
    res = folder / "results"
    # a: the top two re-measured, one confirmed; b: only the top one re-measured; c: no
    # confirmation at all (budget.confirm_repeats 0), so no winner whatever the fabric does;
    # d: a Kmax ceiling no point of the space meets, so every proposal is rejected.
    for name, top_k, confirm, margin in (("a", 2, 5, 20.0), ("b", 1, 5, 20.0),
                                         ("c", 1, 0, 20.0), ("d", 1, 0, 99.9)):
        path = folder / f"{name}.yaml"
        path.write_text(TINY_YAML.format(**{**SETTINGS, "confirm": confirm,
                                            "xoff_margin": margin}, top_k=top_k,
                                         results=res))
        r = CliRunner().invoke(main, ["run", str(path), "--study", name, "--quiet",
                                      "--no-mlflow"])
        assert r.exit_code == 0, r.output
    return res


def _study(results: Path, name: str) -> list[TrialOutcome]:
    return studies.outcomes(optuna_io.load_study(name, f"sqlite:///{results}/optuna.db"))


def _export(results: Path, name: str, *args: str) -> Result:
    return CliRunner().invoke(main, ["export", name, "--results", str(results), *args])


def _first(results: Path, name: str, verdict: str) -> int:
    """The first trial whose verdict starts with ``verdict`` (the studies must hold one)."""
    found = [o.number for o in _study(results, name) if o.verdict.startswith(verdict)]
    assert found, f"study {name} has no {verdict} trial: the premise of the test is gone"
    return found[0]


def _winner(results: Path, name: str) -> int | None:
    win = studies.winner(optuna_io.load_study(name, f"sqlite:///{results}/optuna.db"))
    return win.number if win is not None else None


def test_the_confirmed_winner_needs_no_flag(results: Path) -> None:
    w = _winner(results, "a")
    assert w is not None
    for args in ((), ("--trial", str(w))):
        r = _export(results, "a", "--format", "sonic", *args)
        assert r.exit_code == 0, r.output
        assert r.stdout.startswith(f"# study a, trial {w} (ok,")
        assert "UNCONFIRMED" not in r.output and "sonic-db-cli CONFIG_DB HSET" in r.stdout


def test_the_baseline_is_refused_even_with_unconfirmed(results: Path) -> None:
    for flags in ((), ("--unconfirmed",)):
        r = _export(results, "a", "--trial", "0", *flags)
        assert r.exit_code == 3, r.output
        assert "trial 0 is the baseline" in r.stderr and not r.stdout


def test_a_trial_that_did_not_complete_is_refused_even_with_unconfirmed(results: Path) -> None:
    n = _first(results, "d", "rejected:")  # never applied: Kmax above the PFC onset
    for flags in ((), ("--unconfirmed",)):
        r = _export(results, "d", "--trial", str(n), *flags)
        assert r.exit_code == 3, r.output
        assert f"trial {n} is rejected:kmax_above_pfc_threshold (" in r.stderr
        assert "did not complete (PRUNED)" in r.stderr and "not even with --unconfirmed" \
            in r.stderr and not r.stdout


def test_an_infeasible_trial_is_refused_then_exported_with_its_guardrail_named(
        results: Path) -> None:
    n = _first(results, "a", "infeasible:")
    r = _export(results, "a", "--trial", str(n))
    assert r.exit_code == 3, r.output
    # the stored detail, without its code repeated: "(probe p99 7.74 -> 25.1 µs (allowed ...)"
    assert f"trial {n} is infeasible:p99 (probe p99 " in r.stderr
    assert "broke the p99 guardrail" in r.stderr
    assert "pass --unconfirmed to export it anyway" in r.stderr and not r.stdout
    r = _export(results, "a", "--trial", str(n), "--unconfirmed")
    assert r.exit_code == 0, r.output
    head = r.stdout.splitlines()[0]
    assert head.startswith(f"# UNCONFIRMED: trial {n} is infeasible:p99 (")
    assert "it broke the p99 guardrail" in head
    assert "ecntune export: WARNING: " in r.stderr and "p99 guardrail" in r.stderr


def test_a_candidate_the_confirmation_did_not_confirm_names_its_check(results: Path) -> None:
    conf = studies.confirmation(optuna_io.load_study("a", f"sqlite:///{results}/optuna.db"))
    assert conf is not None
    failed = [c for c in conf.candidates if not c.confirmed]
    assert failed, "study a has no unconfirmed candidate: the premise of the test is gone"
    c = failed[0]
    r = _export(results, "a", "--trial", str(c.trial))
    assert r.exit_code == 3, r.output
    assert f"trial {c.trial} was not confirmed: {c.problem or 'its paired'}" in r.stderr
    assert "pass --unconfirmed" in r.stderr and not r.stdout
    r = _export(results, "a", "--trial", str(c.trial), "--unconfirmed")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"# UNCONFIRMED: trial {c.trial} was not confirmed")
    assert f"# study a, trial {c.trial} " in r.stdout and "WARNING" in r.stderr


def test_a_trial_the_confirmation_never_measured_says_so(results: Path) -> None:
    conf = studies.confirmation(optuna_io.load_study("b", f"sqlite:///{results}/optuna.db"))
    assert conf is not None
    checked = {c.trial for c in conf.candidates}
    n = next(o.number for o in _study(results, "b") if o.candidate and o.number not in checked)
    r = _export(results, "b", "--trial", str(n))
    assert r.exit_code == 3, r.output
    assert f"trial {n} was not among the confirmed candidates (re-measured: trials " \
        in r.stderr


def test_without_a_winner_the_best_candidate_is_marked_unconfirmed(results: Path) -> None:
    r = _export(results, "c")
    assert r.exit_code == 3 and "has no confirmed winner" in r.stderr, r.output
    best = studies.best_unconfirmed(optuna_io.load_study("c", f"sqlite:///{results}/optuna.db"))
    assert best is not None
    r = _export(results, "c", "--unconfirmed")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"# UNCONFIRMED: trial {best.number} ")
    assert "ecntune export: WARNING: " in r.stderr


def test_bad_input_exits_2(results: Path, tmp_path: Path) -> None:
    r = _export(results, "a", "--trial", "99")
    assert r.exit_code == 2 and "--trial: value 99" in r.stderr
    w = _winner(results, "a")
    for args in (("--trial", str(w)), ("--unconfirmed",)):
        r = _export(results, "a", "--change-request", str(tmp_path / "cr"), *args)
        assert r.exit_code == 2 and "drop --trial and --unconfirmed" in r.stderr, r.output
    assert not (tmp_path / "cr").exists()


def _promote(results: Path, name: str) -> Result:
    return CliRunner().invoke(main, ["promote", name, "--results", str(results), "--to", "p"])


def test_promote_takes_the_confirmed_winner_and_nothing_else(results: Path) -> None:
    # the winner passes the gate and stops at the next check: a sim study needs --inventory
    r = _promote(results, "a")
    assert r.exit_code == 2 and "ran on the sim backend" in r.stderr, r.output
    r = _promote(results, "c")
    assert r.exit_code == 3 and "has no confirmed winner" in r.stderr, r.output


@pytest.mark.parametrize("tamper", ["unconfirmed_check", "infeasible_winner"])
def test_promote_refuses_a_stored_winner_that_did_not_win(results: Path, tmp_path: Path,
                                                          tamper: str) -> None:
    """A confirmation record that names a trial without a confirmed check, or an infeasible
    one (an inconsistent or hand-edited store), is not acted on."""
    copy = tmp_path / "results"
    shutil.copytree(results, copy)
    st = optuna_io.load_study("a", f"sqlite:///{copy}/optuna.db")
    raw = dict(st.user_attrs["confirmation"])
    w = raw["winner"]
    if tamper == "unconfirmed_check":
        raw["candidates"] = [{**c, "confirmed": c["confirmed"] and c["trial"] != w}
                             for c in raw["candidates"]]
    else:
        bad = _first(copy, "a", "infeasible:")
        won = next(c for c in raw["candidates"] if c["trial"] == w)
        raw["candidates"] = [*raw["candidates"], {**won, "trial": bad}]
        raw["winner"] = w = bad
    st.set_user_attr("confirmation", raw)
    r = _promote(copy, "a")
    assert r.exit_code == 3, r.output
    assert f"its stored winner, trial {w} (" in r.stderr and "refusing it" in r.stderr
    if tamper == "infeasible_winner":  # export does not take it as the winner either
        r = _export(copy, "a")
        assert r.exit_code == 3 and f"trial {w} is infeasible:" in r.stderr, r.output
