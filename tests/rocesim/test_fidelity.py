"""rocesim against the packet-level reference (HPCC ns-3, tests/rocesim/fixtures/packet_level/):
the issue-11 targets that rocesim meets today, each on a cited reference run, mapped by
bench/fidelity.py. The whole table is bench/fidelity.py -> docs/fidelity.md."""

from __future__ import annotations

import csv
import math
from collections import Counter

import numpy as np
import pytest

from bench.fidelity import (
    FIXTURES,
    HpccEcmpFabric,
    fabric_for,
    flows_for,
    load_reference,
    parse_case,
    reference_family,
    run_case,
    sim_family,
    wire_bytes,
)

REF = {r["name"]: r for r in load_reference()}


def _ref(name: str, col: str) -> float:
    return float(REF[name][col])


def _uplink_flows(run: str) -> Counter[tuple[int, int]]:
    """Data flows per leaf uplink decoded from the reference's per-port bytes: a data flow
    adds its wire bytes, a flow arriving at the leaf adds its 60-B ACKs to the same ports."""
    case = parse_case(run)
    npk = math.ceil(case.flow_bytes / 952)
    data, ack = wire_bytes(case.flow_bytes), 60 * npk
    out: Counter[tuple[int, int]] = Counter()
    with (FIXTURES / "leaf_uplink_bytes.csv").open() as fh:
        for r in csv.DictReader(fh):
            if r["run"] != run:
                continue
            b = int(r["tx_data_bytes"])
            fits = [a for a in range(49) if b >= a * data and (b - a * data) % ack == 0]
            assert len(fits) == 1, (r, fits)
            out[(int(r["switch"]) - 16, int(r["port"]) - 5)] = fits[0]
    return out


@pytest.mark.parametrize("run", ["ls4x2x4_up100g_a2a_kA_mlx_s1", "ls4x2x4_up100g_ring4_kA_mlx_s1",
                                 "ls4x2x4_up200g_ring4_kB_mlx_s1"])
def test_leaves_pick_the_spines_the_reference_picked(run: str) -> None:
    case = parse_case(run)
    fab = fabric_for(case)
    assert isinstance(fab, HpccEcmpFabric)
    pairs = np.array(flows_for(case))
    path, hops = fab.routes(pairs[:, 0], pairs[:, 1], np.zeros(len(pairs), dtype=np.int64))
    got: Counter[tuple[int, int]] = Counter()
    for i in np.flatnonzero(hops == 4):
        leaf = int(fab.nic_leaf[pairs[i, 0]])
        spine = [s for s in range(2) if fab.leaf_up[leaf, s] == path[i, 1]][0]
        got[(leaf, spine)] += 1
    # reference port 5 goes to spine 20 (rocesim spine0), port 6 to spine 21 (spine1)
    assert got == _uplink_flows(run)


def _family(family: str) -> tuple[dict[str, float], dict[str, float]]:
    """Reference and rocesim means over the reference's seeds of one family."""
    rows = [r for name, r in REF.items() if name.rsplit("_s", 1)[0] == family]
    return reference_family(rows), sim_family([run_case(parse_case(r["name"])) for r in rows])


# 1:N incast on one switch, DCQCN "mlx" timers, 32 MiB: the steady state the twin must keep
# (means over seeds 1-3 of the reference runs <family>_s1.._s3, results_all_runs.csv).
@pytest.mark.parametrize("family", ["inc8_100g_kA_mlx", "inc4_100g_kB_mlx", "inc8_200g_kB_mlx",
                                    "inc4_100g_kD_mlx"])
def test_incast_steady_state_matches_the_reference(family: str) -> None:
    ref, sim = _family(family)
    assert sim["util_ss"] == pytest.approx(ref["util_ss"], abs=0.03)
    assert sim["goodput_gbps"] == pytest.approx(ref["goodput_gbps"], rel=0.05)
    assert sim["qs_mean_kb"] == pytest.approx(ref["qs_mean_kb"], rel=0.35)
    assert sim["pfc_pauses"] == ref["pfc_pauses"] == 0


@pytest.mark.parametrize("run", ["inc8_100g_kA_mlx_buf1MB_s1", "inc8_100g_kB_mlx_buf1MB_s1"])
def test_small_buffer_pauses_as_often_as_the_reference(run: str) -> None:
    """With 1 MiB of buffer the dynamic threshold (after headroom and reserve) is ~42 KB per
    ingress port and PFC fires: 48 (kA) and 94 (kB) PAUSE frames in the reference."""
    m = run_case(parse_case(run))
    ref = _ref(run, "pfc")
    assert ref / 2 <= m.pfc_pauses <= 2 * ref
    assert m.util_ss == pytest.approx(_ref(run, "util_ss"), abs=0.03)
