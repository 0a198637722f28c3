"""Rolling a setting out in waves: which targets go in which wave (pure).

``canary,10,50,100`` means: first the targets of the study's canary that belong to the group,
then enough further targets to cover 10 % of the group, then 50 %, then all of it. Percentages
are cumulative shares of the group's targets, rounded up (a 6-target group's 10 % wave is one
target); a wave that would add nothing is dropped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tuner.errors import ConfigError

DEFAULT_WAVES = "canary,10,50,100"


@dataclass(frozen=True)
class Wave:
    index: int  # 1-based, in order
    name: str  # "canary", "10%", ...
    targets: tuple[str, ...]  # Settings keys


def parse_waves(spec: str) -> list[str | float]:
    """``"canary,10,50,100"`` -> ``["canary", 0.1, 0.5, 1.0]``; raises naming the bad part."""
    out: list[str | float] = []
    last = 0.0
    for i, raw in enumerate(p.strip() for p in spec.split(",")):
        if raw == "canary":
            if i != 0:
                raise ConfigError(f"--waves {spec!r}: 'canary' can only be the first wave")
            out.append("canary")
            continue
        try:
            pct = float(raw.rstrip("%"))
        except ValueError:
            raise ConfigError(f"--waves {spec!r}: {raw!r} is neither 'canary' nor a "
                              "percentage") from None
        if not last < pct <= 100:
            raise ConfigError(f"--waves {spec!r}: percentages must rise within (0, 100]; "
                              f"{raw} after {last:g}")
        last = pct
        out.append(pct / 100.0)
    if not out or out[-1] != 1.0:
        raise ConfigError(f"--waves {spec!r}: the last wave must be 100 (the whole group)")
    return out


def plan_waves(keys: list[str], canary: list[str], spec: list[str | float]) -> list[Wave]:
    """Waves over ``keys`` (the group, in inventory order) following ``spec``."""
    left = list(keys)
    waves: list[Wave] = []
    done = 0
    for part in spec:
        if part == "canary":
            chosen = [k for k in left if k in set(canary)]
            name = "canary"
        else:
            want = math.ceil(float(part) * len(keys) - 1e-9)
            chosen = left[:max(0, want - done)]
            name = f"{float(part) * 100:g}%"
        if not chosen:
            continue
        left = [k for k in left if k not in chosen]
        done += len(chosen)
        waves.append(Wave(index=len(waves) + 1, name=name, targets=tuple(chosen)))
    return waves
