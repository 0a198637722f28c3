"""Shared fixtures of the SSH backend tests: reference samples and a valid inventory mapping."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

# The reference samples sit beside the repository, and only there (../shared/reference).
REFERENCE = Path(__file__).resolve().parents[3] / "shared" / "reference"

BASE_INVENTORY: dict[str, Any] = {
    "ssh": {"known_hosts": "/tmp/known_hosts", "max_parallel": 4},
    "hosts": [
        {"name": "host0", "address": "127.0.10.11", "key_file": "/k/id", "netdev": "ens1f0np0",
         "rdma_device": "mlx5_0", "pci": "0000:3b:00.0", "roce_priority": 3,
         "nic_layout": "sysfs", "sysfs_root": "/srv/emu/host0", "nic_gbps": 100},
        {"name": "host1", "address": "127.0.10.12", "key_file": "/k/id", "netdev": "ens1f0np0",
         "rdma_device": "mlx5_0", "pci": "0000:3b:00.0", "nic_layout": "debugfs",
         "nic_gbps": 100},
    ],
    "switches": [
        {"name": "leaf0", "address": "127.0.10.2", "platform": "sonic",
         "canary_ports": ["Ethernet0", "Ethernet4"]},
        {"name": "leaf1", "address": "127.0.10.3", "platform": "nvue",
         "canary_ports": ["swp1", "swp2"]},
    ],
    "launcher": {"host": "host0", "nccl_env": {"NCCL_IB_HCA": "mlx5_0", "NCCL_IB_TC": "106"}},
}


# An experiment for `ecntune preflight` on the emulated cluster: one collective part, no
# error sampling or ping (fast).
PREFLIGHT_EXP = """
name: {name}
fabric: {{backend: ssh, inventory_file: {inventory}}}
workload: {{parts: [{{kind: collective, op: all_reduce, size_bytes: 1048576}}]}}
search: {{knobs: {{kmin_bytes: {{low: 20000, high: 200000}}}}, warm_starts: false}}
preflight: {{error_sample_s: 0, df_ping: false}}
sampler: {{name: random}}
tracking: {{enabled: false}}
results_dir: {results}
"""


def run_preflight(emu: Any, tmp_path: Path, inv: dict[str, Any], name: str = "emu-preflight",
                  workload: dict[str, Any] | None = None, extra: dict[str, Any] | None = None
                  ) -> tuple[Any, list[dict[str, Any]]]:
    """``ecntune preflight --json`` of PREFLIGHT_EXP (its workload replaced by ``workload``,
    ``extra`` sections added) on the inventory mapping ``inv``: the CLI result and its rows."""
    import json

    import yaml
    from click.testing import CliRunner

    from tuner.cli import main

    (tmp_path / "inv.yaml").write_text(yaml.safe_dump(inv))
    exp = tmp_path / "exp.yaml"
    exp.write_text(PREFLIGHT_EXP.format(name=name, inventory=tmp_path / "inv.yaml",
                                        results=tmp_path / "results"))
    if workload is not None or extra:
        more = {**({"workload": workload} if workload is not None else {}), **(extra or {})}
        exp.write_text(yaml.safe_dump({**yaml.safe_load(exp.read_text()), **more}))
    res = CliRunner().invoke(main, ["preflight", str(exp), "--json"])
    return res, [json.loads(ln) for ln in res.stdout.splitlines() if ln.startswith("{")]


def sample(relpath: str) -> str:
    """A reference sample without its leading ``# source:`` provenance line."""
    text = (REFERENCE / relpath).read_text()
    lines = text.splitlines(keepends=True)
    return "".join(lines[1:]) if lines and lines[0].startswith("# source:") else text


def stand_ins(emu: Any, tool: str) -> list[int]:
    """PIDs of this cluster's running ``tool`` stand-ins (scanned in /proc)."""
    mark = f"ECNTUNE_EMU_ROOT={emu.root}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        try:
            if (d.name.isdigit() and f"tools.{tool}".encode() in (d / "cmdline").read_bytes()
                    and mark in (d / "environ").read_bytes().split(b"\0")):
                pids.append(int(d.name))
        except OSError:
            continue
    return pids


def gone(emu: Any, tool: str, timeout_s: float = 5.0) -> bool:
    """True once no ``tool`` stand-in of this cluster runs (polls: TERM takes a moment)."""
    import time

    deadline = time.monotonic() + timeout_s
    while stand_ins(emu, tool):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def inventory_data() -> dict[str, Any]:
    return copy.deepcopy(BASE_INVENTORY)
