"""The traffic profile of a fabric, and the rule that says when the mix has moved.

A profile is a handful of counter *rates* sampled over consecutive intervals of production
traffic (ECN marks, CNPs, PFC paused time, bytes per priority, optionally a probe's p99), kept
per interval so the spread is known, not only the mean. One is recorded under the settings a
study deployed (``TrafficProfile``, saved as ``traffic-profile.json`` with the study); ``ecntune
watch`` samples the same rates later and ``compare`` decides whether a re-tune is advised.

The decision rule (``compare``), per feature ``f`` present in both windows:

* work on ``x = ln(rate + 1/interval_s)``: mixes move rates by factors, and counter noise grows
  with the rate, so logs make the spread comparable; ``1/interval_s`` (one event per interval,
  the counter's resolution; the shorter window's, on both sides) keeps an idle counter finite
  and two idle windows equal;
* Welch's two-sample t-test of mean ``x`` (baseline vs now; unequal variances and sizes): the
  chance that an *unchanged* mix shows a difference this large by sampling noise alone;
* a feature is *moved* when that p-value is below ``alpha / k`` (Bonferroni over the ``k``
  features compared, so the chance of any false alarm in one check stays below ``alpha``) **and**
  the geometric-mean rate changed by more than ``min_ratio`` (practical relevance: with many
  samples a 3 % shift is "significant" but not worth a re-tune);
* a re-tune is advised when any feature moved.

Assumptions worth knowing: intervals are treated as independent (long intervals on a real
fabric make that closer to true; autocorrelated traffic makes false alarms likelier than
``alpha``), and log-rates are taken as roughly normal within a window (the t-test is robust to
moderate departures; ``tests/lifecycle/test_profile.py`` measures the false-alarm rate).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from safety.files import write_file
from tuner.errors import ConfigError

if TYPE_CHECKING:
    from objectives.measurement import Counters

MIN_SAMPLES = 3  # Welch's t needs a variance estimate from each window
PROFILE_FILE = "traffic-profile.json"


def feature_counters(priority: int, queue: int) -> dict[str, str]:
    """Feature name -> the counter summed over ports (real device names, absent != zero)."""
    p, q = int(priority), int(queue)
    return {
        f"queue{q}_ecn_marked_pkts": "switch egress packets ECN-marked on the lossless queue",
        "np_ecn_marked_roce_packets": "NIC: RoCE packets received with CE (notification point)",
        "np_cnp_sent": "NIC: CNPs sent (notification point)",
        "rp_cnp_handled": "NIC: CNPs handled (reaction point)",
        f"rx_prio{p}_pause_duration": "NIC: time paused by PFC on the RoCE priority [us]",
        f"pfc{q}_rx_pause_us": "switch: time paused by PFC on the lossless priority [us]",
        f"pfc{q}_rx_pkts": "switch: PFC pause frames received on the lossless priority",
        f"tx_prio{p}_bytes": "NIC: bytes sent on the RoCE priority",
        "tx_other_prio_bytes": "NIC: bytes sent on every other priority",
    }


LATENCY_FEATURE = "probe_p99_us"


def features(delta: Counters, seconds: float, priority: int = 3, queue: int = 3,
             ports: list[str] | None = None) -> dict[str, float]:
    """Per-second rates of one interval's counter deltas (only counters some port exposes).

    Each port's delta is divided by its own interval where the reading timed ports one by one
    (``Counters.port_taken_at_s``: over SSH the targets are read in parallel, and a target read
    late in one reading and early in the next would otherwise show a burst or a lull), else by
    ``seconds``. Example: ``{"np_cnp_sent": 1.2e5, "tx_prio3_bytes": 9.8e10}``.
    """
    rows = {p: r for p, r in delta.ports.items() if ports is None or p in ports}
    spans = {p: delta.port_taken_at_s.get(p, seconds) for p in rows}
    short = {p: s for p, s in spans.items() if s <= 0}
    if short:
        raise ValueError(f"interval of {min(short.values())} s on {sorted(short)}: counters "
                         "were not taken apart in time")
    others = [f"tx_prio{x}_bytes" for x in range(8) if x != priority]
    out: dict[str, float] = {}
    for name in feature_counters(priority, queue):
        names = others if name == "tx_other_prio_bytes" else [name]
        vals = [r[c] / spans[p] for p, r in rows.items() for c in names if c in r]
        if vals:
            out[name] = sum(vals)
    return out


class TrafficProfile(BaseModel):
    """Counter rates per interval, recorded under known settings.

    ``samples[feature][i]`` is the rate of interval ``i``; ``settings`` are the (flat) knob
    values in force while sampling, ``study`` the study that deployed them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: int = 1
    study: str = ""
    recorded_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(
        timespec="seconds"))
    source: str = ""  # backend and cluster name the samples came from
    ports: list[str] = Field(default_factory=list)
    priority: int = Field(default=3, ge=0, le=7)
    lossless_queue: int = Field(default=3, ge=0, le=7)
    interval_s: float = Field(gt=0)  # mean interval length (sim: simulated seconds)
    settings: dict[str, int] = Field(default_factory=dict)
    samples: dict[str, list[float]] = Field(default_factory=dict)

    @property
    def n(self) -> int:
        return min((len(v) for v in self.samples.values()), default=0)

    def save(self, path: str | Path) -> Path:
        return write_file(path, self.model_dump_json(indent=1) + "\n")


