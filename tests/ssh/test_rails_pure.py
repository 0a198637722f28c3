"""Rails without SSH (#22 item 5): the inventory's rails form, the sysfs check and GID index
(run by a real shell over a tree laid out as the kernel lays out /sys), and the NCCL variables
and probe flows a multi-rail canary gets."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.ssh.conftest import BASE_INVENTORY
from tuner.errors import ConfigError
from tuner.inventory import parse_inventory
from tuner.ssh import rails
from tuner.ssh.plan import nccl_command, probe_flows, rails_env, unsupported
from tuner.workload import CollectivePart, ProbePart, Workload

# gids/<i> as drivers/infiniband/core/sysfs.c prints a GID (%pI6: eight 4-digit groups) and
# gid_attrs/types/<i> as it names the types ("IB/RoCE v1", "RoCE v2"); mlx5 fills each address
# twice, v1 then v2: link-local at 0/1, the IPv4-mapped data address at 2/3.
LINK_LOCAL = "fe80:0000:0000:0000:ba3f:d2ff:fe10:0001"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"


def _mapped(ip: str) -> str:
    a, b, c, d = (int(x) for x in ip.split("."))
    return f"0000:0000:0000:0000:0000:ffff:{a:02x}{b:02x}:{c:02x}{d:02x}"


def _rails_data(n: int = 2) -> dict[str, Any]:
    data = copy.deepcopy(BASE_INVENTORY)
    h = data["hosts"][1]
    for f in ("netdev", "rdma_device", "pci"):
        del h[f]
    h["rails"] = [{"rdma_device": f"mlx5_{k}", "netdev": f"ens{k + 1}f0np0",
                   "data_address": f"192.168.{10 + k}.12"} for k in range(n)]
    data["launcher"]["nccl_env"] = {"NCCL_IB_TIMEOUT": "22"}
    return data


def _tree(root: Path, dev: str, netdev: str, pci: str, gids: list[tuple[str, str]]) -> None:
    """``<root>/sys`` as the kernel has it for one device: class/infiniband/<dev>/device links
    to the PCI function, whose net/ holds the netdev; the port's GID table."""
    fn = root / "sys/devices/pci0000:3a/0000:3a:00.0" / pci
    (fn / "net" / netdev).mkdir(parents=True)
    ib = root / "sys/class/infiniband" / dev
    port = ib / "ports/1"
    (port / "gid_attrs/types").mkdir(parents=True)
    (port / "gids").mkdir()
    (ib / "device").symlink_to(fn)
    for i, (gid, kind) in enumerate(gids):
        (port / f"gids/{i}").write_text(gid + "\n")
        if gid != ZERO:  # the kernel refuses (EINVAL) the type of an empty entry
            (port / f"gid_attrs/types/{i}").write_text(kind + "\n")


def test_a_one_nic_host_keeps_its_form_and_is_its_own_rail() -> None:
    inv = parse_inventory(copy.deepcopy(BASE_INVENTORY))
    h = inv.hosts[0]
    assert h.rails == [] and h.rail_entries() == [h] and h.nic == "host0/mlx5_0"


def test_the_rails_form_gives_one_entry_per_rail_and_the_host_fields_are_the_first() -> None:
    data = _rails_data(3)
    data["hosts"][1]["rails"][2]["gid_index"] = 7
    h = parse_inventory(data).hosts[1]
    assert (h.rdma_device, h.netdev, h.data_address, h.pci) == (
        "mlx5_0", "ens1f0np0", "192.168.10.12", "")
    entries = h.rail_entries()
    assert [e.nic for e in entries] == ["host1/mlx5_0", "host1/mlx5_1", "host1/mlx5_2"]
    assert [e.netdev for e in entries] == ["ens1f0np0", "ens2f0np0", "ens3f0np0"]
    assert [e.gid_fixed() for e in entries] == [False, False, True]
    assert entries[2].gid_index == 7


@pytest.mark.parametrize(("edit", "says"), [
    (lambda h: h.update(netdev="eth9"), "netdev: 'eth9' disagrees with rails[0].netdev"),
    (lambda h: h["rails"][1].update(rdma_device="mlx5_0"), "rdma_device mlx5_0 listed twice"),
    (lambda h: h["rails"][1].update(netdev="ens1;rm"), "rails[1].netdev: 'ens1;rm' does not"),
    (lambda h: (h.pop("rails"), h.update(netdev="e0", rdma_device="mlx5_0")),
     "pci: required for a host without rails"),
])
def test_bad_rail_lists_are_refused_naming_host_and_field(edit: Any, says: str) -> None:
    data = _rails_data()
    edit(data["hosts"][1])
    with pytest.raises(ConfigError) as err:
        parse_inventory(data)
    assert "hosts[1] (host1)" in str(err.value) and says in str(err.value)


