"""Measurement command lines and result handling, on real nccl-tests/perftest samples."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from objectives.measurement import Counters
from tests.ssh.conftest import sample
from tuner.errors import MeasurementError
from tuner.inventory import parse_inventory
from tuner.ssh.measure import (
    RC_MARK,
    absent_counter_notes,
    collective_results,
    collectives_script,
    nccl_command,
    perftest_commands,
    split_parts,
)
from tuner.workload import CollectivePart, ProbePart


@pytest.fixture
def inv(inventory_data: dict[str, Any]) -> Any:
    inventory_data["hosts"][0]["nic_gbps"] = 400
    return parse_inventory(inventory_data)


def test_nccl_command_uses_the_template_env_and_workload_sizes(inv: Any) -> None:
    part = CollectivePart(op="all_reduce", size_bytes=1 << 20, iterations=7)
    cmd = nccl_command(inv, part)
    assert cmd == (
        "env NCCL_IB_HCA=mlx5_0 NCCL_IB_TC=106 mpirun --allow-run-as-root -np 2 "
        "-H 127.0.10.11,127.0.10.12 -x NCCL_IB_HCA -x NCCL_IB_TC "
        "/opt/nccl-tests/build/all_reduce_perf -b 1048576 -e 1048576 -f 2 -g 1 -n 7 -w 2 -c 1")
    shlex.split(cmd)  # well-formed shell words


def test_srun_templates_get_no_mpirun_exports(inv: Any) -> None:
    la = inv.launcher.model_copy(update={"mpirun": "srun -n {np} -w {hostlist}",
                                         "gpus_per_host": 8})
    cmd = nccl_command(inv.model_copy(update={"launcher": la}),
                       CollectivePart(op="alltoall", size_bytes=4096))
    assert "srun -n 16 -w 127.0.10.11:8,127.0.10.12:8 /opt/nccl-tests/build/alltoall_perf" in cmd
    assert " -x " not in cmd


def test_perftest_runs_on_the_roce_class_between_two_canary_hosts(inv: Any) -> None:
    s_host, s_cmd, c_host, c_cmd = perftest_commands(inv, ProbePart(size_bytes=64))
    assert (s_host, c_host) == ("host0", "host1")
    assert s_cmd == "ib_write_lat -d mlx5_0 -i 1 -x 3 -T 106 -s 64 -n 5000 -F"
    assert c_cmd == s_cmd + " 127.0.10.11"


def _with_rc(text: str, rc: int, i: int = 0) -> str:
    return text + f"{RC_MARK.format(i=i)}{rc}\n"


def test_results_of_a_real_allreduce_run(inv: Any) -> None:
    text = _with_rc(sample("nccl-tests/allreduce-2node-16rank-h100.txt"), 0)
    part = CollectivePart(op="all_reduce", size_bytes=1073741824, weight=2.0)
    [res] = collective_results(text, [part], inv)
    assert res.ranks == 16  # from the banner, not the inventory
    assert res.time_us == pytest.approx(6759.0)
    assert res.busbw_gbytes_per_s == pytest.approx(297.86)
    assert res.weight == 2.0 and res.wrong == 0
    assert res.line_rate_gbytes_per_s == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda t: _with_rc(t, 1), "exited 1"),
        (lambda t: t, "no exit status"),
        (lambda t: _with_rc(t.replace("# Using devices", "host0:1:1 [0] NCCL WARN NET/IB : "
                                      "Got completion with error 12\n# Using devices"), 0),
         "NCCL WARN NET/IB : Got completion with error 12"),
    ],
)
def test_failed_runs_are_failures_with_the_reason(inv: Any, mutate: Any, reason: str) -> None:
    text = mutate(sample("nccl-tests/allreduce-2node-16rank-h100.txt"))
    part = CollectivePart(op="all_reduce", size_bytes=1073741824)
    with pytest.raises(MeasurementError, match=reason):
        collective_results(text, [part], inv)


def test_nonzero_wrong_is_a_failure(inv: Any) -> None:
    text = sample("nccl-tests/allreduce-2node-16rank-h100.txt")
    bad = text.replace("297.86      0", "297.86      3")
    assert bad != text
    with pytest.raises(MeasurementError, match="#wrong = 3"):
        collective_results(_with_rc(bad, 0), [CollectivePart(op="all_reduce",
                                                             size_bytes=1073741824)], inv)


def test_split_parts_keeps_each_status() -> None:
    script_out = "a\n### ecntune part 0 rc=0\nb\n### ecntune part 1 rc=7\n"
    assert split_parts(script_out, 2) == [("a\n", 0), ("\nb\n", 7)]
    assert split_parts("a\n### ecntune part 0 rc=0\nhalf", 2) == [("a\n", 0), ("\nhalf", None)]


def test_script_marks_every_part(inv: Any) -> None:
    parts = [CollectivePart(op="all_reduce", size_bytes=8), CollectivePart(op="alltoall",
                                                                          size_bytes=8)]
    script = collectives_script(inv, parts)
    assert script.count("### ecntune part") == 2 and "$?" in script


def test_absent_counters_are_noted_not_zeroed(inv: Any) -> None:
    after = Counters(ports={
        "host0/mlx5_0": {"rx_prio3_pause": 0, "tx_prio3_pause": 0, "rx_prio3_pause_duration": 0,
                         "tx_prio3_pause_duration": 0, "rx_out_of_buffer": 0, "np_cnp_sent": 0,
                         "np_ecn_marked_roce_packets": 0, "rp_cnp_handled": 0,
                         "out_of_sequence": 0, "packet_seq_err": 0, "local_ack_timeout_err": 0},
        "host1/mlx5_0": {"np_cnp_sent": 5},
        "leaf0/Ethernet0": {"pfc3_rx_pkts": 1, "pfc3_tx_pkts": 1, "queue3_ecn_marked_pkts": 1},
    })
    notes = absent_counter_notes(after, inv)
    assert not any(n.startswith("host0/") for n in notes)
    h1 = next(n for n in notes if n.startswith("host1/mlx5_0"))
    assert "rx_prio3_pause" in h1 and "only where PFC is on" in h1
    assert "np_cnp_sent" not in h1
    assert any(n.startswith("leaf0/Ethernet4: counters absent") for n in notes)
    assert after.ports["host1/mlx5_0"].get("rx_prio3_pause") is None


def test_workload_nccl_settings_reach_every_rank(inv: Any) -> None:
    part = CollectivePart(op="all_reduce", size_bytes=4096, nccl_algo="^NVLS", nccl_proto="Simple",
                          qps_per_connection=4)
    cmd = nccl_command(inv, part)
    assert "NCCL_ALGO='^NVLS' NCCL_PROTO=Simple NCCL_IB_QPS_PER_CONNECTION=4 mpirun" in cmd
    assert "-x NCCL_ALGO -x NCCL_PROTO -x NCCL_IB_QPS_PER_CONNECTION /opt" in cmd
    assert "NCCL_MIN_NCHANNELS" not in cmd  # left at its default: NCCL decides
