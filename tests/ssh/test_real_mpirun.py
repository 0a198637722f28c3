"""Debian's Open MPI (openmpi-bin) is the referee of every ``mpirun`` line ecntune can emit.

``mpirun --do-not-launch`` parses the whole command line and maps the job, then stops before
starting a daemon: an option it does not know ends it at once with ``unknown option``. The
lines are the catalog's (docs/real-cluster.md) and each shape the plan can take: NCCL variables
from the inventory and from a workload part, several GPUs per host, a placement's rank order,
``-N`` cycles, and diagnose's three runs of a part (NCCL's choice, Ring, Tree). ``.ci/run``
installs openmpi-bin.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess

import pytest

from tests.ssh.test_real_perftest import _docs_inventory
from tuner.diagnose.nccl import runs_of
from tuner.inventory import Inventory
from tuner.ssh.catalog import catalog
from tuner.ssh.placement import Placement
from tuner.ssh.plan import nccl_command
from tuner.workload import CollectivePart

MPIRUN = shutil.which("mpirun", path="/usr/bin")
needs_mpirun = pytest.mark.skipif(MPIRUN is None, reason="Debian's openmpi-bin is not installed "
                                  "(.ci/run installs it: apt-get install openmpi-bin)")


def _variants(inv: Inventory) -> list[Inventory]:
    la = inv.launcher
    return [inv,
            inv.model_copy(update={"launcher": la.model_copy(update={
                "gpus_per_host": 8, "nccl_env": {**la.nccl_env, "NCCL_IB_GID_INDEX": "3",
                                                 "NCCL_IB_QPS_PER_CONNECTION": "4"}})}),
            inv.model_copy(update={"launcher": la.model_copy(update={"nccl_env": {}})})]


def _runs_mpirun(command: str) -> bool:
    """The line's program is mpirun (after ``env`` and its assignments), not a line that only
    names it (pre-flight's ``command -v -- mpirun``)."""
    words = shlex.split(command)
    if words and words[0] == "env":
        words = [w for w in words[1:] if "=" not in w]
    return bool(words) and words[0].rsplit("/", 1)[-1] == "mpirun"


def mpirun_lines() -> list[str]:
    lines = []
    parts = [CollectivePart(op="all_reduce", size_bytes=1 << 20, nccl_algo="Ring",
                            nccl_proto="Simple", channels=8, qps_per_connection=2),
             CollectivePart(op="alltoall", size_bytes=1 << 16)]
    for inv in _variants(_docs_inventory()):
        lines += [p.command for p in catalog(inv) if _runs_mpirun(p.command)]
        lines += [nccl_command(i, p) for i, p in runs_of(inv, parts[0]).values()]
        names = [h.name for h in inv.hosts]
        for part in parts:
            for place in (None, Placement(replicate=1, ranks=tuple(reversed(names)),
                                          probe_hosts=tuple(names))):
                lines.append(nccl_command(inv, part, 100, 8, place))
    assert lines
    return list(dict.fromkeys(lines))


def verdict(line: str) -> subprocess.CompletedProcess[str]:
    """Run ``line`` with Debian's mpirun told not to launch (``env`` prefix kept)."""
    argv = shlex.split(line)
    at = next(i for i, w in enumerate(argv) if w.rsplit("/", 1)[-1] == "mpirun")
    argv[at:at + 1] = [str(MPIRUN), "--do-not-launch"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                          stdin=subprocess.DEVNULL)


@needs_mpirun
@pytest.mark.parametrize("line", mpirun_lines())
def test_every_mpirun_line_is_accepted_by_open_mpi(line: str) -> None:
    res = verdict(line)
    assert res.returncode == 0 and "unknown option" not in res.stderr, (
        f"Open MPI refused `{line}`:\n{res.stderr}")


@needs_mpirun
def test_the_referee_refuses_what_open_mpi_refuses() -> None:
    good = mpirun_lines()[0]
    bad = verdict(good.replace("mpirun", "mpirun --no-such-option", 1))
    assert bad.returncode != 0 and 'unknown option "--no-such-option"' in bad.stderr