def test_the_sysfs_check_runs_in_a_shell_and_resolves_pci_and_gid(tmp_path: Path) -> None:
    data = _rails_data()
    data["hosts"][1]["sysfs_root"] = str(tmp_path)
    host = parse_inventory(data).hosts[1]
    _tree(tmp_path, "mlx5_0", "ens1f0np0", "0000:3b:00.0",
          [(LINK_LOCAL, "IB/RoCE v1"), (LINK_LOCAL, "RoCE v2"),
           (_mapped("192.168.10.12"), "IB/RoCE v1"), (_mapped("192.168.10.12"), "RoCE v2")])
    # rail 1: the data address's v2 entry sits at 5 (another address at 3; 2 is empty)
    _tree(tmp_path, "mlx5_1", "ens2f0np0", "0000:3c:00.0",
          [(LINK_LOCAL, "IB/RoCE v1"), (LINK_LOCAL, "RoCE v2"), (ZERO, ""),
           (_mapped("192.168.99.12"), "RoCE v2"), (_mapped("192.168.11.12"), "IB/RoCE v1"),
           (_mapped("192.168.11.12"), "RoCE v2")])
    out = subprocess.run(["bash", "-c", rails.command(host)], capture_output=True, text=True,
                         check=True).stdout
    facts = rails.parse(out)
    assert facts["mlx5_1"].netdevs == ["ens2f0np0"] and facts["mlx5_1"].pci == "0000:3c:00.0"
    assert facts["mlx5_1"].types[5] == "RoCE v2" and 2 not in facts["mlx5_1"].types
    entries = rails.resolve(host, out)
    assert [(e.pci, e.gid_index) for e in entries] == [("0000:3b:00.0", 3),
                                                       ("0000:3c:00.0", 5)]
    resolved = rails.resolved_host(host, entries)
    assert [(r.pci, r.gid_index) for r in resolved.rails] == [("0000:3b:00.0", 3),
                                                              ("0000:3c:00.0", 5)]
    # no RoCE v2 entry for the address: refused naming host, rail and field
    (tmp_path / "sys/class/infiniband/mlx5_1/ports/1/gid_attrs/types/5").write_text("IB/RoCE v1")
    out = subprocess.run(["bash", "-c", rails.command(host)], capture_output=True, text=True,
                         check=True).stdout
    with pytest.raises(ConfigError, match=r"hosts \(host1\)\.rails\[1\]\.data_address: no RoCE "
                                          r"v2 GID of 192\.168\.11\.12 on mlx5_1"):
        rails.resolve(host, out)


def test_nccl_gets_every_rail_the_gid_index_and_the_traffic_class() -> None:
    inv = parse_inventory(_rails_data())
    env = rails_env(inv)
    assert env == {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_TC": "106",
                   "NCCL_IB_FIFO_TC": "106", "NCCL_IB_GID_INDEX": "3"}
    h = inv.hosts[1]
    other = h.model_copy(update={"rails": [h.rails[0], h.rails[1].model_copy(
        update={"gid_index": 5})]})
    inv2 = inv.model_copy(update={"hosts": [inv.hosts[0], other]})
    assert "NCCL_IB_GID_INDEX" not in rails_env(inv2)  # one variable cannot say 3 and 5
    cmd = nccl_command(inv, CollectivePart(op="all_reduce", size_bytes=1 << 20))
    assert "NCCL_IB_HCA==mlx5_0:1,mlx5_1:1" in cmd and "-x NCCL_IB_FIFO_TC" in cmd


def test_a_nccl_ib_hca_that_leaves_a_rail_out_fails_preflight() -> None:
    data = _rails_data()
    data["launcher"]["nccl_env"]["NCCL_IB_HCA"] = "=mlx5_0"
    inv = parse_inventory(data)
    work = Workload(parts=[CollectivePart(op="all_reduce", size_bytes=1 << 20)])
    assert any("leaves out the rails host1/mlx5_1" in p for p in unsupported(inv, work))
    data["launcher"]["nccl_env"]["NCCL_IB_HCA"] = "mlx5"  # a prefix takes every rail
    assert unsupported(parse_inventory(data), work) == []


def test_probe_pairs_spread_over_the_rails_with_each_rails_device_and_address() -> None:
    data = _rails_data()
    h0 = data["hosts"][0]
    for f in ("netdev", "rdma_device", "pci"):
        del h0[f]
    h0["rails"] = [{"rdma_device": f"mlx5_{k}", "netdev": f"ens{k + 1}f0np0",
                    "data_address": f"192.168.{10 + k}.11", "gid_index": 3} for k in range(2)]
    flows = probe_flows(parse_inventory(data), ProbePart(size_bytes=64, pairs=2))
    words = [f.client_cmd.split() for f in flows]
    assert [w[w.index("-d") + 1] for w in words] == ["mlx5_0", "mlx5_1"]
    assert [w[-1] for w in words] == ["192.168.10.11", "192.168.11.12"]  # the server's rail


def test_concurrent_parts_get_disjoint_gpus() -> None:
    from tuner.ssh.plan import gpu_sets

    data = _rails_data()
    data["launcher"]["gpus_per_host"] = 2
    inv = parse_inventory(data)
    assert gpu_sets(inv, 1) == [None]  # one part: CUDA_VISIBLE_DEVICES left alone
    assert gpu_sets(inv, 3) == ["0,1", "2,3", "4,5"]
    cmd = nccl_command(inv, CollectivePart(op="all_reduce", size_bytes=64), gpus="2,3")
    assert "CUDA_VISIBLE_DEVICES=2,3" in cmd and "-x CUDA_VISIBLE_DEVICES" in cmd
    # the inventory's own list is what the parts share out; too short fails pre-flight
    data["launcher"]["nccl_env"]["CUDA_VISIBLE_DEVICES"] = "4,5,6"
    inv = parse_inventory(data)
    assert gpu_sets(inv, 2) == ["4,5", "6"]
    work = Workload(parts=[CollectivePart(op="all_reduce", size_bytes=64),
                           CollectivePart(op="alltoall", size_bytes=64)])
    assert any("need 4 GPUs per host" in p for p in unsupported(inv, work))
