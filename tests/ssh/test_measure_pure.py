"""Measurement command lines and result handling, on real nccl-tests/perftest samples."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from objectives.measurement import Counters
from tests.ssh.conftest import sample
from tuner.errors import MeasurementError
from tuner.inventory import parse_inventory
from tuner.ssh.measure import absent_counter_notes, part_result
from tuner.ssh.plan import (
    RTT_GUESS_US,
    background_flows,
    cycle_s,
    join,
    nccl_command,
    overlap,
    probe_flows,
    sized_iterations,
    unsupported,
)
from tuner.ssh.shell import UnsafeValue
from tuner.workload import BackgroundPart, CollectivePart, ProbePart, Workload


@pytest.fixture
def inv(inventory_data: dict[str, Any]) -> Any:
    inventory_data["hosts"][0]["nic_gbps"] = 400
    return parse_inventory(inventory_data)


def test_nccl_command_uses_the_template_env_and_workload_sizes(inv: Any) -> None:
    part = CollectivePart(op="all_reduce", size_bytes=1 << 20, iterations=7)
    cmd = nccl_command(inv, part)
    assert cmd == (
        "env NCCL_IB_HCA=mlx5_0 NCCL_IB_TC=106 NCCL_IB_FIFO_TC=106 NCCL_IB_GID_INDEX=3 "
        "mpirun --allow-run-as-root -np 2 -H 127.0.10.11,127.0.10.12 -x NCCL_IB_HCA "
        "-x NCCL_IB_TC -x NCCL_IB_FIFO_TC -x NCCL_IB_GID_INDEX "
        "/opt/nccl-tests/build/all_reduce_perf -b 1048576 -e 1048576 -f 2 -g 1 -n 7 -w 2 -c 1")
    assert nccl_command(inv, part, 900, 8).endswith("-n 900 -w 2 -c 1 -N 8")


def test_srun_templates_get_no_mpirun_exports(inv: Any) -> None:
    la = inv.launcher.model_copy(update={"mpirun": "srun -n {np} -w {hostlist}",
                                         "gpus_per_host": 8})
    cmd = nccl_command(inv.model_copy(update={"launcher": la}),
                       CollectivePart(op="alltoall", size_bytes=4096))
    assert "srun -n 16 -w 127.0.10.11:8,127.0.10.12:8 /opt/nccl-tests/build/alltoall_perf" in cmd
    assert " -x " not in cmd


@pytest.mark.parametrize("template", [
    "mpirun --mca plm_rsh_args '-p 2222' -np {np} -H {hostlist}",  # a quote: one word each
    "mpirun -np {np} -H {hostlist};reboot",
    "mpirun -np {np} -H {hostlist} $(reboot)",
    "mpirun -np {np}\nreboot -H {hostlist}",
])
def test_every_launcher_word_reaches_the_shell_as_one_quoted_word(inv: Any,
                                                                  template: str) -> None:
    la = inv.launcher.model_construct(**{**inv.launcher.__dict__, "mpirun": template})
    cmd = nccl_command(inv.model_construct(**{**inv.__dict__, "launcher": la}),
                       CollectivePart(op="all_reduce", size_bytes=8))
    filled = [w.replace("{np}", "2").replace("{hostlist}", "127.0.10.11,127.0.10.12")
              for w in template.split()]
    sent = cmd.split(" ")
    start = sent.index("mpirun")
    assert sent[start:start + len(filled)] == [shlex.quote(w) for w in filled]
    assert shlex.split(cmd)[start:start + len(filled)] == filled  # the shell sees these words


def test_control_characters_never_reach_a_command_line() -> None:
    for bad in (["a", "b\nc"], ["a", ""], ["x\x00"], ["\x7f"]):
        with pytest.raises(UnsafeValue):
            join(bad)
    assert join(["a b", "c'd", "$(x)"]) == "'a b' 'c'\"'\"'d' '$(x)'"


def test_probe_pairs_ports_gap_and_traffic_class(inv: Any) -> None:
    flows = probe_flows(inv, ProbePart(size_bytes=64, pairs=3, interval_us=50))
    assert [(f.server, f.client, f.port) for f in flows] == [
        ("host0", "host1", 18515), ("host1", "host0", 18516), ("host0", "host1", 18517)]
    assert flows[0].server_cmd == ("ib_write_lat -d mlx5_0 -i 1 -x 3 --tclass=106 -p 18515 -F "
                                   "-s 64 -n 5000 --latency_gap=50")
    assert flows[0].client_cmd == flows[0].server_cmd + " 127.0.10.11"
    assert flows[1].client_cmd.endswith(" 127.0.10.12")
    assert " -T " not in flows[0].server_cmd  # -T needs rdma_cm (-R) in perftest
    no_gap = probe_flows(inv, ProbePart(interval_us=0.2, pairs=1))[0].server_cmd
    assert "latency_gap" not in no_gap


def test_background_flows_follow_the_twins_patterns(inv: Any) -> None:
    incast = background_flows(inv, [BackgroundPart(pattern="incast", load=0.25, fan_in=8)], 30)
    assert [(f.server, f.client) for f in incast] == [("host0", "host1")]  # fan_in clamped
    assert incast[0].client_cmd == (
        "ib_write_bw -d mlx5_0 -i 1 -x 3 --tclass=106 -p 18715 -F -q 1 -D 30 -s 65536 "
        "--report_gbits --rate_limit=25 --rate_units=g --rate_limit_type=SW 127.0.10.11")
    perm = background_flows(inv, [BackgroundPart(pattern="permutation")], 5.5)
    assert [(f.server, f.client) for f in perm] == [("host1", "host0"), ("host0", "host1")]
    assert "-D 6 " in perm[0].server_cmd and "--rate_limit=120 " in perm[0].server_cmd  # 400G
    with pytest.raises(MeasurementError, match="other_tos"):
        background_flows(inv, [BackgroundPart(priority="other")], 5)
    la = inv.launcher.model_copy(update={"other_tos": 32})
    other = background_flows(inv.model_copy(update={"launcher": la}),
                             [BackgroundPart(priority="other")], 5)
    assert "--tclass=32" in other[0].client_cmd


def test_parts_the_ssh_backend_cannot_generate_are_named(inv: Any) -> None:
    wl = Workload(parts=[{"kind": "background", "priority": "other"},
                         {"kind": "probe"}, {"kind": "probe", "pairs": 2}])
    problems = unsupported(inv, wl)
    assert len(problems) == 2
    assert problems[0].startswith("workload.parts[0] (background): priority 'other'")
    assert problems[1].startswith("workload.parts[2] (probe): one probe part")
    assert unsupported(inv, Workload(parts=[{"kind": "probe"}, {"kind": "background"}])) == []


def test_sizing_from_the_timed_pass() -> None:
    part = CollectivePart(op="all_reduce", size_bytes=1 << 20, iterations=5)
    assert sized_iterations(part, 100.0, 1.0) == 5000  # 1 s = 2 x 5000 x 100 us
    assert sized_iterations(part, 1e6, 1.0) == 5  # never below the workload's iterations
    assert sized_iterations(part, float("nan"), 1.0) == 5


def test_a_cycle_leaves_room_for_starting_the_probe(inv: Any) -> None:
    probe = ProbePart(interval_us=50)
    planned = inv.launcher.perftest_iterations * (50 + RTT_GUESS_US) / 1e6
    # 7 rows after the first span 3 planned probe runs plus the probe start-up (default 5 s)
    assert cycle_s(inv, probe) == pytest.approx((3 * planned + 5.0) / 7)
    fast = inv.model_copy(update={"launcher": inv.launcher.model_copy(
        update={"probe_start_s": 2.0, "probe_delay_s": 1.0})})
    assert cycle_s(fast, probe) == pytest.approx((3 * planned + 3.0) / 7)


def test_overlap_is_the_share_of_the_probe_inside_the_traffic() -> None:
    assert overlap((2.0, 4.0), (1.0, 10.0)) == 1.0
    assert overlap((2.0, 4.0), (3.0, 10.0)) == 0.5
    assert overlap((0.0, 1.0), (3.0, 10.0)) == 0.0  # idle probe before the collectives
    assert overlap((11.0, 12.0), (3.0, 10.0)) == 0.0


def test_results_of_a_real_allreduce_run(inv: Any) -> None:
    text = sample("nccl-tests/allreduce-2node-16rank-h100.txt")
    part = CollectivePart(op="all_reduce", size_bytes=1073741824, weight=2.0)
    res = part_result(text, 0, part, inv)
    assert res.ranks == 16  # from the banner, not the inventory
    assert res.time_us == pytest.approx(6759.0)
    assert res.busbw_gbytes_per_s == pytest.approx(297.86)
    assert res.weight == 2.0 and res.wrong == 0
    assert res.line_rate_gbytes_per_s == pytest.approx(50.0)


def test_cycles_are_averaged_row_by_row(inv: Any) -> None:
    """``-N`` prints one row per cycle: the result is their mean, each kept as a sample."""
    text = sample("nccl-tests/allreduce-2node-16rank-h100.txt")
    row = next(ln for ln in text.splitlines() if ln.strip().startswith("1073741824"))
    slower = row.replace("6759.0", "7759.0").replace("297.86", "259.47")
    assert slower != row
    text = text.replace(row, f"{row}\n{slower}")
    part = CollectivePart(op="all_reduce", size_bytes=1073741824)
    res = part_result(text, 0, part, inv)
    assert res.iteration_times_us == [6759.0, 7759.0]
    assert res.time_us == pytest.approx(7259.0)
    assert res.busbw_gbytes_per_s == pytest.approx((297.86 + 259.47) / 2)


@pytest.mark.parametrize(
    ("mutate", "rc", "reason"),
    [
        (lambda t: t, 1, "exited 1"),
        (lambda t: t, None, "no exit status"),
        (lambda t: t.replace("# Using devices", "host0:1:1 [0] NCCL WARN NET/IB : "
                             "Got completion with error 12\n# Using devices"), 0,
         "NCCL WARN NET/IB : Got completion with error 12"),
        (lambda t: t.replace("297.86      0", "297.86      3"), 0, "#wrong = 3"),
        (lambda t: t.split("# Out of bounds")[0], 0, "unreadable output"),  # strict: no footer
        (lambda t: "invalid option 'N'\nUSAGE: all_reduce_perf \n", 0,
         "refused an option: invalid option 'N' .*-N/--run_cycles"),  # old build, exit 0
    ],
)
def test_failed_runs_are_failures_with_the_reason(inv: Any, mutate: Any, rc: int | None,
                                                  reason: str) -> None:
    text = sample("nccl-tests/allreduce-2node-16rank-h100.txt")
    assert mutate(text) != text or rc != 0
    part = CollectivePart(op="all_reduce", size_bytes=1073741824)
    with pytest.raises(MeasurementError, match=reason):
        part_result(mutate(text), rc, part, inv)


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
    assert "'NCCL_ALGO=^NVLS' NCCL_PROTO=Simple NCCL_IB_QPS_PER_CONNECTION=4 mpirun" in cmd
    assert "-x NCCL_ALGO -x NCCL_PROTO -x NCCL_IB_QPS_PER_CONNECTION /opt" in cmd
    assert "NCCL_MIN_NCHANNELS" not in cmd  # left at its default: NCCL decides


def test_preflight_refuses_a_workload_the_ssh_backend_cannot_generate(
        inv: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    import safety.preflight
    import tuner.canary_layout
    import tuner.preflight_facts
    import tuner.ssh.exec_plan
    import tuner.ssh.exec_trust
    from tuner.cli import preflight

    monkeypatch.setattr(tuner.preflight_facts, "collect", lambda *a: None)
    monkeypatch.setattr(tuner.ssh.exec_trust, "exec_checks", lambda *a: [])
    monkeypatch.setattr(tuner.ssh.exec_plan, "plan_checks", lambda *a: [])
    monkeypatch.setattr(safety.preflight, "run_checks", lambda *a: [])
    monkeypatch.setattr(tuner.canary_layout, "coverage_checks", lambda *a: [])
    cluster = SimpleNamespace(inventory=inv)
    bad = SimpleNamespace(workload=Workload(parts=[{"kind": "collective", "op": "alltoall",
                                                    "size_bytes": 8},
                                                   {"kind": "background",
                                                    "priority": "other"}]))
    [res] = preflight.check(bad, cluster)  # type: ignore[arg-type]
    assert (res.check, res.status) == ("workload", "fail")
    assert "launcher.other_tos" in res.evidence
    good = SimpleNamespace(workload=Workload(parts=[{"kind": "probe"}]))
    assert [r.status for r in preflight.check(good, cluster)] == ["pass"]  # type: ignore[arg-type]
    assert preflight.check(good, SimpleNamespace()) == []  # type: ignore[arg-type]  # sim


def test_the_overlap_is_a_trial_metric() -> None:
    from objectives.measurement import Measurement
    from tuner.tracking import trial_metrics

    assert trial_metrics(Measurement(extra={"probe_overlap": 0.97}))["probe_overlap"] == 0.97
    assert "probe_overlap" not in trial_metrics(Measurement())
