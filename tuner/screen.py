"""Pre-screening on the digital twin: skip a proposal the twin predicts to storm or to lose more
bus bandwidth than its guardrail allows, before it touches the canary.

The twin is rocesim configured like the canary (topology, speeds, buffer, the declared
workload). Each proposal is applied to the twin and measured on ``screen.placements`` paired
placements, under the same live monitor and post-hoc rules as a trial, against the twin's own
baseline on the same placements, every guardrail judged on each; a predicted storm (or any other
safety violation) or a busbw loss beyond ``objective.guardrails.max_busbw_loss_percent`` gives
the verdict ``screened:<reason>``: recorded, told to the sampler as infeasible, never applied.
The screen costs simulator time only, and is judged by ``bench/search.py`` (storms prevented,
good settings wrongly skipped). The same twin serves ``sampler: twin`` (``evaluate``, the
score and guardrails on the twin; ``tuner/twin_search.py``); each setting is measured there
once, for both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from objectives.score import score
from safety.limits import describe
from safety.monitor import LiveMonitor, judge, storm_window_s
from tuner.errors import SafetyAbort
from tuner.settings import Settings
from tuner.twin_search import TwinResult

if TYPE_CHECKING:
    from objectives.measurement import Measurement
    from objectives.score import Score, ScoreConfig
    from tuner.cluster.sim import SimCluster
    from tuner.experiment import Experiment


class TwinScreen:
    """The twin and its baseline; ``verdict(values)`` is None (apply it) or ``screened:<why>``."""

    def __init__(self, exp: Experiment, cfg: ScoreConfig,
                 recorded: dict[str, Any] | None = None) -> None:
        from tuner import calibrate
        from tuner.cluster.sim import SimCluster

        spec = calibrate.twin_spec(exp)
        # ``ecntune calibrate``'s values for this twin, when it fitted this declaration: the
        # study's (``recorded``, a shared study's other workers) before the results folder's
        self.calibration = calibrate.for_twin(exp.results_path, spec, recorded)
        if self.calibration is not None:
            spec = calibrate.with_values(spec, self.calibration["overrides"])
        switches, field = calibrate.twin_canary(exp)
        self.exp = exp
        self.cfg = cfg
        self.twin: SimCluster = SimCluster(spec, switches, dict(exp.current), name="twin",
                                           field=field)
        self.desc = self.twin.describe()
        self.base_settings = self.twin.snapshot()
        self.baselines: list[Measurement] = [self.twin.measure(exp.workload, replicate=r)
                                             for r in range(exp.screen.placements)]
        self.window_s = storm_window_s(exp.safety,
                                       min(m.duration_s for m in self.baselines))
        self._seen: dict[tuple[tuple[str, int], ...],
                         tuple[Score | None, tuple[str, str] | None]] = {}

    def verdict(self, values: dict[str, int]) -> tuple[str, str] | None:
        """(verdict, detail) when the twin predicts trouble, else None."""
        sc, trouble = self._measure(values)
        if trouble is not None:
            return trouble
        assert sc is not None
        loss = [text for code, text in sc.violations() if code == "busbw_loss"]
        return ("screened:busbw_loss", f"twin: {loss[0]}") if loss else None

    def evaluate(self, values: dict[str, int]) -> TwinResult:
        """The twin's score for ``values`` and its guardrail margins (``sampler: twin``)."""
        sc, trouble = self._measure(values)
        if trouble is not None or sc is None:
            return TwinResult(score=None)
        return TwinResult(score=sc.scalar, margins=dict(sc.constraints))

    def _measure(self, values: dict[str, int]) -> tuple[Score | None, tuple[str, str] | None]:
        """One twin measurement of ``values`` (kept: the screen and the search ask alike)."""
        key = tuple(sorted(values.items()))
        if key not in self._seen:
            self._seen[key] = self._measure_now(values)
        return self._seen[key]

    def _measure_now(self, values: dict[str, int]
                     ) -> tuple[Score | None, tuple[str, str] | None]:
        settings = Settings.uniform(self.desc.canary_switches, self.desc.canary_nics, values)
        self.twin.apply(settings)
        try:
            ms = []
            for r in range(len(self.baselines)):
                m = self.twin.measure(self.exp.workload,
                                      LiveMonitor(self.exp.safety, self.window_s), replicate=r)
                found = judge(m, self.exp.safety, self.window_s)
                if found:
                    return None, (f"screened:{found[0].code}", "twin: " + describe(found))
                ms.append(m)
            return score(ms, self.baselines, self.cfg), None
        except SafetyAbort as exc:
            return None, (f"screened:{exc.reason}", f"twin: {exc.detail}")
        finally:
            self.twin.apply(self.base_settings)
