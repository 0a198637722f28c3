"""The single-QP ``ib_write_bw`` test of ``diagnose``: the flows it runs, and how slow flows are
attributed to a host, a path, or the whole canary (pure)."""

from __future__ import annotations

import shlex

from tuner.diagnose.bw import THRESHOLD, BwFlow, bw_flows, rows
from tuner.inventory import parse_inventory


def _inv(n: int = 3) -> object:
    hosts = [{"name": f"h{i}", "address": f"10.0.0.{i + 1}", "key_file": "/k",
              "netdev": "ens1f0np0", "rdma_device": "mlx5_0", "pci": "0000:3b:00.0",
              "nic_gbps": 200, "data_address": f"192.168.0.{i + 1}"} for i in range(n)]
    return parse_inventory({"hosts": hosts, "switches": [], "launcher": {"host": "h0"}}, "test")


def test_one_unlimited_single_qp_flow_per_host_to_the_next() -> None:
    planned = bw_flows(_inv(), 2)
    assert [(b.sender, b.receiver, b.line_gbps) for _, b in planned] == [
        ("h0/mlx5_0", "h1/mlx5_0", 200), ("h1/mlx5_0", "h2/mlx5_0", 200),
        ("h2/mlx5_0", "h0/mlx5_0", 200)]
    flow = planned[0][0]
    client = shlex.split(flow.client_cmd)
    assert (flow.server, flow.client) == ("h1", "h0")
    assert client[0] == "ib_write_bw" and client[-1] == "192.168.0.2"  # the peer's data address
    for opt in (["-q", "1"], ["-D", "2"], ["-s", "65536"], ["-d", "mlx5_0"], ["-x", "3"]):
        assert " ".join(opt) in flow.client_cmd and " ".join(opt) in flow.server_cmd
    assert "--tclass=106" in client and "--report_gbits" in client
    assert "rate_limit" not in flow.client_cmd  # a cap would hide what the host can do
    assert len({f.port for f, _ in planned}) == 3


def _ring(gbps: list[float], line: float = 100) -> list[BwFlow]:
    n = len(gbps)
    return [BwFlow(f"h{i}/mlx5_0", f"h{(i + 1) % n}/mlx5_0", line, g) for i, g in enumerate(gbps)]


def test_a_host_whose_flows_are_both_slow_is_named() -> None:
    # h1 receives from h0 (flow 0) and sends to h2 (flow 1): both slow, h0 and h2 fast elsewhere
    found = rows(_ring([57.6, 57.6, 97.0, 96.5]))
    assert [(f.check, f.where, f.dominant) for f in found] == [
        ("single_qp_bw", "h1/mlx5_0", True)]
    assert "h0/mlx5_0 -> h1/mlx5_0 57.60 Gb/s of 100 (58 %)" in found[0].evidence
    assert "PCIe" in found[0].cause


def test_a_slow_path_between_fast_hosts_is_named_as_the_path() -> None:
    found = rows(_ring([97.0, 60.0, 97.0, 96.0]))
    assert [(f.where, f.dominant) for f in found] == [("h1/mlx5_0->h2/mlx5_0", False)]
    assert "hop between them" in found[0].cause


def test_every_flow_slow_cannot_be_attributed() -> None:
    found = rows(_ring([50.0, 51.0]))
    assert [(f.where, f.dominant) for f in found] == [("canary", False)]
    assert "cannot tell" in found[0].cause


def test_threshold_and_failed_flows() -> None:
    edge = THRESHOLD * 100
    assert rows(_ring([edge, edge + 5, 99, 99])) == []  # at the threshold: not slow
    failed = [BwFlow("h0/mlx5_0", "h1/mlx5_0", 100, error="ib_write_bw exit 1: no device"),
              *_ring([98.0, 98.0])[1:]]
    out = rows(failed)
    assert [(type(r).__name__, r.where) for r in out] == [
        ("NotChecked", "h0/mlx5_0->h1/mlx5_0")]  # never taken for fast
