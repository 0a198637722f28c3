"""The collectives layer: which algorithm and protocol NCCL chose, and Ring against Tree
measured apart.

For every ``all_reduce`` part of the workload (Tree implements AllReduce only) nccl-tests runs
three times on the canary, one after the other, at the part's size: as the job runs it, with
``NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING`` so rank 0 names its choice, then with
``NCCL_ALGO=Ring`` and with ``NCCL_ALGO=Tree``. NCCL picks from a cost model of the topology it
detected; when the algorithm it picked runs ``SLOWER`` below the faster of the two, the job
leaves bandwidth on the table whatever ECN does, and a tuner that measures it would tune around
that. NCCL's TUNING line, from its own source (src/enqueue.cc):

* current (NVIDIA/nccl@01e6dd9): ``AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE
  channel{Lo..Hi}={0..3}`` (``ncclAlgoToString``/``ncclProtoToString``: ``TREE``, ``RING``,
  ..., ``LL``, ``LL128``, ``SIMPLE``); releases that printed ``ncclAlgoStr``/``ncclProtoStr``
  there show ``Tree``/``Ring`` and ``Simple``, and some append `` comm 0x...``;
* older: ``4194304 Bytes -> Algo 1 proto 2 time 123.4`` (indices, with or without the
  function's name first): algorithm 0 Tree, 1 Ring; protocol 0 LL, 1 LL128, 2 Simple.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from tuner.diagnose.finding import Finding, NotChecked

if TYPE_CHECKING:
    from tuner.inventory import Inventory
    from tuner.workload import CollectivePart, Workload

CHECK = "nccl_algo"
# Below this share of the faster algorithm's busbw, NCCL's choice is a finding: run-to-run
# spread of nccl-tests busbw at one size is a few per cent, so 10 % is a real difference.
SLOWER = 0.10
ALGOS = ("Ring", "Tree")
DEBUG = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING"}
_OLD_ALGOS = {0: "Tree", 1: "Ring"}
_OLD_PROTOS = {0: "LL", 1: "LL128", 2: "Simple"}
_PROTOS = ("LL", "LL128", "Simple")
_NEW = re.compile(r"NCCL INFO (?P<func>\w+): (?P<bytes>\d+) Bytes -> Algo (?P<algo>[A-Za-z]\w*) "
                  r"proto (?P<proto>\w+)")
_OLD = re.compile(r"NCCL INFO (?:(?P<func>\w+): )?(?P<bytes>\d+) Bytes -> Algo (?P<algo>\d+) "
                  r"proto (?P<proto>\d+) time")


@dataclass(frozen=True)
class Choice:
    """One TUNING line: the collective (None on the oldest lines), its bytes, algorithm and
    protocol."""

    func: str | None
    size_bytes: int
    algo: str
    proto: str

    @property
    def label(self) -> str:
        return f"{self.algo}/{self.proto}"


def parse_tuning(text: str) -> list[Choice]:
    """Every TUNING line in ``text`` (any other line is skipped)."""
    out: list[Choice] = []
    for line in text.splitlines():
        m = _NEW.search(line)
        if m:
            out.append(Choice(m["func"], int(m["bytes"]), _named(m["algo"], ALGOS),
                              _named(m["proto"], _PROTOS)))
            continue
        m = _OLD.search(line)
        if m:
            a, p = int(m["algo"]), int(m["proto"])
            out.append(Choice(m["func"], int(m["bytes"]), _OLD_ALGOS.get(a, f"algorithm {a}"),
                              _OLD_PROTOS.get(p, f"protocol {p}")))
    return out


def _named(printed: str, names: tuple[str, ...]) -> str:
    """One spelling for the names both spellings share (``RING`` and ``Ring``)."""
    return next((n for n in names if n.lower() == printed.lower()), printed)


def chosen(choices: list[Choice], size_bytes: int) -> Choice | None:
    """NCCL's choice for an AllReduce of ``size_bytes``: the most frequent line at that size."""
    at = [c for c in choices if c.size_bytes == size_bytes and c.func in (None, "AllReduce")]
    return Counter(at).most_common(1)[0][0] if at else None


@dataclass(frozen=True)
class AlgoRun:
    """One all_reduce part measured three ways: busbw (GB/s) ``as chosen``, with Ring, with
    Tree; NCCL's choice from its TUNING lines; an error per run that could not be measured."""

    part: str
    size_bytes: int
    busbw: dict[str, float] = field(default_factory=dict)
    choice: Choice | None = None
    errors: dict[str, str] = field(default_factory=dict)
    nccl: str | None = None  # the library version nccl-tests' banner names


