"""Wave planning (pure)."""

from __future__ import annotations

import pytest

from tuner.errors import ConfigError
from tuner.lifecycle.promote import wanted
from tuner.lifecycle.waves import parse_waves, plan_waves
from tuner.settings import DcqcnSettings, EcnSettings

KEYS = [f"t{i:02d}" for i in range(20)]


def test_default_waves_cover_the_group_once_in_order() -> None:
    waves = plan_waves(KEYS, ["t05", "t07"], parse_waves("canary,10,50,100"))
    assert [(w.name, len(w.targets)) for w in waves] == [
        ("canary", 2), ("50%", 8), ("100%", 10)]  # 10 % of 20 = 2: the canary covers it
    flat = [k for w in waves for k in w.targets]
    assert sorted(flat) == KEYS and len(flat) == len(set(flat))
    assert waves[0].targets == ("t05", "t07") and [w.index for w in waves] == [1, 2, 3]


def test_without_canary_members_the_first_wave_is_ten_percent() -> None:
    waves = plan_waves(KEYS, ["elsewhere"], parse_waves("canary,10,50,100"))
    assert [(w.name, w.targets[:2]) for w in waves][0] == ("10%", ("t00", "t01"))


@pytest.mark.parametrize("spec,msg", [("10,50", "last wave must be 100"),
                                      ("50,10,100", "must rise"),
                                      ("10,canary,100", "only be the first"),
                                      ("canary,ten,100", "neither 'canary' nor")])
def test_bad_wave_specs_are_named(spec: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        parse_waves(spec)


def test_wanted_keeps_what_the_study_did_not_set() -> None:
    live = EcnSettings(kmin_bytes=10_000, kmax_bytes=20_000, pmax_percent=5, enabled=False)
    assert wanted(live, {"kmin_bytes": 1_000, "rpg_ai_rate": 7}) == live.model_copy(
        update={"kmin_bytes": 1_000})
    nic = DcqcnSettings(rpg_gd=9)
    assert wanted(nic, {"rpg_ai_rate": 7, "kmin_bytes": 1}).model_dump() == {
        **nic.model_dump(), "rpg_ai_rate": 7}
