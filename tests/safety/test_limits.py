"""Static limits on proposals: ranges from mstflint's mlxconfig DB (reference INDEX.md §2)."""

from __future__ import annotations

import pytest

from safety.limits import SafetyLimits, check_proposal

LIMITS = SafetyLimits()


def codes(values: dict[str, int], xoff: int | None = 1_000_000, line: int = 100_000) -> list[str]:
    return [v.code for v in check_proposal(values, xoff_bytes=xoff, line_rate_mbps=line,
                                           limits=LIMITS)]


def test_a_sane_proposal_passes() -> None:
    assert codes({"kmin_bytes": 100_000, "kmax_bytes": 400_000, "pmax_percent": 20,
                  "rpg_time_reset": 300, "rpg_ai_rate": 5}) == []


def test_kmin_not_below_kmax_is_rejected() -> None:
    assert codes({"kmin_bytes": 500_000, "kmax_bytes": 500_000}) == ["kmin_ge_kmax"]


def test_ecn_before_pfc_margin() -> None:
    # XOFF 1 MB with the default 20 % margin leaves Kmax <= 800000 B.
    assert codes({"kmin_bytes": 100_000, "kmax_bytes": 800_000}) == []
    assert codes({"kmin_bytes": 100_000, "kmax_bytes": 800_001}) == ["kmax_above_xoff"]
    assert codes({"kmin_bytes": 100_000, "kmax_bytes": 5_000_000}, xoff=None) == []


@pytest.mark.parametrize(("knob", "value"), [
    ("rpg_time_reset", 131_072),  # 17-bit field
    ("rpg_gd", 16),  # 4-bit field
    ("dce_tcp_g", 0),  # min 1 in the DB
    ("rpg_min_dec_fac", 101),  # percent
    ("pmax_percent", 101),
])
def test_hardware_ranges(knob: str, value: int) -> None:
    assert codes({knob: value}) == ["out_of_range"]


def test_rates_above_line_rate_and_unknown_knobs() -> None:
    assert codes({"rpg_hai_rate": 100_001}, line=100_000) == ["rate_above_line_rate"]
    assert codes({"rpg_hai_rate": 100_000}, line=100_000) == []
    assert codes({"rpg_warp_speed": 1}) == ["unknown_knob"]


def test_violation_text_names_the_rule_and_values() -> None:
    (v,) = check_proposal({"kmin_bytes": 9000, "kmax_bytes": 3000}, xoff_bytes=None,
                          line_rate_mbps=1, limits=LIMITS)
    assert str(v) == "kmin_ge_kmax: kmin_bytes=9000 >= kmax_bytes=3000"


def test_violations_described_in_one_readable_line() -> None:
    from safety.limits import Violation, describe

    storm = [Violation(code="pfc_storm", target=f"host{i}/mlx5_0",
                       detail=f"paused {60 + i}.0% of a 5.255 ms window (limit 50.0%)")
             for i in range(1, 4)]
    drops = Violation(code="lossless_drops", target="leaf0/Ethernet0", detail="3 drops")
    assert describe([*storm, drops]) == (
        "pfc_storm on host1/mlx5_0: paused 61.0% of a 5.255 ms window (limit 50.0%) (also on "
        "host2/mlx5_0, host3/mlx5_0); lossless_drops on leaf0/Ethernet0: 3 drops")
    untargeted = check_proposal({"kmin_bytes": 1, "rpg_ai_rate": 10**9}, xoff_bytes=None,
                                line_rate_mbps=100_000, limits=LIMITS)
    assert describe(untargeted) == "; ".join(str(v) for v in untargeted)  # nothing dropped
