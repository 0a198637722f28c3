"""Experiment files: the shipped ones validate; mistakes name file, field, value, allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.errors import ConfigError
from tuner.experiment import load_experiment, parse_experiment

ROOT = Path(__file__).resolve().parents[2]
MINIMAL = """
name: t
workload:
  parts:
    - {kind: collective, op: alltoall, size_bytes: 65536}
"""


@pytest.mark.parametrize("name", ["quick", "new-cluster", "moe-mix"])
def test_shipped_experiments_validate(name: str) -> None:
    exp = load_experiment(ROOT / "experiments" / f"{name}.yaml")
    assert exp.name == name
    assert exp.workload.collectives


def test_defaults_put_stores_next_to_results() -> None:
    assert parse_experiment(MINIMAL).results_dir == "results/t"
    exp = parse_experiment(MINIMAL + "results_dir: /tmp/r\n")
    assert exp.storage_url == "sqlite:////tmp/r/optuna.db"
    assert exp.tracking_uri == "sqlite:////tmp/r/mlflow.db"
    assert exp.tracking_experiment == "ecntune/t"
    assert exp.safety.xoff_margin_percent == 20.0


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_experiment(text, "exp.yaml")
    return str(info.value)


def test_out_of_range_names_field_value_and_range() -> None:
    msg = _error(MINIMAL + "search:\n  knobs:\n    rpg_ai_rate: {low: 1, high: 999999}\n")
    assert msg.startswith("exp.yaml: search.knobs: ")
    assert "rpg_ai_rate.high=999999" in msg and "1..131071 Mbit/s" in msg


def test_unknown_field_lists_allowed_fields() -> None:
    msg = _error(MINIMAL + "budget: {trials: 3, trails: 4}\n")
    assert "exp.yaml: budget.trails: value 4 -- unknown field; allowed: trials, wall_time_s" in msg


def test_literal_lists_allowed_values() -> None:
    msg = _error(MINIMAL + "sampler: {name: bayes}\n")
    assert "sampler.name: value 'bayes'" in msg and "'tpe'" in msg and "'random'" in msg


def test_kmax_cannot_be_searched_directly() -> None:
    msg = _error(MINIMAL + "search:\n  knobs:\n    kmax_bytes: {low: 1000, high: 9000}\n")
    assert "kmax_ratio" in msg


def test_unknown_knob_and_bad_yaml_line() -> None:
    assert "unknown knob 'rpg_foo'" in _error(MINIMAL + "current: {rpg_foo: 1}\n")
    msg = _error("name: t\nworkload: [\n")
    assert msg.startswith("exp.yaml:3: not valid YAML")


# The bounded latency and PFC terms must not outweigh busbw (objectives.score.check_weights):
# refused at load time, so a study never runs on weights that let a trial halving bus bandwidth
# beat the baseline. mode: scalar is spelled out: the weights only apply to the scalar score.
HEAVY = MINIMAL + ("objective: {mode: scalar, busbw_weight: 1.0, latency_weight: 0.75, "
                   "pfc_weight: 0.5}\n")
HEAVY_SAYS = "latency_weight + pfc_weight (1.25) exceeds busbw_weight (1)"


def test_scalar_weights_outweighing_busbw_are_refused(tmp_path: Path) -> None:
    msg = _error(HEAVY)
    assert msg.startswith("exp.yaml: objective: ") and HEAVY_SAYS in msg
    path = tmp_path / "heavy.yaml"
    path.write_text(HEAVY, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"heavy\.yaml: objective: .*latency_weight \+ "
                                          r"pfc_weight \(1\.25\) exceeds busbw_weight"):
        load_experiment(path)
    # The line is drawn at "exceeds": weights that sum to busbw's are fine.
    exp = parse_experiment(MINIMAL + "objective: {mode: scalar, busbw_weight: 1.0, "
                                     "latency_weight: 0.5, pfc_weight: 0.5}\n")
    assert (exp.objective.latency_weight, exp.objective.pfc_weight) == (0.5, 0.5)


def test_run_refuses_scalar_weights_outweighing_busbw_with_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from tuner.cli import main

    path = tmp_path / "heavy.yaml"
    # A one-trial budget: if the weights were let through, the run is a short study.
    path.write_text(HEAVY + f"results_dir: {tmp_path / 'results'}\n"
                    "budget: {trials: 1, repeats: 1, confirm_repeats: 0}\n", encoding="utf-8")
    r = CliRunner().invoke(main, ["run", str(path), "--quiet"])
    assert r.exit_code == 2, r.output
    assert "heavy.yaml: objective: " in r.output and HEAVY_SAYS in r.output
    assert not (tmp_path / "results").exists()  # refused before anything was created


def test_missing_file_names_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope.yaml: cannot read"):
        load_experiment(tmp_path / "nope.yaml")


def test_every_field_is_in_the_reference() -> None:
    """docs/experiment-file.md has a row for every section and names each section's fields
    (as ``section.field`` or, in the section's rows, ``field``)."""
    import re
    import typing

    from pydantic import BaseModel

    from tuner.experiment import Experiment

    doc = (ROOT / "docs" / "experiment-file.md").read_text(encoding="utf-8")
    rows = [line for line in doc.splitlines() if line.startswith("| `")]
    missing = []
    for name, field in Experiment.model_fields.items():
        mine = [r for r in rows if re.match(rf"\| `{name}[`.]", r)]
        if not mine:
            missing.append(name)
            continue
        sub = next((a for a in (field.annotation, *typing.get_args(field.annotation))
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
        for sf in sub.model_fields if sub is not None else ():
            if not any(f"`{sf}`" in r or f"`{name}.{sf}`" in r for r in mine):
                missing.append(f"{name}.{sf}")
    assert not missing, f"not in docs/experiment-file.md: {missing}"


def test_the_default_sampler_is_twin_where_the_experiment_has_a_twin() -> None:
    assert parse_experiment(MINIMAL).sampler.name == "twin"  # the simulator backend
    ssh = MINIMAL + "fabric: {backend: ssh, inventory_file: inv.yaml}\n"
    assert parse_experiment(ssh).sampler.name == "tpe"  # no twin described
    twin = ssh + ("screen: {fabric: {topology: {kind: leaf_spine, leaves: 2, spines: 1, "
                  "hosts_per_leaf: 4}}}\n")
    assert parse_experiment(twin).sampler.name == "twin"
    assert parse_experiment(ssh + "sampler: {seed: 3}\n").sampler.name == "tpe"


def test_twin_sampler_without_a_twin_names_the_fields() -> None:
    msg = _error(MINIMAL + "fabric: {backend: ssh, inventory_file: inv.yaml}\n"
                 "sampler: {name: twin}\n")
    assert "exp.yaml" in msg and "sampler.name twin" in msg and "screen.fabric" in msg


def test_a_budget_smaller_than_start_up_plus_confirmation_names_the_fields() -> None:
    msg = _error(MINIMAL + "sampler: {name: tpe, startup_trials: 6}\n"
                 "budget: {trials: 8, confirm_top_k: 3}\n")
    assert "budget.trials 8" in msg and "sampler.startup_trials (6" in msg
    assert "budget.confirm_top_k (3" in msg and "at least 9" in msg
    parse_experiment(MINIMAL + "sampler: {name: tpe, startup_trials: 6}\n"
                     "budget: {trials: 9, confirm_top_k: 3}\n")  # enough
    parse_experiment(MINIMAL + "budget: {trials: 3, confirm_top_k: 3}\n")  # twin: no start-up


def test_the_budget_check_applies_to_a_start_up_the_file_chose() -> None:
    # SSH without a twin falls back to tpe, and a one-trial smoke test stays allowed there.
    ssh = MINIMAL + "fabric: {backend: ssh, inventory_file: inv.yaml}\n"
    assert parse_experiment(ssh + "budget: {trials: 1}\n").sampler.name == "tpe"
    assert "budget.trials 1" in _error(ssh + "budget: {trials: 1}\nsampler: {name: tpe}\n")
    parse_experiment(MINIMAL + "budget: {trials: 1}\nsampler: {name: random}\n")  # no start-up


def test_yaml_merge_keys_work_and_binary_values_are_refused() -> None:
    """Red team L3: every legitimate merge key was refused; ``!!binary`` smuggled a newline
    into results_dir past the control-character check."""
    exp = parse_experiment(MINIMAL + "search:\n  knobs:\n"
                           "    kmin_bytes: &r {low: 20000, high: 200000, log: true}\n"
                           "    rpg_ai_rate:\n      <<: *r\n      low: 1\n      high: 100\n")
    ai = exp.search.knobs["rpg_ai_rate"]
    assert (ai.low, ai.high, ai.log) == (1, 100, True)  # merged, then overridden
    msg = _error(MINIMAL + "results_dir: !!binary cmVzdWx0cwpldmls\n")  # b"results\nevil"
    assert "exp.yaml: results_dir: a binary value (!!binary)" in msg


def test_the_pfc_dynamic_threshold_reaches_the_simulated_switch() -> None:
    """``fabric.topology.pfc_alpha_log2`` is the switch's alpha (SONiC's dynamic_th): the PFC
    onset, so the Kmax ceiling, is N*alpha*B/(1 + N*alpha) of the simulated switch's pool
    (quick.yaml: 12 MiB, two ingress PGs; alpha 1/8: 2516582 B, alpha 1/4: 4194304 B)."""
    from safety.limits import PfcThreshold
    from tuner.cluster.sim import SimCluster

    exp = load_experiment(Path(__file__).resolve().parents[2] / "experiments" / "quick.yaml")
    onset = {}
    for a in (-3, -2):
        fabric = exp.fabric.model_copy(update={"topology": exp.fabric.topology.model_copy(
            update={"pfc_alpha_log2": a})})
        facts = SimCluster(fabric, ["leaf0"], dict(exp.current)).describe().facts
        pfc = PfcThreshold.from_facts(facts)
        assert pfc is not None
        onset[a] = pfc.onset_bytes()
    assert onset == {-3: 2516582, -2: 4194304}


def _float_fields(model: type, path: str = "") -> list[tuple[str, list[object]]]:
    """(dotted path, metadata) of every float field under ``model``, nested models included."""
    import typing

    from pydantic import BaseModel

    def parts(ann: object) -> list[object]:
        return [ann, *(a for arg in typing.get_args(ann) for a in parts(arg))]

    out: list[tuple[str, list[object]]] = []
    for name, f in model.model_fields.items():  # type: ignore[attr-defined]
        found = parts(f.annotation)
        if float in found:
            out.append((f"{path}{name}", list(f.metadata)))
        for sub in dict.fromkeys(a for a in found
                                 if isinstance(a, type) and issubclass(a, BaseModel)):
            out += _float_fields(sub, f"{path}{name}.")
    return out


def test_every_number_of_an_experiment_is_finite() -> None:
    """Red team L3 "Tracebacks": .inf in kmax_ratio's range, a collective's weight, the PFC
    guardrail or busbw_weight ended in a traceback when the trial was told; in p99_target_us
    it switched the guardrail off. Every float field is bounded above or refuses .inf/.nan;
    the safety limits whose bound ``--i-know`` lifts (``SOFT_BOUNDS``) refuse them by their
    validator (tests/tuner/test_i_know.py)."""
    import annotated_types

    from safety.limits import SOFT_BOUNDS
    from tuner.experiment import Experiment

    fields = _float_fields(Experiment)
    assert len(fields) >= 20 and "search.knobs.high" in dict(fields)
    open_ended = [p for p, meta in fields
                  if not any(isinstance(m, annotated_types.Le | annotated_types.Lt)
                             or getattr(m, "allow_inf_nan", None) is False for m in meta)
                  and p.removeprefix("safety.") not in SOFT_BOUNDS]
    assert open_ended == []
    for field, text in [
        ("search.knobs.kmax_ratio.high", "search:\n  knobs:\n    kmin_bytes: {low: 2.0e+4}\n"
                                         "    kmax_ratio: {low: 1.5, high: .inf}\n"),
        ("workload.parts.0.collective.weight",
         "workload:\n  parts:\n    - {kind: collective, op: alltoall, size_bytes: 65536, "
         "weight: .nan}\n"),
        ("objective.guardrails.p99_target_us", "objective: {guardrails: {p99_target_us: .inf}}\n"),
    ]:
        msg = _error(MINIMAL + text if not text.startswith("workload") else "name: t\n" + text)
        assert f"exp.yaml: {field}: " in msg and "finite number" in msg, msg
