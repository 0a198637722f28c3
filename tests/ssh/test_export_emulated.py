"""An exported SONiC script runs on the emulated switch and does what it says: the host-facing
ports' lossless queue gets the winner in its own profile, every other queue and the production
profile stay as they were, and the way back restores them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.emulated.helpers import run
from tuner.cli.export import SwitchTarget, render
from tuner.emulated import EmulatedCluster
from tuner.inventory import load_inventory
from tuner.lifecycle.fleet import Fleet
from tuner.settings import EcnSettings

pytestmark = pytest.mark.ssh


def _script(text: str) -> str:
    # Run as the emulated root: `sudo` would swap PATH for secure_path, where the stand-in
    # sonic-db-cli is not (on a real switch it is in /usr/local/bin)
    return text.replace("sudo ", "")


def test_the_exported_script_tunes_only_the_host_facing_ports(
        emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    inv = load_inventory(emu.inventory_path)
    s = next(x for x in inv.switches if x.platform == "sonic")
    target = SwitchTarget(s.name, s.platform, s.wred_profile, s.lossless_queue,
                          (*s.canary_ports, *s.other_ports), s.canary_profile)
    before: dict[str, Any] = emu.state(s.name)["config_db"]
    base = EcnSettings().model_dump()
    best = {**base, "kmin_bytes": 150_000, "kmax_bytes": 600_000, "pmax_percent": 15}

    code, _, err = run(emu, s.name, _script(render(best, base, [target], [], ("sonic",))))
    assert code == 0, err
    after = emu.state(s.name)["config_db"]
    host_keys = {f"{p}|{s.lossless_queue}" for p in target.ports}
    assert {k: v["wred_profile"] for k, v in after["QUEUE"].items() if k in host_keys} == \
        dict.fromkeys(host_keys, s.canary_profile)
    assert {k: v for k, v in after["QUEUE"].items() if k not in host_keys} == \
        {k: v for k, v in before["QUEUE"].items() if k not in host_keys}  # uplinks untouched
    assert after["WRED_PROFILE"][s.wred_profile] == before["WRED_PROFILE"][s.wred_profile]
    with Fleet(inv) as fleet:
        assert fleet.driver(s.name).read() == EcnSettings(kmin_bytes=150_000,
                                                          kmax_bytes=600_000, pmax_percent=15)

    code, _, err = run(emu, s.name, _script(render(base, best, [target], [], ("sonic",),
                                                   back_out=True)))
    assert code == 0, err
    assert emu.state(s.name)["config_db"]["QUEUE"] == before["QUEUE"]
    assert s.canary_profile not in emu.state(s.name)["config_db"]["WRED_PROFILE"]
