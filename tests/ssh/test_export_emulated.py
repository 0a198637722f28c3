"""An exported SONiC or NVUE script runs on the emulated switch and does what it says: the
host-facing ports get the winner in a profile of their own, every other port and the
production profile (SONiC's AZURE_LOSSLESS, NVUE's default-global) stay as they were, and the
way back restores them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from tests.emulated.helpers import run
from tuner.cli.export import SwitchTarget, render
from tuner.emulated import EmulatedCluster
from tuner.inventory import load_inventory
from tuner.lifecycle.fleet import Fleet
from tuner.settings import EcnSettings

if TYPE_CHECKING:
    from tuner.inventory import Inventory, SwitchEntry

pytestmark = pytest.mark.ssh


def _script(text: str) -> str:
    # Run as the emulated root: `sudo` would swap PATH for secure_path, where the stand-in
    # sonic-db-cli is not (on a real switch it is in /usr/local/bin)
    return text.replace("sudo ", "")


BASE = EcnSettings().model_dump()
BEST = {**BASE, "kmin_bytes": 150_000, "kmax_bytes": 600_000, "pmax_percent": 15}


def _switch(emu: EmulatedCluster, platform: str) -> tuple[Inventory, SwitchEntry, SwitchTarget]:
    """The inventory, its switch of ``platform`` and that switch as export sees it."""
    inv = load_inventory(emu.inventory_path)
    s = next(x for x in inv.switches if x.platform == platform)
    return inv, s, SwitchTarget(s.name, s.platform, s.wred_profile, s.lossless_queue,
                                (*s.canary_ports, *s.other_ports), s.canary_profile)


def test_the_exported_script_tunes_only_the_host_facing_ports(
        emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    inv, s, target = _switch(emu, "sonic")
    before: dict[str, Any] = emu.state(s.name)["config_db"]
    base, best = BASE, BEST

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


def test_the_exported_nvue_script_binds_only_the_host_facing_ports(
        emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    inv, s, target = _switch(emu, "nvue")
    before: dict[str, Any] = emu.state(s.name)["applied"]
    base, best = BASE, BEST

    code, _, err = run(emu, s.name, render(best, base, [target], [], ("nvue",)))
    assert code == 0, err
    after = emu.state(s.name)["applied"]
    cc = after["qos"]["congestion-control"]
    assert cc["default-global"] == before["qos"]["congestion-control"]["default-global"]
    assert set(cc[s.canary_profile]["traffic-class"]) == {"0", str(s.lossless_queue)}
    bound = {p: v["qos"]["congestion-control"]["profile"]
             for p, v in after["interface"].items()
             if (v.get("qos") or {}).get("congestion-control")}
    assert bound == dict.fromkeys(target.ports, s.canary_profile)  # uplinks keep default-global
    with Fleet(inv) as fleet:
        assert fleet.driver(s.name).read() == EcnSettings(kmin_bytes=150_000,
                                                          kmax_bytes=600_000, pmax_percent=15)

    code, _, err = run(emu, s.name, render(base, best, [target], [], ("nvue",), back_out=True))
    assert code == 0, err
    back = emu.state(s.name)["applied"]
    assert s.canary_profile not in back["qos"]["congestion-control"]
    assert back["qos"] == before["qos"]
    assert not any((v.get("qos") or {}).get("congestion-control")
                   for v in back["interface"].values())
