"""The twin (tuner/screen.py) judges every guardrail on each of its placements, as the canary
does: a twin that judged one placement reads a guardrail broken on another as met."""

from __future__ import annotations

from pathlib import Path

import pytest

from objectives.score import score
from tuner.experiment import Experiment, ModelError, load_experiment, parse_experiment
from tuner.loop import score_config
from tuner.screen import REAL_GEAR_ENSEMBLE, TwinScreen, ensemble
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
    screen = TwinScreen(exp, score_config(exp))
    twin = screen.twin
    assert [m.replicate for m in twin.baselines] == [0, 1]
    values = {**exp.current, **SETTING}
    margins = screen.evaluate(values).margins
    # Each placement alone, paired with the twin's baseline on that placement.
    twin.cluster.apply(Settings.uniform(twin.desc.canary_switches, twin.desc.canary_nics,
                                        values))
    alone = [score([twin.cluster.measure(exp.workload, replicate=r)], [twin.baselines[r]],
                   screen.cfg).constraints for r in (0, 1)]
    twin.cluster.apply(twin.base_settings)
    assert set(margins) == {"busbw_loss", "tenant_goodput", "p99", "pfc_pause"}
    for g, m in margins.items():
        assert m == pytest.approx(max(alone[0][g], alone[1][g]))
    # The test can tell: placement 0 alone reads the PFC guardrail as broken by far less.
    assert alone[1]["pfc_pause"] - alone[0]["pfc_pause"] > 0.3


def _screen(*ensemble: ModelError) -> TwinScreen:
    exp = load_experiment(QUICK)
    exp = exp.model_copy(update={"screen": exp.screen.model_copy(
        update={"ensemble": list(ensemble)})})
    return TwinScreen(exp, score_config(exp))


# On quick.yaml's twin (settings from bench/screen_error.py's spread and boundary families):
# one the twin passes and its copy with alpha / 4 storms; two the twin reads as a busbw loss
# beyond the guardrail, of which its copy with 70 % of the buffer reads the first as within it.
PASSES_STORMS = {"kmax_bytes": 2013265, "rpg_ai_rate": 3}
LOSS_COPY_GAINS = {"kmin_bytes": 53163, "kmax_bytes": 85814}
LOSS_EVERYWHERE = {"kmax_bytes": 2013265, "min_time_between_cnps": 5}


def test_a_storm_in_any_copy_of_the_twin_screens_the_setting() -> None:
    alone = _screen()
    base = alone.twin.base_settings.flat()
    assert alone.verdict({**base, **PASSES_STORMS}) is None
    both = _screen(ModelError(), ModelError(pfc_alpha=0.25))
    assert [m.label for m in both.members] == ["twin with another hash seed",
                                               "twin with PFC alpha x0.25"]
    # each copy hashes with a seed of its own; the second one's alpha is a quarter of the twin's
    assert [m.cluster.spec.seed for m in both.members] == [3, 4]
    assert [m.cluster.spec.topology.pfc_alpha_log2 for m in both.members] == [-3, -5]
    code, detail = both.verdict({**base, **PASSES_STORMS}) or ("", "")
    assert code == "screened:pfc_storm"
    assert detail.startswith("twin with PFC alpha x0.25: pfc_storm on host")
    # ``sampler: twin`` explores the twin as built: the copies do not change its scores
    assert both.evaluate({**base, **PASSES_STORMS}) == alone.evaluate({**base, **PASSES_STORMS})


def test_a_busbw_loss_is_screened_only_when_every_copy_predicts_it() -> None:
    alone = _screen()
    base = alone.twin.base_settings.flat()
    for setting in (LOSS_COPY_GAINS, LOSS_EVERYWHERE):
        assert (alone.verdict({**base, **setting}) or ("",))[0] == "screened:busbw_loss"
    wider = _screen(ModelError(buffer=0.7))
    assert wider.members[0].cluster.spec.topology.buffer_bytes == round(12582912 * 0.7)
    assert wider.verdict({**base, **LOSS_COPY_GAINS}) is None  # the canary settles it
    code, detail = wider.verdict({**base, **LOSS_EVERYWHERE}) or ("", "")
    assert code == "screened:busbw_loss"
    assert detail.endswith("(and in every copy of screen.ensemble)")


def test_a_copy_the_twin_cannot_be_built_as_is_refused_naming_it() -> None:
    from tuner.errors import ConfigError

    with pytest.raises(ConfigError, match=r"screen\.ensemble\[1\]: buffer x0\.001 takes the "
                                          r"twin out of range: buffer_bytes"):
        _screen(ModelError(), ModelError(buffer=0.001))


