"""Settings of known behaviour on experiments/quick.yaml, for the storm and screen tests.

They were measured, and are kept, with the twin reading ``dce_tcp_g`` as the share of alpha
kept (``fabric.topology.dce_tcp_g_reading: kept``): there quick.yaml's vendor defaults pause
the incast ~1.3 % of the time, the baseline these mechanisms (storm window, keep-best under a
broken PFC guardrail) need. Under the twin's default reading, mstflint's, the same defaults
pause 0.04 % of the time (README)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tuner.experiment import Experiment, parse_experiment

ROOT = Path(__file__).resolve().parents[2]

# Two settings on experiments/quick.yaml's fabric and workload (AlltoAll + AllReduce + a 6:1
# storage incast at 80 % in the RoCE priority), measured with rocesim:
# STORM recovers the senders' rate every 2 µs (rpg_time_reset), so the incast senders are never
# held back: they stay paused 80 % of every half-measurement window and the AlltoAll finishes 2
# of its 4 iterations before the 20 ms cap. BURST pauses 36 % of its first 2.5 ms (the start-up
# of the incast), 17 % of a half-measurement window, and its collectives finish in 14 ms.
STORM = {"kmin_bytes": 26334, "kmax_bytes": 124000, "pmax_percent": 26, "rpg_time_reset": 2,
         "rpg_ai_rate": 4, "rpg_hai_rate": 73, "rpg_min_dec_fac": 51,
         "min_time_between_cnps": 65}
BURST = {"kmin_bytes": 22761, "kmax_bytes": 35185, "pmax_percent": 56, "rpg_time_reset": 25,
         "rpg_ai_rate": 1, "rpg_hai_rate": 52, "rpg_min_dec_fac": 24,
         "min_time_between_cnps": 1}

# CALM: a low, steep ECN window with a fast recovery (a quick.yaml study's confirmed winner,
# 2026-12-04): no PFC pause on any placement where the vendor defaults pause ~1.3 % of the
# time, busbw +26..+36 % over 8 placements.
CALM = {"kmin_bytes": 15735, "kmax_bytes": 30774, "pmax_percent": 23, "rpg_time_reset": 14,
        "rpg_ai_rate": 1, "rpg_hai_rate": 87, "rpg_min_dec_fac": 46, "min_time_between_cnps": 0}


def quick_with(values: dict[str, int], results: Path, *, trials: int = 1, screen: bool = False,
               tracking: bool = False, **budget: Any) -> tuple[Experiment, str]:
    """quick.yaml, searching only ``values`` (each range rounds to exactly that value);
    ``budget`` overrides the one-replicate budget."""
    doc = yaml.safe_load((ROOT / "experiments" / "quick.yaml").read_text())
    doc["fabric"]["topology"]["dce_tcp_g_reading"] = "kept"  # see the module docstring
    ratio = values["kmax_bytes"] / values["kmin_bytes"]
    knobs: dict[str, Any] = {"kmin_bytes": {"low": values["kmin_bytes"],
                                            "high": values["kmin_bytes"] + 0.4},
                             "kmax_ratio": {"low": ratio, "high": ratio + 1e-9}}
    knobs.update({k: {"low": v, "high": v + 0.4} for k, v in values.items()
                  if k not in ("kmin_bytes", "kmax_bytes")})
    doc["search"] = {"knobs": knobs, "warm_starts": False}
    doc["budget"] = {"trials": trials, "repeats": 1, "confirm_repeats": 0, "baseline_every": 0,
                     **budget}
    doc["screen"] = {"mode": "twin" if screen else "off"}
    doc["tracking"] = {"enabled": tracking}
    doc["results_dir"] = str(results)
    text = yaml.safe_dump(doc)
    return parse_experiment(text, "quick-variant.yaml"), text


