"""Static limits on proposals: ranges from mstflint's mlxconfig DB (reference INDEX.md §2)."""

from __future__ import annotations

import pytest

from safety.limits import PfcThreshold, SafetyLimits, check_proposal, kmax_ceiling

LIMITS = SafetyLimits()
# A PFC onset of exactly 1 MB (static threshold 500 kB x 2 PGs): Kmax <= 800000 B at 20 %.
ONE_MB = PfcThreshold(pool="p", pool_bytes=10**7, static_th_bytes=500_000, fan_in=2)
# Stock SN2700 (sonic-buildimage ACS-MSN2700): ingress_lossless_pool 4580864 B
# (buffers_defaults_t0.j2), pg_lossless_100000_5m_profile dynamic_th 0 (pg_profile_lookup.ini
# threshold column; its xoff is 30720 B of headroom); two 100G senders congest one port.
SN2700 = PfcThreshold(pool="ingress_lossless_pool", pool_bytes=4_580_864, dynamic_th=0,
                      fan_in=2)
# Stock AZURE_LOSSLESS (sonic-utilities tests/mock_tables/config_db.json, reference
# sonic/wred-profile-config-db-schema.txt): green min 1 MiB, max 2 MiB, 5 %.
AZURE_LOSSLESS = {"kmin_bytes": 1_048_576, "kmax_bytes": 2_097_152, "pmax_percent": 5}


def codes(values: dict[str, int], pfc: PfcThreshold | None = ONE_MB,
          line: int = 100_000) -> list[str]:
    return [v.code for v in check_proposal(values, pfc=pfc, line_rate_mbps=line,
                                           limits=LIMITS)]


def test_a_sane_proposal_passes() -> None:
    assert codes({"kmin_bytes": 100_000, "kmax_bytes": 400_000, "pmax_percent": 20,
                  "rpg_time_reset": 300, "rpg_ai_rate": 5}) == []


def test_kmin_not_below_kmax_is_rejected() -> None:
    assert codes({"kmin_bytes": 500_000, "kmax_bytes": 500_000}) == ["kmin_ge_kmax"]


def test_ecn_before_pfc_margin() -> None:
    # PFC onset 1 MB with the default 20 % margin leaves Kmax <= 800000 B.
    assert codes({"kmin_bytes": 100_000, "kmax_bytes": 800_000}) == []
    assert codes({"kmin_bytes": 100_000, "kmax_bytes": 800_001}) == ["kmax_above_pfc_threshold"]
    assert codes({"kmin_bytes": 100_000, "kmax_bytes": 5_000_000}, pfc=None) == []


def test_stock_azure_lossless_passes_on_a_stock_sn2700_pool() -> None:
    # Two PGs at alpha 1 cross alpha x (B - 2s) at s = B/3: the queue holds 2B/3 then. The
    # old rule (Kmax below the PG's 30720 B xoff headroom less 20 %) refused this profile.
    assert SN2700.onset_bytes() == 2 * 4_580_864 // 3 == 3_053_909
    assert kmax_ceiling(SN2700, LIMITS) == 2_443_127
    assert codes(AZURE_LOSSLESS, pfc=SN2700) == []


def test_kmax_past_the_dynamic_threshold_is_refused_naming_its_inputs() -> None:
    # dynamic_th -3 (alpha 1/8) on the same pool: 2 x B/8 / (1 + 2/8) = 916172 B, so the PGs
    # send XOFF before the queue even reaches AZURE_LOSSLESS's Kmin (1 MiB): never marked.
    small = SN2700.model_copy(update={"dynamic_th": -3})
    (v,) = check_proposal(AZURE_LOSSLESS, pfc=small, line_rate_mbps=100_000, limits=LIMITS)
    assert v.code == "kmax_above_pfc_threshold"
    assert v.detail == (
        "kmax_bytes=2097152 above 732937 B (2 ingress PGs at alpha 0.125 (dynamic_th -3) of "
        "pool ingress_lossless_pool 4580864 B send PFC XOFF at an egress queue of 916172 B; "
        "less a 20 % margin): the ingress PGs would cross their dynamic threshold and pause "
        "senders before ECN marks fully")
    # more senders share the threshold's pool: a larger queue before XOFF (8 x B/8 / 2)
    assert small.model_copy(update={"fan_in": 8}).onset_bytes() == 4_580_864 // 2


def test_threshold_edges_as_mellanox_sai_reads_them() -> None:
    # mlnx_sai_buffer.c: dynamic_th -8 is alpha 0 (no shared buffer), 7 is unbounded
    assert SN2700.model_copy(update={"dynamic_th": -8}).onset_bytes() == 0
    assert SN2700.model_copy(update={"dynamic_th": 7}).onset_bytes() == 4_580_864
    static = PfcThreshold(pool="p", pool_bytes=1_000_000, static_th_bytes=800_000, fan_in=2)
    assert static.onset_bytes() == 1_000_000  # 2 x 800 kB does not fit the pool


def test_threshold_travels_as_a_fact() -> None:
    assert PfcThreshold.from_facts({"pfc_threshold": SN2700.to_fact()}) == SN2700
    assert PfcThreshold.from_facts({}) is None
    with pytest.raises(ValueError, match="facts pfc_threshold"):
        PfcThreshold.from_facts({"pfc_threshold": '{"pool": "p", "pool_bytes": 0}'})


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
    (v,) = check_proposal({"kmin_bytes": 9000, "kmax_bytes": 3000}, pfc=None,
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
    untargeted = check_proposal({"kmin_bytes": 1, "rpg_ai_rate": 10**9}, pfc=None,
                                line_rate_mbps=100_000, limits=LIMITS)
    assert describe(untargeted) == "; ".join(str(v) for v in untargeted)  # nothing dropped
