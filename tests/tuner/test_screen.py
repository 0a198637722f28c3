"""The twin (tuner/screen.py) judges every guardrail on each of its placements, as the canary
does: a twin that judged one placement reads a guardrail broken on another as met."""

from __future__ import annotations

from pathlib import Path

import pytest

from objectives.score import score
from tuner.experiment import load_experiment
from tuner.loop import score_config
from tuner.screen import TwinScreen
from tuner.settings import Settings

QUICK = Path(__file__).resolve().parents[2] / "experiments" / "quick.yaml"
# On quick.yaml's twin this setting pauses the NICs on both placements, far more on the second.
SETTING = {"kmin_bytes": 400_000, "kmax_bytes": 1_599_999, "pmax_percent": 20}


def test_the_twin_judges_each_guardrail_on_its_worst_placement() -> None:
    exp = load_experiment(QUICK)
    assert exp.screen.placements == 1  # the default
    # measured with the twin reading dce_tcp_g as the share kept (tests/tuner/trial_variants)
    topo = exp.fabric.topology.model_copy(update={"dce_tcp_g_reading": "kept"})
    exp = exp.model_copy(update={"screen": exp.screen.model_copy(update={"placements": 2}),
                                 "fabric": exp.fabric.model_copy(update={"topology": topo})})
    twin = TwinScreen(exp, score_config(exp))
    assert [m.replicate for m in twin.baselines] == [0, 1]
    values = {**exp.current, **SETTING}
    margins = twin.evaluate(values).margins
    # Each placement alone, paired with the twin's baseline on that placement.
    twin.twin.apply(Settings.uniform(twin.desc.canary_switches, twin.desc.canary_nics, values))
    alone = [score([twin.twin.measure(exp.workload, replicate=r)], [twin.baselines[r]],
                   twin.cfg).constraints for r in (0, 1)]
    twin.twin.apply(twin.base_settings)
    assert set(margins) == {"busbw_loss", "tenant_goodput", "p99", "pfc_pause"}
    for g, m in margins.items():
        assert m == pytest.approx(max(alone[0][g], alone[1][g]))
    # The test can tell: placement 0 alone reads the PFC guardrail as broken by far less.
    assert alone[1]["pfc_pause"] - alone[0]["pfc_pause"] > 0.3
