"""Known-good starting points for the ECN knobs, scaled to the fabric (tried right after trial 0).

Each is a rule operators already use, so the study measures them on this canary before it
searches, and the report can say how far the winner is beyond them:

* ``spectrum-default``: NVIDIA Spectrum / Cumulus Linux RoCE defaults, min 150 KB, max 1.5 MB,
  probability 100 % (``nv show qos roce``, shared/reference/cumulus-nvue/);
* ``sonic-default``: SONiC's ``AZURE_LOSSLESS`` WRED profile, green min 1 MiB, max 2 MiB, 5 %
  (``ecnconfig -l``, shared/reference/sonic/);
* ``field-200g-8mb``: the field rule for 200G ports on an 8 MB shared buffer: Kmin 128 KB, Kmax
  512 KB, Pmax 1 %, scaled by line rate / 200G;
* ``bandwidth-proportional``: 100 KB / 400 KB / 20 % per 25 Gb/s of line rate.

Any point whose Kmax would sit above the Kmax ceiling (``safety.limits.kmax_ceiling``: the
egress queue at which the ingress PGs cross their PFC dynamic threshold, less the safety
margin) is scaled down (Kmin and Kmax by the same factor) so that it can be applied at all: the
buffer decides.
"""

from __future__ import annotations

from dataclasses import dataclass

KB = 1000


@dataclass(frozen=True)
class WarmStart:
    label: str
    kmin_bytes: int
    kmax_bytes: int
    pmax_percent: int


def warm_starts(nic_gbps: float, ceiling: int | None) -> list[WarmStart]:
    """The starting points for a fabric with ``nic_gbps`` links and that Kmax ceiling."""
    rules = [
        ("spectrum-default", 150 * KB, 1500 * KB, 100),
        ("sonic-default", 1_048_576, 2_097_152, 5),
        ("field-200g-8mb", round(128 * KB * nic_gbps / 200), round(512 * KB * nic_gbps / 200),
         1),
        ("bandwidth-proportional", round(100 * KB * nic_gbps / 25),
         round(400 * KB * nic_gbps / 25), 20),
    ]
    out = []
    for label, kmin, kmax, pmax in rules:
        if ceiling is not None and kmax > ceiling:
            f = ceiling / kmax
            kmin, kmax = max(int(kmin * f), 1), int(kmax * f)
        out.append(WarmStart(label, int(kmin), int(kmax), pmax))
    return out
