"""Settings models: real knob names, factory defaults and ranges (reference INDEX.md §2, taken
from the ConnectX-4 Lx `mstconfig query` sample and mstflint's mlxconfig DB)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from objectives.measurement import Counters
from tuner.settings import KNOBS, NIC_KNOBS, DcqcnSettings, EcnSettings, Settings


def test_factory_defaults_match_the_connectx_query() -> None:
    d = DcqcnSettings()
    # mstconfig-query-cx4lx-roce-cc-defaults.txt
    assert (d.rpg_time_reset, d.rpg_byte_reset, d.rpg_threshold, d.rpg_ai_rate, d.rpg_hai_rate,
            d.rpg_gd, d.rpg_min_dec_fac, d.rpg_min_rate, d.dce_tcp_g, d.dce_tcp_rtt,
            d.rate_reduce_monitor_period, d.initial_alpha_value, d.min_time_between_cnps,
            d.clamp_tgt_rate, d.clamp_tgt_rate_after_time_inc) == (
        300, 32767, 1, 5, 50, 11, 50, 1, 1019, 1, 4, 1023, 0, 0, 1)
    # SONiC AZURE_LOSSLESS sample (ecnconfig-l-show-ecn-single-profile.txt)
    e = EcnSettings()
    assert (e.kmin_bytes, e.kmax_bytes, e.pmax_percent) == (1048576, 2097152, 5)


def test_every_nic_knob_is_a_model_field_with_its_range() -> None:
    assert set(NIC_KNOBS) == set(DcqcnSettings.model_fields)
    with pytest.raises(ValidationError, match="less than or equal to 131071"):
        DcqcnSettings(rpg_time_reset=131072)
    with pytest.raises(ValidationError, match="must be below kmax_bytes"):
        EcnSettings(kmin_bytes=4000, kmax_bytes=4000)
    assert KNOBS["rpg_time_reset"].unit == "us"


def test_uniform_flat_and_diff() -> None:
    a = Settings.uniform(["leaf0"], ["h0", "h1"], {"kmin_bytes": 10_000, "kmax_bytes": 90_000,
                                                   "rpg_ai_rate": 20})
    b = Settings.uniform(["leaf0"], ["h0", "h1"], {})
    assert a.flat()["rpg_ai_rate"] == 20 and a.flat()["kmax_bytes"] == 90_000
    assert a.diff(b) == {"h0.rpg_ai_rate": (20, 5), "h1.rpg_ai_rate": (20, 5),
                         "leaf0.kmax_bytes": (90_000, 2_097_152),
                         "leaf0.kmin_bytes": (10_000, 1_048_576)}
    with pytest.raises(ValueError, match="unknown knobs"):
        Settings.uniform([], [], {"warp": 9})


def test_counter_delta_absent_is_not_zero_and_levels_are_kept() -> None:
    before = Counters(ports={"h0": {"rx_prio3_pause": 10, "np_cnp_sent": 5}}, taken_at_s=1.0)
    after = Counters(ports={"h0": {"rx_prio3_pause": 25, "queue3_watermark_bytes": 900,
                                   "np_cnp_sent": 2}}, taken_at_s=3.5)
    d = after.delta(before)
    # np_cnp_sent went backwards (cleared): the after value is the delta, as pfcstat users read it
    assert d.ports["h0"] == {"rx_prio3_pause": 15, "queue3_watermark_bytes": 900,
                             "np_cnp_sent": 2}
    assert d.taken_at_s == 2.5
    assert after.missing("rx_prio0_pause") == ["h0"] and after.total("rx_prio3_pause") == 25



def test_an_800g_port_can_cap_its_rate_at_line_rate() -> None:
    """ConnectX-8 ports run at 800 Gb/s: rpg_max_rate (Mbit/s) reaches 800000, and no more."""
    assert DcqcnSettings(rpg_max_rate=800_000).rpg_max_rate == 800_000
    with pytest.raises(ValueError, match="rpg_max_rate"):
        DcqcnSettings(rpg_max_rate=800_001)
