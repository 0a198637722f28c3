"""Journal durability/recovery semantics and verified rollback."""

from __future__ import annotations

from pathlib import Path

import pytest

from objectives.measurement import Counters, Measurement
from safety.journal import Journal, JournalUnreadable, JournalWriteError
from safety.rollback import restore
from tuner.cluster.base import Cluster, ClusterDescription
from tuner.errors import ApplyError, RollbackError
from tuner.settings import Settings

BASE = Settings.uniform(["leaf0"], ["host0/mlx5_0"], {})
TRIAL = Settings.uniform(["leaf0"], ["host0/mlx5_0"], {"kmin_bytes": 50_000,
                                                      "kmax_bytes": 200_000,
                                                      "rpg_time_reset": 50})


def test_journal_open_change_is_dirty_until_restored(tmp_path: Path) -> None:
    j = Journal(tmp_path / "j" / "journal.jsonl")
    assert j.dirty() is None
    eid = j.begin("s1", 3, BASE.targets(), BASE, TRIAL)
    assert j.dirty() is not None and j.dirty().settings == TRIAL  # type: ignore[union-attr]
    j.end(eid, "applied")
    assert j.dirty().id == eid  # type: ignore[union-attr]
    j.end(eid, "restored")
    assert j.dirty() is None


class FlakyCluster(Cluster):
    """Holds settings in memory; the first ``fail`` applies raise, ``stuck`` ignores writes."""

    def __init__(self, fail: int = 0, stuck: bool = False) -> None:
        self.current, self.fail, self.stuck, self.applies = TRIAL, fail, stuck, 0

    def describe(self) -> ClusterDescription:
        return ClusterDescription(name="t", backend="mem", canary_switches=["leaf0"],
                                  canary_nics=["host0/mlx5_0"])

    def snapshot(self) -> Settings:
        return self.current

    def apply(self, settings: Settings) -> None:
        self.applies += 1
        if self.applies <= self.fail:
            raise ApplyError("host0/mlx5_0: write refused")
        if not self.stuck:
            self.current = settings

    def read_back(self) -> Settings:
        return self.current

    def counters(self) -> Counters:
        return Counters()

    def measure(self, workload, monitor=None, *, replicate=0) -> Measurement:  # type: ignore[no-untyped-def]
        return Measurement()


def test_restore_retries_then_verifies() -> None:
    cl = FlakyCluster(fail=2)
    rep = restore(cl, BASE, retries=3, backoff_s=0)
    assert rep.attempts == 3 and cl.current == BASE


def test_restore_that_never_holds_names_targets_and_values() -> None:
    with pytest.raises(RollbackError) as err:
        restore(FlakyCluster(stuck=True), BASE, retries=2, backoff_s=0)
    msg = str(err.value)
    assert "leaf0.kmin_bytes is 50000 (baseline 1048576)" in msg
    assert "host0/mlx5_0.rpg_time_reset is 50 (baseline 300)" in msg


# -- a journal that cannot lie ------------------------------------------------------------------

def test_torn_last_line_is_terminated_and_reported_as_possibly_open(tmp_path: Path) -> None:
    j = Journal(tmp_path / "journal.jsonl")
    eid = j.begin("s1", 3, BASE.targets(), BASE, TRIAL)
    j.end(eid, "restored")
    with open(j.path, "ab") as fh:  # the disk filled up in the middle of the next record
        fh.write(b'{"event":"begin","id":"abc","study":"s1","trial":4,"targ')
    with pytest.raises(JournalUnreadable, match=r"line 3: not JSON .* possibly open"):
        j.dirty()
    assert j.possibly_open()
    eid2 = j.begin("s1", 5, BASE.targets(), BASE, TRIAL)  # space is back
    lines = j.path.read_bytes().split(b"\n")
    assert lines[2].endswith(b'"targ') and b'"trial":5' in lines[3]  # not glued onto it
    scan = j.scan()
    assert [e.trial for e in scan.entries] == [3, 5] and [b.line for b in scan.bad] == [3]
    j.acknowledge(3)  # what `ecntune recover` does once it restored the baseline
    assert j.dirty() is not None and j.dirty().id == eid2  # type: ignore[union-attr]


@pytest.mark.parametrize("line,reason", [
    (b"[]", "a list, not a record"),
    (b"null", "null, not a record"),
    (b"3.5", "a number, not a record"),
    (b'{"event":"begin"}', "checksum"),
    (b"\xff\xfe garbage", "not JSON"),
])
def test_malformed_records_are_possibly_open_never_a_crash(tmp_path: Path, line: bytes,
                                                           reason: str) -> None:
    j = Journal(tmp_path / "journal.jsonl")
    j.path.write_bytes(line + b"\n")
    with pytest.raises(JournalUnreadable, match=f"line 1: {reason}"):
        j.dirty()


def test_checksum_catches_a_record_that_still_parses(tmp_path: Path) -> None:
    from safety.journal import decode, encode

    j = Journal(tmp_path / "journal.jsonl")
    j.begin("s1", 3, BASE.targets(), BASE, TRIAL)
    altered = j.path.read_bytes().replace(b'"trial":3', b'"trial":7')
    j.path.write_bytes(altered)
    assert [b.reason for b in j.scan().bad] == [
        "checksum missing or wrong (torn or altered record)"]
    # right-shaped records without their crc (hand-written) are not trusted either
    rec = {"event": "end", "id": "x", "outcome": "restored", "at": 1.0}
    assert decode(encode(rec)) == rec
    with pytest.raises(ValueError, match="checksum"):
        decode(b'{"event":"end","id":"x","outcome":"restored","at":1.0}')


def test_a_record_of_the_wrong_shape_is_malformed(tmp_path: Path) -> None:
    from safety.journal import encode

    j = Journal(tmp_path / "journal.jsonl")
    j.path.write_bytes(encode({"event": "begin", "id": "x", "study": "s"})
                       + encode({"event": "end", "id": "nope", "outcome": "restored"})
                       + encode({"event": "begin", "id": "y", "study": "s", "trial": True,
                                 "targets": [], "baseline": {}, "settings": {}, "at": 1}))
    assert [(b.line, b.reason) for b in j.scan().bad] == [
        (1, "begin record without a valid 'trial'"),
        (2, "end of change 'nope' that never began"),
        (3, "begin record without a valid 'trial'")]


def test_write_error_is_a_clear_journal_write_error(tmp_path: Path) -> None:
    j = Journal("/dev/full")  # every write: ENOSPC
    with pytest.raises(JournalWriteError, match=r"cannot write \(No space left on device\)"
                       r".*ecntune recover"):
        j.begin("s1", 3, BASE.targets(), BASE, TRIAL)
    assert issubclass(JournalWriteError, RollbackError)  # exit 4


def test_recover_without_arguments_names_the_journals_it_found(tmp_path: Path,
                                                               monkeypatch) -> None:
    from click.testing import CliRunner

    from tuner.cli import main

    monkeypatch.chdir(tmp_path)
    none = CliRunner().invoke(main, ["recover"])
    assert none.exit_code == 2 and "no journal found" in none.stderr
    assert "results/*/journal.jsonl" in none.stderr
    for name in ("quick", "moe"):
        j = Journal(tmp_path / "results" / name / "journal.jsonl")
        j.end(j.begin(name, 1, BASE.targets(), BASE, TRIAL), "restored")
    res = CliRunner().invoke(main, ["recover"])
    assert res.exit_code == 0, res.output
    assert "found results/moe/journal.jsonl, results/quick/journal.jsonl" in res.stdout
    assert res.stdout.count("no open change") == 2