def runs_of(inv: Inventory, part: CollectivePart) -> dict[str, tuple[Inventory, CollectivePart]]:
    """The three runs of one part: ``as chosen`` with NCCL's debug output, then each
    algorithm forced (``NCCL_ALGO``; the rest of the job's environment unchanged)."""
    la = inv.launcher
    debug = inv.model_copy(update={"launcher": la.model_copy(
        update={"nccl_env": {**la.nccl_env, **DEBUG}})})
    out = {"as chosen": (debug, part)}
    for algo in ALGOS:
        out[algo] = (inv, part.model_copy(update={"nccl_algo": algo}))
    return out


def measure(cluster: Any, workload: Workload) -> list[AlgoRun]:
    """Run every all_reduce part of ``workload`` three ways (``cluster``: an ``SshCluster``),
    as the login user on the launcher host, one run at a time."""
    from objectives.parsers import parse_nccl_tests
    from tuner.errors import TunerError
    from tuner.ssh.measure import part_result
    from tuner.ssh.plan import nccl_command

    inv = cluster.inventory
    out: list[AlgoRun] = []
    for part in workload.collectives:
        if part.op != "all_reduce":
            continue
        run = AlgoRun(f"all_reduce {part.size_bytes} B", part.size_bytes)
        for name, (i, p) in runs_of(inv, part).items():
            try:
                res = cluster.pool[inv.launcher.host].run(
                    nccl_command(i, p), timeout_s=inv.ssh.command_timeout_s, sudo=False,
                    check=False)
                text = res.stdout + res.stderr
                got = part_result(text, res.status, p, i)
            except (TunerError, OSError, ValueError) as exc:  # not measured: "not checked"
                run = replace(run, errors={**run.errors, name: str(exc)})
                continue
            run = replace(run, busbw={**run.busbw, name: got.busbw_gbytes_per_s})
            if name == "as chosen":
                run = replace(run, choice=chosen(parse_tuning(text), part.size_bytes),
                              nccl=version(parse_nccl_tests(text).nccl_library))
        out.append(run)
    return out


def rows(runs: list[AlgoRun]) -> list[Finding | NotChecked]:
    """Findings from the measured runs (pure)."""
    if not runs:
        return [NotChecked(layer="collectives", check=CHECK, where="canary",
                           reason="the workload has no all_reduce part (Tree implements "
                                  "AllReduce only)")]
    out: list[Finding | NotChecked] = []
    for r in runs:
        if r.errors:
            name, why = next(iter(r.errors.items()))
            out.append(NotChecked(layer="collectives", check=CHECK, where=r.part,
                                  reason=f"{name}: {why}"))
            continue
        faster = max(ALGOS, key=lambda a: r.busbw[a])
        if r.choice is None:
            out.append(NotChecked(layer="collectives", check=CHECK, where=r.part,
                                  reason="NCCL printed no TUNING line at this size "
                                         "(NCCL_DEBUG_SUBSYS=TUNING); Ring and Tree were "
                                         "measured: " + _busbw(r)))
            continue
        if r.busbw["as chosen"] < (1 - SLOWER) * r.busbw[faster]:
            out.append(Finding(
                layer="collectives", check=CHECK, where=r.part,
                evidence=f"NCCL chose {r.choice.label} (rank 0's TUNING lines at "
                         f"{r.size_bytes} bytes); busbw {_busbw(r)}",
                cause=f"NCCL's cost model picks an algorithm this fabric runs "
                      f"{1 - r.busbw['as chosen'] / r.busbw[faster]:.0%} slower than "
                      f"{faster} (the topology it detected, a tuner plugin, NCCL_ALGO in the "
                      "environment)",
                action=f"run the job with NCCL_ALGO={faster} (the workload part's "
                       f"nccl_algo), or fix what misleads NCCL's model; tune ECN with the "
                       "algorithm the job will run"))
    return out


def version(code: int | None) -> str | None:
    """NCCL_VERSION_CODE (major*10000 + minor*100 + patch, NCCL >= 2.9) as ``2.27.3``."""
    return None if code is None else f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def table(runs: list[AlgoRun]) -> dict[str, dict[str, str]]:
    """part -> NCCL's version and choice, and the busbw of each run (``diagnosis.json``
    ``nccl``)."""
    return {r.part: {"nccl": r.nccl or "not printed",
                     "chosen": r.choice.label if r.choice else "not printed",
                     **{f"busbw {k} (GB/s)": f"{v:.2f}" for k, v in r.busbw.items()}}
            for r in runs}


def _busbw(r: AlgoRun) -> str:
    return ", ".join(f"{k} {v:.2f} GB/s" for k, v in r.busbw.items())
