"""One test per DCQCN reaction-point mechanism (issue 11 item 3), each driving the kernel's
phase functions alone (``rp_cnp``, ``rp_alpha``, ``rp_rate``) or the engine, with exact numbers.

Each test was checked by deleting its mechanism from ``rocesim/_kernel.py`` once and watching
it fail.

Sources:
- [DCQCN] Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015,
  §3.1 (RP algorithm): on a CNP, RT <- RC, RC <- RC (1 - α/2), α <- (1 - g) α + g; with no CNP
  for K µs, α <- (1 - g) α; increases by timer and byte counter, fast recovery for the first F
  events, additive then hyper increase (Fig. 6 state machine); g = 1/256, F = 5.
- [CX-PARAMS] Mellanox Community "DCQCN Parameters" (community.mellanox.com/docs/DOC-2790,
  v19) and NVIDIA DOCA "DCQCN CC Parameters" (networking-docs.nvidia.com/doca/archive/3-4-0/
  dcqcn-cc-parameters): α is updated every ``dce_tcp_rtt`` µs, incremented if a CNP arrived in
  the period, decremented otherwise: α <- (G/1024) α + (1 - G/1024) / α <- (G/1024) α with
  G = ``dce_tcp_g`` (factory 1019), i.e. the paper's g is (1024 - G)/1024 = 5/1024 ~ 1/205;
  ``rpg_min_dec_fac``: one cut keeps at least that % of the rate; ``rate_to_set_on_first_cnp``
  sets the rate on a flow's first CNP; ``rate_reduce_monitor_period``: time between cuts;
  ``rpg_threshold``: increase events per stage (fast recovery, additive, hyper).
- [MSTFLINT] mstflint's mlxconfig database, DCE_TCP_G (../shared/reference/mlx5-dcqcn-config/
  mlxconfig-roce-cc-params-mstflint-db.txt): "Alpha = (cnp_received * dceTcpG) + (1 - dceTcpG)
  * alpha . dceTcpG is divided by 2^10", the opposite reading of G; rocesim takes either
  (``Topology.dce_tcp_g_reading``), "kept" ([CX-PARAMS]) by default.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from rocesim import DcqcnConfig, EcnConfig, Fabric, Simulation, Topology, Workload
from rocesim import _kernel as K
from rocesim import _state as S
from rocesim.workload import Background

# the kernel's helpers are compiled without a Python entry point (only ``run`` needs one);
# the tests call their own compiled copies of the reaction point's three phases
rp_alpha, rp_cnp, rp_rate = (njit(f.py_func) for f in (K.rp_alpha, K.rp_cnp, K.rp_rate))


def _flow(**par: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One flow's state (the engine's dtypes) and one NIC's parameter row, line rate 100."""
    ff = np.zeros((1, S.NFF))
    fi = np.zeros((1, S.NFI), dtype=np.int32)
    p = np.zeros((1, S.NP_COLS))
    defaults = {"P_MAX_RATE": 100.0, "P_LINE": 100.0, "P_MIN_DEC": 0.5, "P_GD_FAC": 0.5,
                "P_RRMP": 4.0, "P_TIME_RESET": 300.0, "P_THRESHOLD": 1.0, "P_G": 1 / 256,
                "P_ALPHA_RTT": 1.0, "P_INIT_ALPHA": 1.0, "P_MIN_RATE": 0.0}
    defaults.update(par)
    for name, value in defaults.items():
        p[0, getattr(S, name)] = value
    ff[0, S.RC] = ff[0, S.RT] = 100.0
    ff[0, S.TCUT] = -1e18
    return ff, fi, p


# alpha --------------------------------------------------------------------------------------
def test_alpha_decays_by_one_minus_g_per_dce_tcp_rtt_without_cnps() -> None:
    # [DCQCN] §3.1: no CNP during a period -> α <- (1 - g) α, once per period (here 5 µs).
    g = 5 / 1024
    ff, fi, p = _flow(P_G=g, P_ALPHA_RTT=5.0)
    fi[0, S.ACTIVE] = 1
    ff[0, S.ALPHA] = 1.0
    seen = []
    for _ in range(50):
        rp_alpha(ff, fi, 0, p, 0, 1.0)
        seen.append(ff[0, S.ALPHA])
    assert seen[3] == 1.0  # unchanged inside the first period
    assert seen[4] == pytest.approx(1 - g, rel=1e-12)
    assert seen[49] == pytest.approx((1 - g) ** 10, rel=1e-12)


