"""docs/real-cluster.md lists every command ``diagnose`` runs on a host and a switch; keep it in
step."""

from __future__ import annotations

from pathlib import Path

import yaml

from tuner.diagnose.catalog import render
from tuner.inventory import parse_inventory

DOC = Path(__file__).resolve().parents[2] / "docs" / "real-cluster.md"


def test_the_diagnose_command_list_is_what_the_code_runs() -> None:
    text = DOC.read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    inv = parse_inventory(yaml.safe_load(example), "docs/real-cluster.md example")
    shown = text.split("<!-- diagnose:start -->\n", 1)[1].split("<!-- diagnose:end -->", 1)[0]
    assert shown == render(inv), "regenerate: python -m tuner.diagnose.catalog <inventory>"
    for needle in ("lspci -vvv -s 0000:3b:00.0", "ping -M do -c 1 -W 1 -s 8972 -I ens1f0np0 "
                   "192.168.10.12", "nvidia-smi topo -m", "ethtool -m ens1f0np0",
                   "/proc/irq/$i/smp_affinity_list", "gid_attrs/types/$n", "default_roce_tos",
                   "carrier_changes", "— under `sudo -n`", "-p 18915 -F -q 1 -D 2",
                   "show interfaces counters", "nv show interface swp2 link", "nv show system",
                   "show version"):
        assert needle in shown
