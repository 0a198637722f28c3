"""``ecntune export`` writes what the drivers write: their safe order, the inventory's names,
each target's own platform and layout."""

from __future__ import annotations

from typing import Any

from tests.ssh.conftest import BASE_INVENTORY
from tuner.cli.export import SwitchTarget, inventory_of, render
from tuner.inventory import parse_inventory

BASE = {"kmin_bytes": 1_048_576, "kmax_bytes": 2_097_152, "pmax_percent": 5, "rpg_ai_rate": 5,
        "min_time_between_cnps": 0}


def test_sonic_export_tunes_the_host_facing_ports_only() -> None:
    """The role the study tuned: host-facing ports get their own profile in one HSET (min <
    max at every moment); the production profile, which the uplinks use too, is never
    written, and the way back rebinds it and drops the copy."""
    sw = SwitchTarget("leaf0", "sonic", "AZURE_LOSSLESS", 3, ("Ethernet0", "Ethernet4"))
    best = {**BASE, "kmin_bytes": 40_000, "kmax_bytes": 120_000, "pmax_percent": 20}
    text = render(best, BASE, [sw], [], ("sonic",))
    assert "HOST_PORTS='Ethernet0 Ethernet4'" in text
    assert ("sudo sonic-db-cli CONFIG_DB HSET 'WRED_PROFILE|ECNTUNE_CANARY' ecn ecn_all "
            "wred_green_enable true green_min_threshold 40000 green_max_threshold 120000 "
            "green_drop_probability 20 wred_yellow_enable true") in text
    assert ('for p in $HOST_PORTS; do sudo sonic-db-cli CONFIG_DB HSET "QUEUE|$p|3" '
            "wred_profile ECNTUNE_CANARY; done") in text
    assert "ecnconfig" not in text and "WRED_PROFILE|AZURE_LOSSLESS" not in text
    back = render(BASE, best, [sw], [], ("sonic",), back_out=True)
    assert ('HSET "QUEUE|$p|3" wred_profile AZURE_LOSSLESS; done\n'
            "sudo sonic-db-cli CONFIG_DB DEL 'WRED_PROFILE|ECNTUNE_CANARY'") in back
    # without an inventory the ports are not known: the script stops until they are given
    bare = render(best, BASE, [SwitchTarget("leaf0")], [], ("sonic",))
    assert ': "${HOST_PORTS:?set HOST_PORTS to the host-facing ports' in bare


def test_nvue_export_tunes_the_host_facing_ports_only() -> None:
    """As the NVUE driver does: the host-facing ports get a profile of their own, bound per
    port, carrying default-global's factory TC 0 as well as the tuned class; default-global,
    which every other port uses (uplinks included), is never written; the way back unbinds
    the ports and removes the profile."""
    sw = SwitchTarget("leaf1", "nvue", queue=3, ports=("swp1", "swp2"))
    best = {**BASE, "kmin_bytes": 40_000, "kmax_bytes": 120_000, "pmax_percent": 20}
    text = render(best, BASE, [sw], [], ("nvue",))
    sets = [ln for ln in text.splitlines() if ln.startswith("nv set qos")]
    assert sets and not any("default-global" in ln for ln in sets)
    assert "nv set qos congestion-control ECNTUNE_CANARY traffic-class 0 ecn enable" in sets
    assert "nv set qos congestion-control ECNTUNE_CANARY traffic-class 3 min-threshold 40000" \
        in sets
    assert "HOST_PORTS='swp1 swp2'" in text
    assert ('for p in $HOST_PORTS; do nv set interface "$p" qos congestion-control profile '
            "ECNTUNE_CANARY; done\nnv config apply") in text
    back = render(BASE, best, [sw], [], ("nvue",), back_out=True)
    assert ('for p in $HOST_PORTS; do nv unset interface "$p" qos congestion-control; done\n'
            "nv unset qos congestion-control ECNTUNE_CANARY\nnv config apply") in back
    assert "default-global traffic-class" not in back


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
    assert "HSET \"QUEUE|$p|4\" wred_profile ECNTUNE_CANARY" in sonic and "nv set" not in sonic
    assert "keeps LOSSLESS_X" in sonic and "AZURE_LOSSLESS fields" in sonic
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