def test_alpha_rises_towards_one_with_a_cnp_in_every_period() -> None:
    # [DCQCN] §3.1: CNP in the period -> α <- (1 - g) α + g; from 0: α_k = 1 - (1 - g)^k.
    g = 1 / 16
    ff, fi, p = _flow(P_G=g, P_ALPHA_RTT=1.0)
    fi[0, S.ACTIVE] = 1
    for _ in range(20):
        fi[0, S.CNPPERIOD] = 1  # what rp_cnp records for a CNP on an active limiter
        rp_alpha(ff, fi, 0, p, 0, 1.0)
        assert fi[0, S.CNPPERIOD] == 0  # the period's flag is consumed
    assert ff[0, S.ALPHA] == pytest.approx(1 - (1 - g) ** 20, rel=1e-12)


@pytest.mark.parametrize("reading, kept", [("kept", 1000 / 1024), ("vendor", 24 / 1024)])
def test_dce_tcp_g_read_as_the_fabric_says(reading: str, kept: float) -> None:
    # [CX-PARAMS]: α <- (dce_tcp_g/1024) α without CNP; [MSTFLINT]: α <- (1 - dce_tcp_g/1024) α.
    # Engine end to end: one CNP allocates the limiter with α = initial_alpha_value/1024, then
    # 100 µs without CNP at dce_tcp_rtt = 10 µs leave α = 1023/1024 x (1000/1024)^10 (0.788)
    # read as kept, x (24/1024)^10 (1.5e-17) read as the vendor's text.
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=2, dce_tcp_g_reading=reading))
    fab.set_ecn("sw0", EcnConfig(enabled=False))
    for nic in fab.nic_names:
        fab.set_dcqcn(nic, DcqcnConfig(dce_tcp_g=1000, dce_tcp_rtt=10))
    sim = Simulation(fab, Workload(background=[Background("incast", 1.0, 1)]),
                     max_time_us=1000)
    sim.advance(50)
    sim.inject_cnp(0)
    sim.advance(1)
    assert sim.flow_stats()["alpha"][0] == pytest.approx(1023 / 1024)
    sim.advance(100)
    assert sim.flow_stats()["alpha"][0] == pytest.approx(1023 / 1024 * kept ** 10, rel=1e-9)


# cuts ---------------------------------------------------------------------------------------
def test_one_cut_per_rate_reduce_monitor_period() -> None:
    # [CX-PARAMS] rate_reduce_monitor_period = 7 µs, a CNP every µs for 70 µs: exactly 10 cuts,
    # 7 µs apart, each RC <- RC (1 - α gd) with α = 1, gd = 1/2 (so halving, floor 0). The
    # decrease timer starts at the first CNP and cuts on its ticks (mlxconfig RPG_GD: "reduced
    # at the beginning of the next rate_reduce_monitor_period interval").
    ff, fi, p = _flow(P_RRMP=7.0, P_MIN_DEC=0.0)
    cuts = []
    for t in range(71):
        rc = ff[0, S.RC]
        rp_cnp(ff, fi, 0, p, 0, float(t))
        fi[0, S.CNPPERIOD] = 0  # keep α at 1: this test is about the cut's timing only
        rp_rate(ff, fi, 0, p, 0, float(t), 1.0)
        if ff[0, S.RC] < rc:
            cuts.append(t)
            assert ff[0, S.RC] == pytest.approx(rc * 0.5)
    assert cuts == list(range(7, 71, 7))


def test_rpg_min_dec_fac_floors_one_cut() -> None:
    # [CX-PARAMS] rpg_min_dec_fac: with α = 1 and rpg_gd = 10 (gd = 1) the cut would take RC
    # to 0; min_dec_fac = 30 % keeps 30 of 100, the next cut 9; rpg_min_rate floors below that.
    ff, fi, p = _flow(P_GD_FAC=1.0, P_MIN_DEC=0.3, P_MIN_RATE=5.0, P_RRMP=0.0)
    fi[0, S.ACTIVE] = 1
    ff[0, S.ALPHA] = 1.0
    rates = []
    for t in range(3):
        fi[0, S.CUTPEND] = 1
        rp_rate(ff, fi, 0, p, 0, float(t), 1.0)
        rates.append(ff[0, S.RC])
    assert rates == pytest.approx([30.0, 9.0, 5.0])


