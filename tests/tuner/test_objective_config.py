"""The objective as operators state it: a primary metric and guardrails with units in their
names. A mistake ends with exit 2 naming the field, before anything is applied."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from objectives.score import Guardrails
from tuner.cli import main
from tuner.experiment import parse_experiment

MINIMAL = """
name: t
workload:
  parts:
    - {kind: collective, op: alltoall, size_bytes: 65536}
"""


def test_the_default_objective_is_busbw_under_per_placement_guardrails() -> None:
    o = parse_experiment(MINIMAL).objective
    assert (o.mode, o.primary) == ("primary", "busbw")
    assert o.guardrails == Guardrails(max_busbw_loss_percent=20, max_tenant_loss_percent=20,
                                      p99_target_us=20, p99_allowance_percent=25,
                                      max_pfc_pause_us_per_s=1000)


@pytest.mark.parametrize(("snippet", "field", "why"), [
    ("objective: {guardrails: {pfc_pause: 1000}}", "objective.guardrails.pfc_pause",
     "unknown field; allowed: max_busbw_loss_percent"),  # a guardrail with no unit
    ("objective: {guardrails: {p99_allowance_percent: -5}}",
     "objective.guardrails.p99_allowance_percent", "greater than or equal to 0"),
    ("objective: {primary: goodput}", "objective.primary", "not allowed; allowed: 'busbw'"),
    ("budget: {confirm_repeats: 4}", "budget.confirm_repeats",
     "at least 5 paired confirmation repeats"),
    ("objective: {primary: p99_us}", "<top level>", "needs a probe part"),
])
def test_bad_objectives_exit_2_naming_the_field(tmp_path: Path, snippet: str, field: str,
                                                 why: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(MINIMAL + snippet + f"\nresults_dir: {tmp_path / 'r'}\n")
    r = CliRunner().invoke(main, ["run", str(path)])
    assert r.exit_code == 2, r.output
    assert f"{path}: {field}: " in r.output and why in r.output, r.output
    assert not (tmp_path / "r").exists()  # nothing was measured, nothing was applied


def test_scalar_weights_only_matter_in_scalar_mode() -> None:
    # The composite's weight rule (check_weights) binds only where the composite is used.
    heavy = "objective: {mode: MODE, latency_weight: 1.0, pfc_weight: 1.0}\n"
    assert parse_experiment(MINIMAL + heavy.replace("MODE", "primary")).objective.mode \
        == "primary"
    with pytest.raises(Exception, match="exceeds busbw_weight"):
        parse_experiment(MINIMAL + heavy.replace("MODE", "scalar"))
