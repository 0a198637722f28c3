"""What each counter means: the one table behind deltas, the simulated backend and the monitors.

A trial judges counters by how they change over a measurement, and that depends on the kind of
counter, not on the platform that reports it:

* ``count``: cumulative and monotonic (pause frames, pause microseconds, ECN marks, drops, PFC
  watchdog storms). Its delta over a measurement is ``after - before``; a counter or port absent
  from ``before`` counts from zero (a fresh device, a port that just appeared), and one that went
  backwards was cleared, so ``after`` is what accumulated since.
* ``level``: a gauge read as it is (queue watermarks, link speed, MTU); its "delta" is ``after``.
* ``flag``: a 0/1 state (``link_up``); its "delta" is ``after``.

Anything not listed is a ``count``: every mlx5 ``ethtool -S`` and ``hw_counters`` counter the
project reads is one, and a new cumulative counter must not need an entry here.

Sources: mlx5 counters, Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst
(``rx_prio<i>_pause``, ``rx_prio<i>_pause_duration`` in µs, ``rx_prio<i>_discards``: all
cumulative); SONiC ``show pfcwd stats`` STORM DETECTED/RESTORED and ``show queue counters``:
cumulative counts since the counters were last cleared; ``show queue watermark``: a level
(shared/reference/sonic/ and FORMAT-NOTES).
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["count", "level", "flag"]

# (pattern, kind, platforms reporting it, meaning) -- patterns are full-name regexes.
TABLE: tuple[tuple[str, Kind, str, str], ...] = (
    (r"(rx|tx)_prio\d_pause", "count", "mlx5", "PFC pause frames"),
    (r"(rx|tx)_prio\d_pause_duration", "count", "mlx5", "µs paused (rx) / pausing (tx)"),
    (r"(rx|tx)_prio\d_pause_transition", "count", "mlx5", "XOFF->XON transitions"),
    (r"rx_prio\d_discards", "count", "mlx5", "packets dropped on a priority"),
    (r"np_cnp_sent|np_ecn_marked_roce_packets|rp_cnp_handled|rp_cnp_ignored", "count", "mlx5",
     "DCQCN notification/reaction point events"),
    (r"pfc\d_(rx|tx)_pkts", "count", "sonic,nvue,sim", "PFC frames per priority"),
    (r"queue\d_(ecn_marked|wred_drop|drop)_pkts", "count", "sonic,nvue,sim",
     "per-queue ECN marks and drops"),
    (r"pfcwd\d_storm_(detected|restored)", "count", "sonic,sim",
     "PFC watchdog storms detected/restored since the counters were cleared"),
    (r"queue\d_watermark_bytes", "level", "sonic,sim", "queue high-water mark since last read"),
    (r"[a-z0-9_]*_speed_mbps|[a-z0-9_]*_mtu", "level", "any", "link speed, MTU"),
    (r"link_up", "flag", "any", "1 while the link is up"),
)

_COMPILED = tuple((re.compile(rf"^(?:{p})$"), k) for p, k, _, _ in TABLE)
_CACHE: dict[str, Kind] = {}


def kind(name: str) -> Kind:
    """The kind of counter ``name`` (``count`` unless the table says otherwise)."""
    if name not in _CACHE:
        _CACHE[name] = next((kd for rx, kd in _COMPILED if rx.match(name)), "count")
    return _CACHE[name]


def delta_row(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """One port's change from ``before`` to ``after`` (see the module docstring)."""
    out: dict[str, int] = {}
    for name, value in after.items():
        if kind(name) != "count":
            out[name] = value
            continue
        d = value - before.get(name, 0)
        out[name] = d if d >= 0 else value
    return out


def merge_row(total: dict[str, int], run: dict[str, int]) -> None:
    """Add one run's counters (counted from zero) to a device's lifetime ``total``, in place;
    levels and flags take the run's value."""
    for name, value in run.items():
        if kind(name) == "count":
            total[name] = total.get(name, 0) + int(value)
        else:
            total[name] = int(value)
