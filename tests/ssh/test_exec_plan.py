"""``ecntune preflight``'s ``executes`` rows (``tuner.ssh.exec_plan``) never show a secret,
though the command that runs keeps it. (That the rows are what the measurement runs:
tests/faults/test_exec_l1.py, on the emulated cluster.)"""

from __future__ import annotations

from typing import Any

from tuner.inventory import parse_inventory
from tuner.ssh.exec_plan import measurement_lines, rows
from tuner.workload import Workload


def test_secrets_in_printed_lines_are_redacted(inventory_data: dict[str, Any]) -> None:
    inventory_data["launcher"]["nccl_env"] = {
        "NCCL_DEBUG_FILE": "https://admin:Hunter2Secret@logs.example/nccl",
        "UCX_API_TOKEN": "ghp_abcdef0123456789"}
    inventory_data["hosts"][0]["password"] = "S3cretLogin"
    inv = parse_inventory(inventory_data)
    work = Workload(parts=[{"kind": "collective", "op": "all_reduce", "size_bytes": 1024}])
    lines = measurement_lines(inv, work)
    assert "Hunter2Secret" in lines[0].command  # what runs keeps them ...
    text = "\n".join(r.evidence for r in rows(lines))
    for secret in ("Hunter2Secret", "ghp_abcdef0123456789", "S3cretLogin"):
        assert secret not in text  # ... what is printed does not
    assert "UCX_API_TOKEN='<redacted>'" in text or "UCX_API_TOKEN=<redacted>" in text
