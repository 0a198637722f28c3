"""The perftest stand-ins over SSH: refuse what perftest refuses, print what the parsers read,
and take real time (an idle probe ends fast; a background flow lasts its ``-D``)."""

from __future__ import annotations

import threading
import time

import pytest

from objectives import parsers
from tests.emulated.helpers import run
from tuner.emulated import EmulatedCluster, sshd_available

pytestmark = [pytest.mark.ssh, pytest.mark.skipif(
    not sshd_available(), reason="/usr/sbin/sshd missing (apt-get install openssh-server)")]


def test_tos_without_rdma_cm_is_refused_like_perftest(emulated_cluster: EmulatedCluster) -> None:
    for tool in ("ib_write_lat", "ib_write_bw"):
        code, _, err = run(emulated_cluster, "host0", f"{tool} -d mlx5_0 -x 3 -T 106")
        assert code == 1 and "TOS only valid for rdma_cm based QP and RawEth QP" in err


def _pair(emu: EmulatedCluster, tool: str, opts: str) -> tuple[tuple[int, str, str],
                                                               tuple[int, str, str], float]:
    out: dict[str, tuple[int, str, str]] = {}
    server = threading.Thread(target=lambda: out.setdefault(
        "s", run(emu, "host1", f"{tool} {opts}", timeout=60)))
    server.start()
    deadline = time.monotonic() + 15
    while not list(emu.target_dir("host1").glob("perftest_server-*.json")):
        assert time.monotonic() < deadline, f"{tool} server did not start"
        time.sleep(0.05)
    t0 = time.monotonic()
    client = run(emu, "host0", f"{tool} {opts} {emu.targets['host1'].address}", timeout=60)
    elapsed = time.monotonic() - t0
    server.join(30)
    return out["s"], client, elapsed


def test_bw_flow_lasts_its_duration_at_its_rate(emulated_cluster: EmulatedCluster) -> None:
    opts = ("-d mlx5_0 -x 3 --tclass=106 -p 18790 -F -q 1 -D 2 -s 65536 --report_gbits "
            "--rate_limit=30 --rate_units=g --rate_limit_type=SW")
    (scode, sout, _), (code, out, err), elapsed = _pair(emulated_cluster, "ib_write_bw", opts)
    assert code == 0 and scode == 0, err
    assert 2.0 <= elapsed < 10
    run_ = parsers.parse_perftest(out).run
    [row] = run_.bandwidth
    assert (row.bytes, row.bw_peak_gbps, row.bw_average_gbps) == (65536, 0.0, 30.0)
    assert parsers.parse_perftest(sout).run.bandwidth[0].bw_average_gbps == 30.0


def test_an_idle_probe_ends_fast(emulated_cluster: EmulatedCluster) -> None:
    """5000 samples, 20 µs apart, on an idle fabric: a fraction of a second of sampling."""
    opts = "-d mlx5_0 -x 3 --tclass=106 -p 18791 -F -s 64 -n 5000 --latency_gap=20"
    (scode, _, _), (code, out, err), elapsed = _pair(emulated_cluster, "ib_write_lat", opts)
    assert code == 0 and scode == 0, err
    lat = parsers.parse_perftest(out).run.latency[0]
    assert lat.iterations == 5000 and lat.t_typical_us is not None
    assert 5000 * (20 + lat.t_typical_us) / 1e6 <= elapsed < 15  # it did take real time
