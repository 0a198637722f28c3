"""Paired replicates on the emulated cluster: what ran on the hosts (the stand-ins' own log of
their argument lists) shows replicate r on placement r, the same for a baseline and a trial.

The rank order is the ``-H`` list the ``mpirun`` stand-in was given (and the ranks it printed);
a probe pair is the host whose ``ib_write_lat`` served (no peer argument) and the host whose
``ib_write_lat`` connected to it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tuner.cluster.ssh import SshCluster
from tuner.emulated.cluster import EmulatedCluster
from tuner.emulated.tools._perftest import parse
from tuner.inventory import load_inventory
from tuner.settings import Settings
from tuner.ssh.placement import describe, for_replicate
from tuner.workload import Workload

pytestmark = pytest.mark.ssh

WORK = Workload(parts=[{"kind": "collective", "op": "all_reduce", "size_bytes": 1 << 20,
                        "iterations": 2},
                       {"kind": "probe", "size_bytes": 64, "pairs": 1}], time_limit_s=90)
# A confirmation-like replicate number, and one whose placement differs from it in both ways.
PAIRED, OTHER = 1_234_567, 3
_RANK = re.compile(r"#\s+Rank\s+\d+ Group\s+\d+ Pid\s+\d+ on\s+(\S+) device")


def _new(emu: EmulatedCluster, host: str, tool: str, seen: dict[str, int]) -> list[list[str]]:
    runs = emu.commands(host, tool)
    new, seen[f"{host}/{tool}"] = runs[seen.get(f"{host}/{tool}", 0):], len(runs)
    return new


def _ran(emu: EmulatedCluster, seen: dict[str, int]) -> dict[str, Any]:
    """What ran on the hosts since ``seen`` (log lengths, updated): the ``-H`` lists of
    ``mpirun`` and the (server, client) hosts of every ``ib_write_lat`` pair."""
    name_of = {t.address: n for n, t in emu.targets.items()}
    hosts_lists, servers, clients = [], {}, {}
    for host in emu.host_names:
        for argv in _new(emu, host, "mpirun", seen):
            hosts_lists.append([name_of[a] for a in argv[argv.index("-H") + 1].split(",")])
        for argv in _new(emu, host, "ib_write_lat", seen):
            o = parse("ib_write_lat", argv)  # as the stand-in reads its command line
            if o["peer"] is None:
                servers[o["port"]] = host
            else:
                clients[o["port"]] = (host, name_of[o["peer"]])
    for port, (_client, peer) in clients.items():
        assert servers[port] == peer  # the client connected to the host that served that port
    return {"ranks": hosts_lists,
            "probes": sorted((servers[p], clients[p][0]) for p in clients)}


def test_replicates_run_on_their_own_placement_the_same_for_baseline_and_trial(
        emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    inv = load_inventory(emu.inventory_path)
    a, b = for_replicate(inv, PAIRED), for_replicate(inv, OTHER)
    assert a.ranks != b.ranks and a.probe_hosts[:2] != b.probe_hosts[:2]  # worth comparing
    seen: dict[str, int] = {}
    with SshCluster(inv) as c:
        assert c.describe().facts["placements"] == "vary"
        base = c.snapshot()
        m_base = c.measure(WORK, replicate=PAIRED)
        ran_base = _ran(emu, seen)
        nics = {n: d.model_copy(update={"rpg_ai_rate": d.rpg_ai_rate + 7})
                for n, d in base.nics.items()}
        c.apply(Settings(switches=base.switches, nics=nics))  # a trial
        try:
            m_trial = c.measure(WORK, replicate=PAIRED)
            ran_trial = _ran(emu, seen)
            m_other = c.measure(WORK, replicate=OTHER)
            ran_other = _ran(emu, seen)
        finally:
            c.apply(base)

    # the timed and the measured pass each ran mpirun with the placement's rank order
    assert ran_base["ranks"] == ran_trial["ranks"] == [list(a.ranks)] * 2
    assert ran_other["ranks"] == [list(b.ranks)] * 2
    assert ran_base["probes"] == ran_trial["probes"] == [a.probe_hosts[:2]]
    assert ran_other["probes"] == [b.probe_hosts[:2]]
    # nccl-tests' own rank lines agree, and the measurement names its placement
    for m, place in ((m_base, a), (m_trial, a), (m_other, b)):
        assert _RANK.findall(m.raw["nccl"]) == list(place.ranks)
        assert describe(place, [place.probe_hosts[:2]]) in m.notes
    assert (m_base.replicate, m_trial.replicate, m_other.replicate) == (PAIRED, PAIRED, OTHER)
