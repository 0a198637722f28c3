"""The GPUs of an emulated host: as many as a GPU node has (``GPUS``, or one per rail when it
has more rails), GPU k next to rail k mod rails, in
EXCLUSIVE_PROCESS compute mode (``nvidia-smi -c EXCLUSIVE_PROCESS``, as shared GPU nodes often
run), so a second process on a GPU fails the way CUDA says it: cudaErrorDevicesUnavailable,
"CUDA-capable device(s) is/are busy or unavailable". Local rank j of a job runs on the j-th
GPU its ``CUDA_VISIBLE_DEVICES`` lists (all of them when unset), as nccl-tests' ``-g 1`` does
(``cudaSetDevice(localRank)``)."""

from __future__ import annotations

import atexit
from pathlib import Path

from tuner.emulated import fabric
from tuner.emulated import state as st

BUSY = "CUDA-capable device(s) is/are busy or unavailable"
GPUS = 8  # an 8-GPU node: concurrent parts of a one-rail host each get their own GPU


def count(rails: int) -> int:
    return max(rails, GPUS)
ORDINAL = "invalid device ordinal"


def rank_gpus(ranks_hosts: list[str], gpus: dict[str, int], visible: str | None
              ) -> list[int] | str:
    """The physical GPU of every rank, or the CUDA error of the first rank without one."""
    out = []
    for r, h in enumerate(ranks_hosts):
        seen = ([int(x) for x in visible.split(",") if x.strip().isdigit()]
                if visible is not None else list(range(gpus[h])))
        j = ranks_hosts[:r].count(h)
        if j >= len(seen) or seen[j] >= gpus[h]:
            return f"{h}: rank {r}: Cuda failure '{ORDINAL}'"
        out.append(seen[j])
    return out


def claim(root: Path, ranks_hosts: list[str], ranks: list[int], pid: int) -> str | None:
    """Hold the ranks' GPUs until this process exits (a killed one's pid is dead: its GPUs
    are free again); returns the CUDA error when one is held by another live process, and
    then holds nothing."""
    mine: dict[str, list[int]] = {}
    for h, g in zip(ranks_hosts, ranks, strict=True):
        mine.setdefault(h, []).append(g)
    taken: list[str] = []
    for h, wanted in mine.items():
        with st.locked(root / h):
            holders = st.read_json(root / h / "gpus.json", {}) or {}
            busy = [g for g in wanted if int(holders.get(str(g), 0)) not in (0, pid)
                    and fabric.alive(int(holders[str(g)]))]
            if busy:
                release(root, taken, pid)
                return f"{h}: GPU {busy[0]}: Cuda failure '{BUSY}'"
            holders.update({str(g): pid for g in wanted})
            st.write_json(root / h / "gpus.json", holders)
            taken.append(h)
    atexit.register(release, root, taken, pid)
    return None


def release(root: Path, hosts: list[str], pid: int) -> None:
    for h in hosts:
        with st.locked(root / h):
            holders = st.read_json(root / h / "gpus.json", {}) or {}
            st.write_json(root / h / "gpus.json",
                          {g: p for g, p in holders.items() if int(p) != pid})