def load_profile(path: str | Path) -> TrafficProfile:
    p = Path(path)
    try:
        return TrafficProfile.model_validate_json(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read traffic profile: {exc.strerror}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "<top level>"
        raise ConfigError(f"{p}: not a traffic profile: {where}: {first['msg']}") from None


class FeatureVerdict(BaseModel):
    """One feature's comparison: geometric-mean rates, their ratio, Welch's p, the verdict."""

    model_config = ConfigDict(frozen=True)
    feature: str
    baseline_rate: float
    current_rate: float
    ratio: float  # current / baseline geometric-mean rate (floor included)
    t: float
    df: float
    p_value: float
    moved: bool


class Verdict(BaseModel):
    """The whole comparison: per-feature verdicts and the advice."""

    model_config = ConfigDict(frozen=True)
    features: list[FeatureVerdict]
    alpha: float
    min_ratio: float
    retune_advised: bool
    baseline_n: int
    current_n: int
    missing: list[str] = Field(default_factory=list)  # in the profile, not measured now

    @property
    def moved(self) -> list[FeatureVerdict]:
        return [f for f in self.features if f.moved]

    def status_line(self) -> str:
        """One line for a terminal, a cron mail or a chat bot."""
        if self.retune_advised:
            parts = [f"{f.feature} x{f.ratio:.3g} (p={f.p_value:.1e})"
                     for f in sorted(self.moved, key=lambda f: -abs(math.log(f.ratio)))]
            return f"RETUNE ADVISED: traffic mix moved: {', '.join(parts)}"
        if not self.features:
            return "UNKNOWN: no counter in common with the profile"
        big = max(self.features, key=lambda f: abs(math.log(f.ratio)))
        return (f"OK: mix unchanged ({len(self.features)} rates within noise or below "
                f"x{self.min_ratio:g}; largest change {big.feature} x{big.ratio:.3g}, "
                f"p={big.p_value:.2g})")


def _mean_var(xs: list[float]) -> tuple[float, float]:
    m = sum(xs) / len(xs)
    return m, sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Welch's t, its Welch-Satterthwaite degrees of freedom, and the two-sided p-value.

    Both windows without spread: p is 1 when their means are equal, else 0 (no noise explains
    any difference).
    """
    from scipy.stats import t as student_t

    ma, va = _mean_var(a)
    mb, vb = _mean_var(b)
    se2 = va / len(a) + vb / len(b)
    if se2 <= 0.0:
        same = math.isclose(ma, mb, rel_tol=0.0, abs_tol=1e-12)
        return (0.0 if same else math.copysign(math.inf, mb - ma)), math.inf, \
            (1.0 if same else 0.0)
    t = (mb - ma) / math.sqrt(se2)
    df = se2 ** 2 / ((va / len(a)) ** 2 / (len(a) - 1) + (vb / len(b)) ** 2 / (len(b) - 1))
    return t, df, float(2.0 * student_t.sf(abs(t), df))


def compare(profile: TrafficProfile, current: dict[str, list[float]], interval_s: float,
            alpha: float = 0.01, min_ratio: float = 1.5) -> Verdict:
    """Has the mix moved from ``profile``? See the module docstring for the rule."""
    if not 0.0 < alpha < 1.0:
        raise ConfigError(f"alpha {alpha:g}: must be between 0 and 1")
    if min_ratio < 1.0:
        raise ConfigError(f"min_ratio {min_ratio:g}: must be at least 1 (a factor of change)")
    shared = sorted(f for f in profile.samples if f in current)
    n_now = min((len(current[f]) for f in shared), default=0)
    if profile.n < MIN_SAMPLES or n_now < MIN_SAMPLES:
        raise ConfigError(f"need at least {MIN_SAMPLES} intervals in each window; the profile "
                          f"has {profile.n}, this check {n_now}")
    k = len(shared)
    floor = 1.0 / min(profile.interval_s, interval_s)  # the coarser window's resolution
    verdicts = []
    for f in shared:
        a = [math.log(x + floor) for x in profile.samples[f]]
        b = [math.log(x + floor) for x in current[f]]
        t, df, p = welch(a, b)
        shift = sum(b) / len(b) - sum(a) / len(a)
        moved = p < alpha / k and abs(shift) > math.log(min_ratio)
        verdicts.append(FeatureVerdict(
            feature=f, baseline_rate=math.exp(sum(a) / len(a)),
            current_rate=math.exp(sum(b) / len(b)), ratio=math.exp(shift), t=t, df=df,
            p_value=p, moved=moved))
    return Verdict(features=verdicts, alpha=alpha, min_ratio=min_ratio,
                   retune_advised=any(v.moved for v in verdicts), baseline_n=profile.n,
                   current_n=n_now, missing=sorted(set(profile.samples) - set(current)))


# Prometheus text exposition format (version 0.0.4), for the node-exporter textfile collector:
# "# HELP name text" and "# TYPE name gauge" once per metric family, then
# name{label="value"} number; label values escape backslash, double quote and newline.

def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(x: float) -> str:
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x))


def prometheus_text(verdict: Verdict, profile: TrafficProfile, now_s: float) -> str:
    """The verdict as gauges, one family per quantity, labelled by feature and study."""
    study = _label(profile.study or "unknown")
    fams: list[tuple[str, str, list[tuple[str, float]]]] = [
        ("ecntune_watch_retune_advised",
         "1 when the traffic mix moved enough from the tuned profile that a re-tune is advised",
         [(f'{{study="{study}"}}', float(verdict.retune_advised))]),
        ("ecntune_watch_last_run_timestamp_seconds", "Unix time of this check",
         [(f'{{study="{study}"}}', now_s)]),
        ("ecntune_watch_samples", "intervals sampled in this check",
         [(f'{{study="{study}"}}', float(verdict.current_n))]),
        ("ecntune_watch_alpha", "family-wise false-alarm rate of the decision rule",
         [(f'{{study="{study}"}}', verdict.alpha)]),
    ]
    per = [("ecntune_watch_rate_ratio", "current / profile geometric-mean rate of a counter",
            "ratio"),
           ("ecntune_watch_p_value", "Welch t-test p-value of the log-rate change", "p_value"),
           ("ecntune_watch_moved", "1 when this counter's rate moved (significant and large)",
            "moved"),
           ("ecntune_watch_current_rate", "geometric-mean rate now, per second",
            "current_rate"),
           ("ecntune_watch_profile_rate", "geometric-mean rate in the profile, per second",
            "baseline_rate")]
    for name, help_text, attr in per:
        fams.append((name, help_text, [
            (f'{{study="{study}",feature="{_label(v.feature)}"}}', float(getattr(v, attr)))
            for v in verdict.features]))
    lines: list[str] = []
    for name, help_text, samples in fams:
        lines.append(f"# HELP {name} {help_text}")
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{labels} {_num(value)}" for labels, value in samples)
    return "\n".join(lines) + "\n"


def write_textfile(path: str | Path, text: str) -> Path:
    """Write atomically (temporary file in the same folder, then rename): the collector must
    never read half a file."""
    p = Path(path)
    try:
        return write_file(p, text)
    except OSError as exc:
        raise ConfigError(f"{p}: cannot write the Prometheus textfile: {exc.strerror}") \
            from None
