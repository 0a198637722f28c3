"""docs/real-cluster.md shows every command the SSH backend runs; keep it in step with code."""

from __future__ import annotations

from pathlib import Path

import yaml

from tuner.inventory import parse_inventory
from tuner.ssh.catalog import catalog, render

DOC = Path(__file__).resolve().parents[2] / "docs" / "real-cluster.md"


def test_the_command_list_in_the_docs_is_what_the_code_runs() -> None:
    text = DOC.read_text()
    example = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    inv = parse_inventory(yaml.safe_load(example), "docs/real-cluster.md example")
    shown = text.split("<!-- catalog:start -->\n", 1)[1].split("<!-- catalog:end -->", 1)[0]
    assert shown == render(inv), "regenerate: python -m tuner.ssh.catalog <example inventory>"
    plans = catalog(inv)
    # Every kind of command is in the list: writes of both mlx5 layouts and both switches,
    # the measurement and the stop command; and which run under sudo follows the inventory.
    joined = "\n".join(p.command for p in plans)
    for needle in ("> roce_rp/rpg_time_reset", "> rp_time_reset", "ecnconfig -p ECNTUNE_CANARY",
                   "nv config apply -y", "all_reduce_perf", "ib_write_lat", "kill -TERM",
                   "ib_write_bw", "--tclass=106", " -N 8", "--latency_gap=50"):
        assert needle in joined
    # sudo follows the inventory for device settings and switches; measurements and NIC
    # counters never use it
    per_target = {"gpu01": True, "gpu02": True, "leaf01": True, "leaf02": False}
    tools = ("_perf ", "ib_write_lat ", "ib_write_bw ", "kill -TERM")
    for p in plans:
        measures = (any(t in p.command for t in tools) or p.command.startswith("ethtool -S ")
                    or p.purpose.startswith(("check the rails",
                                             "pre-flight, read-only (executables)")))
        assert p.sudo == (False if measures else per_target[p.target]), (p.target, p.purpose)
