"""``ecntune parse``: JSON on stdout for good input, exit code 2 and the quoted line otherwise."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from parser_refs import CASES, body, reference_dir

from tuner.cli.parse import KINDS, command


def test_every_kind_names_an_exported_parser() -> None:
    from objectives import parsers

    for kind, name in KINDS.items():
        assert name in parsers.__all__, kind


def test_parse_file_prints_model_json(tmp_path: Path) -> None:
    src = CASES / "pfcstat" / "last-cached-time-na-and-thousands" / "input.txt"
    res = CliRunner().invoke(command, ["pfcstat", str(src)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["rx"]["Ethernet0"]["3"] == 1234567 and doc["rx"]["Ethernet4"]["3"] is None
    assert doc["cached_at"] == "2020-10-01 13:15:55.420247"


def test_parse_stdin_and_garbage_exit_code_2() -> None:
    res = CliRunner().invoke(command, ["ethtool", "-"], input="     rx_packets: 1\noops here\n")
    assert res.exit_code == 2
    assert "ParseError" in res.output and "line 2" in res.output and "oops here" in res.output


def test_allow_truncated_flag() -> None:
    path = reference_dir() / "nccl-tests" / "alltoall-8gpu-h20-issue314.txt"
    text = body(path)
    strict = CliRunner().invoke(command, ["nccl", "--strict", "-"], input=text)
    assert strict.exit_code == 2 and "footer" in strict.output
    ok = CliRunner().invoke(command, ["nccl", "--allow-truncated", "-"], input=text)
    assert ok.exit_code == 0, ok.output
    doc = json.loads(ok.output)
    assert doc["rows"][2]["out_of_place"]["busbw_gbytes_per_s"] == 61.84
    assert doc["complete"] is False


def test_allow_truncated_refused_where_unsupported() -> None:
    src = CASES / "mlnx_qos" / "tab-indented-os-dcbx-pcp-trust" / "input.txt"
    res = CliRunner().invoke(command, ["mlnx_qos", "--allow-truncated", str(src)])
    assert res.exit_code == 2 and "no --allow-truncated" in res.output


@pytest.mark.parametrize(
    ("kind", "case"),
    [
        ("nccl", "nccl_tests/timestamp-column-and-nonzero-wrong"),
        ("perftest", "perftest/mib-sec-unit-perftest-24.07"),
        ("hwcounters", "hw_counters/rdma-json-output"),
        ("ecnconfig", "ecnconfig/field-order-not-fixed-two-profiles-total"),
        ("nvue", "nvue/units-bytes-kb-mb-two-columns"),
    ],
)
def test_ecntune_parse_end_to_end(kind: str, case: str) -> None:
    """Through the real console entry point (the ``ecntune`` group, as a user runs it)."""
    src = CASES / case / "input.txt"
    res = subprocess.run(
        [sys.executable, "-m", "tuner", "parse", kind, str(src)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)


def test_ecntune_parse_end_to_end_error() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "tuner", "parse", "pfcstat", "-"],
        input="Error: counters DB not ready\n",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2
    assert "pfcstat: line 1: not part of any table: 'Error: counters DB not ready'" in res.stderr


def test_pfcwd_kind_reads_stats_and_config() -> None:
    cfg = CASES / "pfcwd_config" / "old-format-without-history-column" / "input.txt"
    stats = CASES / "pfcwd_stats" / "na-status-and-backplane-ports" / "input.txt"
    res = CliRunner().invoke(command, ["pfcwd", str(cfg)])
    assert res.exit_code == 0 and json.loads(res.output)["polling_interval_ms"] == 100
    res = CliRunner().invoke(command, ["pfcwd", str(stats)])
    assert res.exit_code == 0 and json.loads(res.output)["rows"][1]["port"] == "Ethernet-BP256"
