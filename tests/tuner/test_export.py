"""``ecntune export`` writes what the drivers write: their safe order, the inventory's names,
each target's own platform and layout."""

from __future__ import annotations

import random
import re
from typing import Any

from tests.ssh.conftest import BASE_INVENTORY
from tuner.cli.export import SwitchTarget, inventory_of, render
from tuner.emulated.tools.ecnconfig import WRED_CONFIG_FIELDS
from tuner.inventory import parse_inventory

BASE = {"kmin_bytes": 1_048_576, "kmax_bytes": 2_097_152, "pmax_percent": 5, "rpg_ai_rate": 5,
        "min_time_between_cnps": 0}


def _ecnconfig_states(lines: list[str], kmin: int, kmax: int) -> list[tuple[int, int]]:
    """Replay ``ecnconfig -p P -g...`` calls the way scripts/ecnconfig writes them: the merged
    values are validated, then each field is its own CONFIG_DB write, in WRED_CONFIG_FIELDS
    order (gmax before gmin). Returns (min, max) after every single write."""
    state = {"green_min_threshold": kmin, "green_max_threshold": kmax}
    seen = []
    for line in lines:
        flags = dict(re.findall(r"-(g\w+) (\d+)", line))
        merged = {**state, **{WRED_CONFIG_FIELDS[k]: int(v) for k, v in flags.items()}}
        assert merged["green_min_threshold"] < merged["green_max_threshold"], line
        for key in WRED_CONFIG_FIELDS:  # the write order
            if key in flags:
                state[WRED_CONFIG_FIELDS[key]] = int(flags[key])
                seen.append((state["green_min_threshold"], state["green_max_threshold"]))
    return seen


def test_sonic_export_never_leaves_min_above_max() -> None:
    rng = random.Random(7)
    for _ in range(300):
        a, b = sorted(rng.sample(range(10_000, 5_000_000), 2))
        c, d = sorted(rng.sample(range(10_000, 5_000_000), 2))
        base = {**BASE, "kmin_bytes": a, "kmax_bytes": b}
        best = {**base, "kmin_bytes": c, "kmax_bytes": d, "pmax_percent": rng.randint(1, 100)}
        text = render(best, base, [SwitchTarget("leaf0", "sonic")], [], ("sonic",))
        calls = [ln for ln in text.splitlines() if ln.startswith("sudo ecnconfig")]
        states = _ecnconfig_states(calls, a, b)
        assert all(lo < hi for lo, hi in states), (base, best, calls)
        assert states[-1] == (c, d)


def test_each_target_gets_its_own_platform_names_and_layout() -> None:
    data: dict[str, Any] = {**BASE_INVENTORY, "switches": [
        {**BASE_INVENTORY["switches"][0], "wred_profile": "LOSSLESS_X", "lossless_queue": 4},
        BASE_INVENTORY["switches"][1]]}
    inv = parse_inventory(data)
    switches = [SwitchTarget(s.name, s.platform, s.wred_profile, s.lossless_queue)
                for s in inv.switches]
    best = {**BASE, "kmin_bytes": 40_000, "kmax_bytes": 120_000, "rpg_ai_rate": 50}
    text = render(best, BASE, switches, [h.nic for h in inv.hosts], hosts=list(inv.hosts))
    sonic, nvue = text.split("# on leaf0")[1].split("# on leaf1")[0], text.split("# on leaf1")[1]
    assert "sudo ecnconfig -p LOSSLESS_X -gmin 40000" in sonic and "nv set" not in sonic
    assert "AZURE_LOSSLESS" not in text  # the inventory's profile, not a hard-coded one
    assert "traffic-class 3 min-threshold 40000" in nvue and "ecnconfig" not in nvue
    assert text.count("# on leaf") == 2  # one platform per switch
    # host0 is OFED sysfs, host1 upstream debugfs (BASE_INVENTORY): the drivers' paths
    h0, h1 = text.split("# on host0")[1].split("# on host1")[0], text.split("# on host1")[1]
    assert "> /srv/emu/host0/sys/class/net/ens1f0np0/ecn/roce_rp/rpg_ai_rate" in h0
    assert "> /sys/kernel/debug/mlx5/0000:3b:00.0/cc_params/rp_ai_rate" in h1.split("#")[0]
    assert "roce_rp" not in h1.split("\n\n")[0]


def test_auto_layout_writes_behind_the_drivers_detection() -> None:
    data: dict[str, Any] = {**BASE_INVENTORY, "hosts": [
        {**BASE_INVENTORY["hosts"][1], "nic_layout": "auto"}]}
    inv = parse_inventory({**data, "launcher": {"host": "host1"}})
    text = render({**BASE, "rpg_ai_rate": 9}, BASE, [], ["host1/mlx5_0"], ("mlx5",),
                  hosts=list(inv.hosts))
    assert "LAYOUT=$(if [ -e " in text
    assert 'if [ "$LAYOUT" = sysfs ]; then' in text and 'if [ "$LAYOUT" = debugfs ]' in text


def test_the_study_experiment_names_its_inventory() -> None:
    import yaml

    exp = yaml.safe_dump({"fabric": {"backend": "ssh", "inventory": BASE_INVENTORY}})
    inv = inventory_of(exp)
    assert inv is not None and [s.platform for s in inv.switches] == ["sonic", "nvue"]
    assert inventory_of(yaml.safe_dump({"fabric": {"backend": "sim"}})) is None
    assert inventory_of(yaml.safe_dump({"fabric": {"backend": "ssh",
                                                   "inventory_file": "$UNSET_X/i.yaml"}})) is None