def test_rate_to_set_on_first_cnp() -> None:
    # [CX-PARAMS] rate_to_set_on_first_cnp = 20: the first CNP sets RC = 20 at once (target
    # keeps the old rate, no cut pending); without it the first CNP requests a normal cut.
    ff, fi, p = _flow(P_FIRST_RATE=20.0, P_INIT_ALPHA=0.75)
    rp_cnp(ff, fi, 0, p, 0, 10.0)
    assert (ff[0, S.RC], ff[0, S.RT], ff[0, S.TCUT]) == (20.0, 100.0, 10.0)
    assert fi[0, S.ACTIVE] == 1 and fi[0, S.CUTPEND] == 0 and ff[0, S.ALPHA] == 0.75
    ff, fi, p = _flow(P_FIRST_RATE=0.0, P_INIT_ALPHA=0.75)
    rp_cnp(ff, fi, 0, p, 0, 10.0)
    assert ff[0, S.RC] == 100.0 and fi[0, S.CUTPEND] == 1
    rp_rate(ff, fi, 0, p, 0, 10.0, 1.0)
    assert ff[0, S.RC] == 100.0  # the cut waits for the decrease timer's first tick
    rp_rate(ff, fi, 0, p, 0, 10.0 + 4.0, 1.0)
    assert ff[0, S.RC] == pytest.approx(100.0 * (1 - 0.75 * 0.5))
    # engine end to end: 20 000 Mb/s on the first CNP of a 100G flow
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=2))
    fab.set_ecn("sw0", EcnConfig(enabled=False))
    for nic in fab.nic_names:
        fab.set_dcqcn(nic, DcqcnConfig(rate_to_set_on_first_cnp=20_000, rpg_byte_reset=0))
    sim = Simulation(fab, Workload(background=[Background("incast", 1.0, 1)]),
                     max_time_us=1000)
    sim.advance(50)
    sim.inject_cnp(0)
    sim.advance(2)
    assert sim.flow_stats()["rate_gbps"][0] == pytest.approx(20.0)


def test_limiter_released_at_line_rate_takes_the_first_cnp_path_again() -> None:
    # Topology.release_limiter (issue 11): once RC and RT are back within 1 Mb/s (0.125 B/µs)
    # of rpg_max_rate the limiter is released, and the next CNP allocates a new one: α =
    # initial_alpha_value again (not the decayed α) and RC = rate_to_set_on_first_cnp.
    # Timer events every 10 µs, F = 1, no additive step: RC 20 -> 60 -> 80 -> ... -> 99.92 at
    # the 10th event (100 µs), the first within 0.125 of 100.
    for release in (1.0, 0.0):
        ff, fi, p = _flow(P_RELEASE=release, P_INIT_ALPHA=0.75, P_FIRST_RATE=20.0,
                          P_TIME_RESET=10.0, P_G=1 / 16)
        rp_cnp(ff, fi, 0, p, 0, 0.0)
        assert (ff[0, S.RC], ff[0, S.ALPHA]) == (20.0, 0.75)
        active = []
        for t in range(1, 151):
            rp_alpha(ff, fi, 0, p, 0, 1.0)
            rp_rate(ff, fi, 0, p, 0, float(t), 1.0)
            active.append(int(fi[0, S.ACTIVE]))
        rp_cnp(ff, fi, 0, p, 0, 150.0)
        if release:
            assert active.index(0) == 99 and not any(active[99:])  # released at t = 100 µs
            assert (ff[0, S.RC], ff[0, S.ALPHA]) == (20.0, 0.75)
        else:
            assert all(active)
            assert ff[0, S.RC] > 99.8 and ff[0, S.ALPHA] < 0.75 * (15 / 16) ** 99


# increases ----------------------------------------------------------------------------------
def test_fast_recovery_then_additive_then_hyper_by_timer_and_byte_counter() -> None:
    # [DCQCN] Fig. 6 / [CX-PARAMS] with F = rpg_threshold = 2: the first F timer events are
    # fast recovery (RC <- (RT + RC)/2, RT kept); the timer stage past F with the byte stage
    # not past F is additive increase (RT += ai); both past F is hyper increase (RT += hai).
    ff, fi, p = _flow(P_TIME_RESET=10.0, P_BYTE_RESET=1000.0, P_THRESHOLD=2.0, P_AI=1.0,
                      P_HAI=10.0)
    fi[0, S.ACTIVE] = 1
    ff[0, S.RC], ff[0, S.RT] = 40.0, 80.0
    trace = []
    for _ in range(30):  # three timer events, no bytes sent
        rp_rate(ff, fi, 0, p, 0, 0.0, 1.0)
        trace.append((ff[0, S.RC], ff[0, S.RT]))
    assert trace[8] == (40.0, 80.0)  # no event before rpg_time_reset
    assert trace[9] == (60.0, 80.0)  # fast recovery 1
    assert trace[19] == (70.0, 80.0)  # fast recovery 2
    assert trace[29] == (75.5, 81.0)  # timer stage 3 > F, byte stage 0: additive
    assert fi[0, S.TSTAGE] == 3 and fi[0, S.BSTAGE] == 0
    ff[0, S.BYTECNT] = 3000.0  # three byte-counter events in one step
    rp_rate(ff, fi, 0, p, 0, 0.0, 1.0)
    # byte stages 1, 2: additive (RT 82, 83); byte stage 3 > F as well: hyper (RT 93)
    assert fi[0, S.BSTAGE] == 3
    assert ff[0, S.RT] == 93.0
    rc = 75.5
    for rt in (82.0, 83.0, 93.0):
        rc = 0.5 * (rc + rt)
    assert ff[0, S.RC] == pytest.approx(rc)