@pytest.mark.parametrize(("ensemble", "says"), [
    ("[{}, {buffer: 0.001}]", "screen.ensemble[1]: buffer x0.001 takes the twin out of range: "
                              "buffer_bytes: Input should be greater than or equal to 65536"),
    ("[{pfc_alpha: 3}]", "screen.ensemble.0.pfc_alpha: value 3 -- a power of two"),
    ("[{link_delay: 0}]", "screen.ensemble.0.link_delay: value 0 -- Input should be greater "
                          "than 0"),
])
def test_a_bad_ensemble_ends_the_run_with_exit_2_naming_the_file_and_field(
        tmp_path: Path, ensemble: str, says: str) -> None:
    from click.testing import CliRunner

    from tuner.cli import main

    f = tmp_path / "q.yaml"
    text = QUICK.read_text()
    assert text.count("screen: {mode: twin}") == 1
    f.write_text(text.replace("screen: {mode: twin}",
                              f"screen: {{mode: twin, ensemble: {ensemble}}}"))
    r = CliRunner().invoke(main, ["run", str(f), "--no-mlflow", "--results",
                                  str(tmp_path / "r")])
    assert r.exit_code == 2, r.output
    assert "q.yaml: " in r.output and says in r.output
    assert not (tmp_path / "r").exists()  # refused before anything ran


def _real_gear(written: str | None = None, alpha_log2: int = -3) -> Experiment:
    """quick.yaml on the ssh backend (an inventory the screen never reads), its fabric as the
    twin (``screen.fabric``), ``screen.ensemble`` written only if given (``written``)."""
    text = QUICK.read_text()
    fabric = text[text.index("fabric:\n"):text.index("canary:")]
    twin = fabric.replace("fabric:\n", "  fabric:\n").replace("\n  ", "\n    ").replace(
        "buffer_bytes: 12582912}", f"buffer_bytes: 12582912, pfc_alpha_log2: {alpha_log2}}}")
    screen = "screen:\n  mode: twin\n" + twin + (f"  ensemble: {written}\n" if written else "")
    text = text.replace(fabric, "fabric: {backend: ssh, inventory_file: lab.yaml}\n")
    return parse_experiment(text.replace("screen: {mode: twin}", screen), "lab")


def test_a_twin_of_real_gear_gets_the_measured_copies_unless_the_file_writes_them() -> None:
    assert REAL_GEAR_ENSEMBLE[1:] == ({"buffer": 0.7}, {"buffer": 1.3}, {"link_delay": 2.0},
                                      {"pfc_alpha": 0.5}, {"pfc_alpha": 2.0})
    assert ensemble(load_experiment(QUICK)) == []  # rocesim: the twin is the canary's model
    assert ensemble(_real_gear("[]")) == []
    off = _real_gear()
    off = off.model_copy(update={"screen": off.screen.model_copy(update={"mode": "off"})})
    assert ensemble(off) == []  # `sampler: twin` alone: nothing screens
    assert ensemble(_real_gear("[{buffer: 0.5}]")) == [ModelError(buffer=0.5)]
    screen = TwinScreen(_real_gear(), score_config(_real_gear()))
    assert [m.label for m in screen.members] == [
        "twin with another hash seed", "twin with buffer x0.7", "twin with buffer x1.3",
        "twin with link delay x2", "twin with PFC alpha x0.5", "twin with PFC alpha x2"]
    assert [m.cluster.spec.seed for m in screen.members] == [2, 3, 4, 5, 6, 7]  # twin: seed 1
    assert screen.left_out == []
    # no file names them: the study's MLflow params do
    assert screen.describe() == {"screen.copies": "; ".join(m.label for m in screen.members)}


def test_a_default_copy_the_twin_cannot_take_is_left_out_and_said(
        caplog: pytest.LogCaptureFixture) -> None:
    from tuner.errors import ConfigError

    exp = _real_gear(alpha_log2=3)  # alpha 8, the topology's largest: x2 is out of range
    screen = TwinScreen(exp, score_config(exp))
    assert [m.label for m in screen.members][-1] == "twin with PFC alpha x0.5"
    assert len(screen.members) == 5
    assert screen.left_out == ["twin with PFC alpha x2: pfc_alpha_log2: Input should be less "
                               "than or equal to 3"]
    assert "leaves out its default copy of the twin with PFC alpha x2" in caplog.text
    assert screen.describe()["screen.left_out"] == screen.left_out[0]
    # written, the same copy is refused when the file loads, naming it, as before
    with pytest.raises(ConfigError, match=r"screen\.ensemble\[0\]: PFC alpha x2 takes the twin"):
        _real_gear("[{pfc_alpha: 2}]", alpha_log2=3)
