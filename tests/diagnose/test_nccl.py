"""The collectives layer of ``diagnose`` (tuner/diagnose/nccl.py): NCCL's algorithm choice read
from its TUNING lines, against Ring and Tree measured apart; on the emulated cluster a planted
choice of Tree is found, and a clean cluster gives no finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.diagnose.test_parse import sample
from tests.faults.emu_helpers import experiment
from tuner.cli import main
from tuner.diagnose import nccl
from tuner.diagnose.finding import Finding, NotChecked
from tuner.emulated import EmulatedCluster, sshd_available


def test_tuning_lines_of_every_nccl_format() -> None:
    # NCCL's own formats, new and old (docs/reference-notes/diagnose-formats.md)
    got = nccl.parse_tuning(sample("nccl-tuning-lines"))
    assert [(c.func, c.size_bytes, c.label) for c in got] == [
        ("AllReduce", 4194304, "Ring/Simple"), ("AllReduce", 4096, "Tree/LL"),
        ("AllReduce", 8388608, "Tree/LL128"), ("AllGather", 37756928, "Ring/Simple"),
        (None, 65536, "Tree/LL")]
    # The choice at a size: the AllReduce lines there (an unnamed old line counts).
    assert nccl.chosen(got, 65536) == got[4]
    assert nccl.chosen(got, 37756928) is None  # an AllGather is not the AllReduce's choice
    assert nccl.version(22703) == "2.27.3" and nccl.version(21903) == "2.19.3"


def _run(chosen: float, ring: float, tree: float, algo: str = "Tree") -> nccl.AlgoRun:
    return nccl.AlgoRun("all_reduce 1048576 B", 1048576,
                        {"as chosen": chosen, "Ring": ring, "Tree": tree},
                        nccl.Choice("AllReduce", 1048576, algo, "Simple"))


def test_a_choice_more_than_ten_percent_below_the_faster_algorithm_is_a_finding() -> None:
    (f,) = nccl.rows([_run(8.9, 10.0, 8.9)])
    assert isinstance(f, Finding) and f.layer == "collectives" and not f.dominant
    assert f.evidence.startswith("NCCL chose Tree/Simple") and "Ring 10.00 GB/s" in f.evidence
    assert "11% slower than Ring" in f.cause and "NCCL_ALGO=Ring" in f.action
    assert nccl.rows([_run(9.1, 10.0, 9.1)]) == []  # within the run-to-run spread
    assert nccl.rows([_run(10.0, 10.0, 6.0, "Ring")]) == []  # the faster one was chosen


def test_what_cannot_be_judged_is_not_checked() -> None:
    (n,) = nccl.rows([])
    assert isinstance(n, NotChecked) and "no all_reduce part" in n.reason
    silent = nccl.AlgoRun("all_reduce 1048576 B", 1048576,
                          {"as chosen": 6.0, "Ring": 10.0, "Tree": 6.0})
    (n,) = nccl.rows([silent])
    assert isinstance(n, NotChecked) and "no TUNING line" in n.reason
    failed = nccl.AlgoRun("all_reduce 1048576 B", 1048576, {"as chosen": 6.0},
                          errors={"Tree": "all_reduce_perf -b 1048576: exit 1"})
    (n,) = nccl.rows([failed])
    assert isinstance(n, NotChecked) and n.reason == "Tree: all_reduce_perf -b 1048576: exit 1"


@pytest.mark.ssh
@pytest.mark.skipif(not sshd_available(), reason="/usr/sbin/sshd missing")
def test_a_planted_choice_of_tree_is_found_and_a_clean_cluster_has_none(
        emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    emu = emulated_cluster

    def diagnose(where: Path) -> tuple[dict, list[dict]]:
        where.mkdir()
        res = CliRunner().invoke(main, ["diagnose", str(experiment(emu, where)),
                                        "--sample-s", "0.2", "--bw-s", "0"])
        diag = json.loads((where / "results" / "diagnosis.json").read_text())
        assert res.exit_code == (1 if diag["findings"] else 0), res.output
        return diag, [f for f in diag["findings"] if f["check"] == "nccl_algo"]

    clean, found = diagnose(tmp_path / "clean")
    assert found == []
    row = clean["nccl"]["all_reduce 1048576 B"]
    assert row["nccl"] == "2.27.3" and row["chosen"] == "Ring/Simple"
    # Ring and Tree measured apart differ on this fabric (the test can tell).
    assert float(row["busbw Tree (GB/s)"]) < 0.8 * float(row["busbw Ring (GB/s)"])
    emu.inject("host0", nccl_algo_choice="Tree")  # NCCL's model misled (rank 0's host)
    _, (f,) = diagnose(tmp_path / "planted")
    assert f["where"] == "all_reduce 1048576 B"
    assert f["evidence"].startswith("NCCL chose Tree/Simple (rank 0's TUNING lines")
    assert "NCCL_ALGO=Ring" in f["action"]
