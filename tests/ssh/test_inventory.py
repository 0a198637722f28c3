"""Inventory validation: strict patterns, errors that name the entry, secrets kept secret."""

from __future__ import annotations

from typing import Any

import pytest

from tuner.cluster.ssh import endpoints
from tuner.errors import ConfigError
from tuner.inventory import load_inventory, parse_inventory


def test_valid_inventory_loads_with_defaults(inventory_data: dict[str, Any]) -> None:
    inv = parse_inventory(inventory_data)
    assert [h.nic for h in inv.hosts] == ["host0/mlx5_0", "host1/mlx5_0"]
    assert inv.ssh.trust_on_first_use is False
    assert inv.ssh.max_parallel == 4
    assert inv.hosts[1].sysfs_root == "/"
    assert inv.hosts[0].sys_path("/sys/class/net") == "/srv/emu/host0/sys/class/net"
    assert inv.hosts[1].sys_path("/sys/class/net") == "/sys/class/net"
    assert inv.switches[0].wred_profile == "AZURE_LOSSLESS"


@pytest.mark.parametrize(
    ("where", "field", "value", "expected"),
    [
        ("hosts", "netdev", "eth0;reboot", "hosts[1] (host1).netdev"),
        ("hosts", "netdev", "a_name_longer_than_15", "hosts[1] (host1).netdev"),
        ("hosts", "rdma_device", "mlx5_0 $(id)", "hosts[1] (host1).rdma_device"),
        ("hosts", "pci", "3b:00.0", "hosts[1] (host1).pci"),
        ("hosts", "sysfs_root", "/tmp/../etc", "hosts[1] (host1).sysfs_root"),
        ("hosts", "sysfs_root", "relative/path", "hosts[1] (host1).sysfs_root"),
        ("hosts", "address", "-oProxyCommand=x", "hosts[1] (host1).address"),
        ("switches", "canary_ports", ["Ethernet0", "Eth 4"], "switches[1] (leaf1).canary_ports"),
        ("switches", "wred_profile", "AZURE LOSSLESS", "switches[1] (leaf1).wred_profile"),
        ("switches", "platform", "eos", "switches[1] (leaf1).platform"),
    ],
)
def test_bad_values_are_refused_naming_the_entry(
        inventory_data: dict[str, Any], where: str, field: str, value: object,
        expected: str) -> None:
    inventory_data[where][1][field] = value
    with pytest.raises(ConfigError) as err:
        parse_inventory(inventory_data, "inv.yaml")
    assert f"inv.yaml: {expected}" in str(err.value)


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        ({"host": "host9"}, "launcher.host 'host9' is not one of the hosts"),
        ({"mpirun": "mpirun -np {np} {cmd}"}, "only {np} and {hostlist}"),
        ({"mpirun": "mpirun -np {np} -H {hostlist}; curl x"}, "not a plain option"),
        ({"nccl_env": {"NCCL_IB_HCA": "$(reboot)"}}, "launcher.nccl_env"),
        ({"nccl_env": {"ld preload": "x"}}, "launcher.nccl_env"),
        ({"nccl_tests_dir": "/opt/n`id`"}, "launcher.nccl_tests_dir"),
        ({"latency_hosts": ["host0"]}, "exactly two hosts"),
        ({"trusted_dirs": ["/opt/n;id"]}, "launcher.trusted_dirs"),
        ({"trusted_dirs": ["/home/eve/bin"]},
         "launcher.trusted_dirs: '/home/eve/bin' is not launcher.nccl_tests_dir"),
    ],
)
def test_launcher_is_validated(inventory_data: dict[str, Any], patch: dict[str, Any],
                               expected: str) -> None:
    inventory_data["launcher"].update(patch)
    with pytest.raises(ConfigError, match=r"(?s)" + __import__("re").escape(expected)):
        parse_inventory(inventory_data)


def test_duplicate_names_and_unknown_fields(inventory_data: dict[str, Any]) -> None:
    inventory_data["switches"][0]["name"] = "host0"
    with pytest.raises(ConfigError, match="duplicate target names: \\['host0'\\]"):
        parse_inventory(inventory_data)
    inventory_data["switches"][0]["name"] = "leaf0"
    inventory_data["hosts"][0]["netdevs"] = "typo"
    with pytest.raises(ConfigError, match=r"hosts\[0\] \(host0\)\.netdevs: Extra inputs"):
        parse_inventory(inventory_data)


def test_secrets_never_show(inventory_data: dict[str, Any]) -> None:
    inventory_data["hosts"][0]["password"] = "hunter2-secret"
    inventory_data["hosts"][0]["key_passphrase"] = "pass-phrase-secret"
    inv = parse_inventory(inventory_data)
    eps = endpoints(inv)
    for text in (repr(inv), str(inv), repr(eps["host0"]), str(eps), inv.model_dump_json()):
        assert "hunter2-secret" not in text
        assert "pass-phrase-secret" not in text
    assert eps["host0"].password is not None
    assert eps["host0"].password.get_secret_value() == "hunter2-secret"


def test_load_inventory_file_errors(tmp_path: Any) -> None:
    with pytest.raises(ConfigError, match="cannot read inventory"):
        load_inventory(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_inventory(bad)
    bad.write_text("- just a list\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_inventory(bad)


def test_key_files_expand_the_home_directory(inventory_data: dict[str, Any]) -> None:
    import os

    inventory_data["hosts"][0]["key_file"] = "~/.ssh/ecntune_ed25519"
    del inventory_data["hosts"][1]["key_file"]
    eps = endpoints(parse_inventory(inventory_data))
    assert eps["host0"].key_file == os.path.expanduser("~/.ssh/ecntune_ed25519")
    assert not eps["host0"].key_file.startswith("~")
    assert eps["host1"].key_file is None  # the SSH agent (then ~/.ssh/id_*)
