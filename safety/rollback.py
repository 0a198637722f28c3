"""Verified rollback: put the canary back on an exact snapshot and prove it by reading back.

If the canary cannot be restored the study must stop at once: ``RollbackError`` names every
target whose read-back still differs, with the value it holds and the value it should hold.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.errors import RollbackError, TunerError

if TYPE_CHECKING:
    from tuner.cluster.base import Cluster
    from tuner.settings import Settings


@dataclass(frozen=True)
class RestoreReport:
    seconds: float
    attempts: int


def restore(
    cluster: Cluster, snapshot: Settings, *, retries: int = 3, backoff_s: float = 0.2
) -> RestoreReport:
    """Apply ``snapshot``, read it back, retry on failure or mismatch; raise if it never holds."""
    t0 = time.monotonic()
    problem = "no attempt made"
    for attempt in range(1, retries + 1):
        try:
            cluster.apply(snapshot)
            current = cluster.read_back()
        except TunerError as exc:
            problem = f"attempt {attempt}: {exc}"
        else:
            if current == snapshot:
                return RestoreReport(seconds=time.monotonic() - t0, attempts=attempt)
            diffs = current.diff(snapshot)
            problem = "read-back differs: " + ", ".join(
                f"{key} is {have} (baseline {want})" for key, (have, want) in diffs.items())
        if attempt < retries:
            time.sleep(backoff_s * attempt)
    raise RollbackError(
        f"canary NOT restored after {retries} attempts; {problem}. "
        "Run `ecntune recover` once the cause is fixed.")
