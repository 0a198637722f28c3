"""``ecntune parse nccl`` on pasted logs: older formats and logs cut off before the footer.

Fixtures in ``fixtures/nccl-tests`` are copies of shared/reference/nccl-tests samples (their
first line names the public source) plus one constructed from nccl-tests' printf formats
(empty redop cell, said so in its first line). Trials stay strict (tests/ssh/test_measure_pure).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from objectives import parsers as P
from tuner.cli.parse import command
from tuner.errors import ParseError

FIX = Path(__file__).resolve().parent / "fixtures" / "nccl-tests"


def parse_cli(name: str, *flags: str) -> tuple[int, str]:
    res = CliRunner().invoke(command, ["nccl", *flags, str(FIX / name)])
    return res.exit_code, res.output


def test_empty_redop_cells_of_old_alltoall_tables() -> None:
    r = P.parse_nccl_tests((FIX / "alltoall-empty-redop-pre2022-constructed.txt").read_text())
    assert r.columns[:5] == ["size", "count", "type", "redop", "time"]
    assert [row.size_bytes for row in r.rows] == [33554432, 67108864, 134217728]
    first = r.rows[0]
    assert first.redop == "" and first.count == 32768
    assert first.out_of_place.time_us == 1464.2 and first.out_of_place.busbw_gbytes_per_s == 22.83
    assert first.out_of_place.error is None and first.in_place is not None  # N/A
    assert r.complete and not r.truncated
    [res] = r.collective_results("alltoall", 256)[:1]
    assert res.busbw_gbytes_per_s == 22.83


def test_a_row_short_of_a_cell_elsewhere_is_still_an_error() -> None:
    text = (FIX / "alltoall-empty-redop-pre2022-constructed.txt").read_text()
    broken = text.replace("22.92   22.83    N/A", "22.92    N/A", 1)
    assert broken != text
    with pytest.raises(ParseError, match="row has 10 fields, header has 12"):
        P.parse_nccl_tests(broken)


def test_float_error_column_and_failed_footer() -> None:
    code, out = parse_cli("allgather-out-of-bounds-FAILED-issue37.txt")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["rows"][0]["out_of_place"]["error"] == 1.0
    assert doc["out_of_bounds"] == 2 and doc["truncated"] is False


@pytest.mark.parametrize(("name", "rows", "last_busbw"), [
    ("alltoall-8gpu-h20-issue314.txt", 3, 61.84),
    ("reduce-scatter-zero-size-rows-issue128.txt", 7, 0.01),
    ("allreduce-tree-8gpu-pcie-nccl-issue1530.txt", 0, None),  # cut inside its only row
])
def test_truncated_logs_give_their_complete_rows(name: str, rows: int,
                                                  last_busbw: float | None) -> None:
    code, out = parse_cli(name)
    assert code == 0, out
    doc = json.loads(out)
    assert doc["truncated"] is True and doc["complete"] is False
    assert len(doc["rows"]) == rows
    if last_busbw is not None:
        assert doc["rows"][-1]["out_of_place"]["busbw_gbytes_per_s"] == last_busbw
    strict, text = parse_cli(name, "--strict")
    assert strict == 2 and "ParseError" in text


def test_strict_and_allow_truncated_exclude_each_other() -> None:
    code, out = parse_cli("alltoall-8gpu-h20-issue314.txt", "--strict", "--allow-truncated")
    assert code == 2 and "contradict" in out
