"""Debian's perftest is the referee of every perftest command line ecntune can emit.

Without an RDMA device, a command line perftest accepts stops at "Did not detect devices"; an
option it refuses stops earlier with its own complaint (" TOS only valid for rdma_cm based QP
and RawEth QP " for ``-T`` without ``-R``). ``.ci/run`` installs perftest; the stand-ins of the
emulated cluster ask the same binaries (``tuner.emulated.tools._perftest.real_verdict``).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from tuner.emulated.tools import _perftest
from tuner.inventory import Inventory, parse_inventory
from tuner.ssh.catalog import catalog
from tuner.ssh.plan import background_flows, probe_flows
from tuner.workload import BackgroundPart, ProbePart

DOC = Path(__file__).resolve().parents[2] / "docs" / "real-cluster.md"
TOOLS = ("ib_write_lat", "ib_write_bw")
installed = all(Path("/usr/bin", t).exists() for t in TOOLS)
needs_perftest = pytest.mark.skipif(not installed, reason="Debian's perftest is not installed "
                                    "(.ci/run installs it: apt-get install perftest)")
NO_DEVICE = "Did not detect devices"


def _docs_inventory() -> Inventory:
    example = DOC.read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    return parse_inventory(yaml.safe_load(example), "docs/real-cluster.md example")


def _variants(inv: Inventory) -> list[Inventory]:
    """The example plus what changes perftest words: other class, explicit latency hosts."""
    la = inv.launcher.model_copy(update={"other_tos": 0, "perftest_iterations": 10,
                                         "latency_hosts": [h.name for h in inv.hosts[:2]]})
    return [inv, inv.model_copy(update={"launcher": la})]


def perftest_lines() -> list[str]:
    """Every perftest command line: the catalog's, and each probe/background shape."""
    lines = []
    for inv in _variants(_docs_inventory()):
        lines += [p.command for p in catalog(inv)]
        for probe in (ProbePart(), ProbePart(interval_us=0.1, pairs=5, size_bytes=65536)):
            for f in probe_flows(inv, probe):
                lines += [f.server_cmd, f.client_cmd]
        parts = [BackgroundPart(pattern="permutation", load=1.0),
                 BackgroundPart(pattern="incast", load=0.01, fan_in=64)]
        if inv.launcher.other_tos is not None:
            parts.append(BackgroundPart(priority="other", lossless=False))
        for f in background_flows(inv, parts, 600):
            lines += [f.server_cmd, f.client_cmd]
    out = [ln for ln in dict.fromkeys(lines) if shlex.split(ln)[0].rsplit("/", 1)[-1] in TOOLS]
    assert {shlex.split(ln)[0] for ln in out} == set(TOOLS)
    return out


def real(line: str) -> str:
    argv = shlex.split(line)
    argv[0] = f"/usr/bin/{argv[0].rsplit('/', 1)[-1]}"
    env = {**os.environ, "SYSFS_PATH": "/nonexistent/ecntune-no-rdma"}
    res = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=env,
                         stdin=subprocess.DEVNULL, check=False)
    return res.stdout + res.stderr


@needs_perftest
@pytest.mark.parametrize("line", perftest_lines())
def test_every_perftest_line_fails_only_for_lack_of_a_device(line: str) -> None:
    out = real(line)
    assert NO_DEVICE in out, f"perftest refused `{line}`:\n{out}"


@needs_perftest
def test_the_referee_refuses_what_perftest_refuses() -> None:
    """The old probe (``-T`` without ``-R``) and a bandwidth-only flag on a latency test."""
    assert "TOS only valid for rdma_cm" in real("ib_write_lat -d mlx5_0 -x 3 -T 106 -s 64")
    assert NO_DEVICE not in real("ib_write_bw -d mlx5_0 --latency_gap=5")
    refused = _perftest.real_verdict("ib_write_lat", ["-d", "mlx5_0", "-T", "106"])
    assert refused is not None and "TOS only valid for rdma_cm" in str(refused)
    assert _perftest.real_verdict("ib_write_lat", ["-d", "mlx5_0", "--tclass=106"]) is None


def test_stand_ins_refuse_tos_without_rdma_cm_on_their_own(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """Where perftest is not installed the stand-ins still apply its rules."""
    monkeypatch.setattr(_perftest, "REAL_DIR", tmp_path)
    assert _perftest.real_verdict("ib_write_lat", ["-T", "106"]) is None  # nobody to ask
    with pytest.raises(_perftest.Usage, match="TOS only valid for rdma_cm"):
        _perftest.parse("ib_write_lat", ["-d", "mlx5_0", "-T", "106"])
    assert _perftest.parse("ib_write_lat", ["-R", "-T", "106"])["tos"] == 106
    with pytest.raises(_perftest.Usage, match="only for latency tests"):
        _perftest.parse("ib_write_bw", ["--latency_gap=5"])
    for line in perftest_lines():
        argv = shlex.split(line)
        _perftest.parse(argv[0], argv[1:])  # every line the tuner emits is understood
