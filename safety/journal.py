"""The change journal: written and fsync'd before every change, closed after every restore.

One JSON object per line, append-only. A change is *open* from ``begin`` until an outcome that
puts the canary back on a known state (``restored``, ``kept``, ``not_applied``); while one is
open the canary may be dirty, ``ecntune run``/``resume`` refuse to start, and ``ecntune
recover`` restores its baseline.

A journal that cannot lie:

* every record carries ``crc``, the CRC-32 of the record without it (canonical JSON), so a torn
  or corrupted line is recognised as such even when what is left happens to parse;
* before appending, a torn last line (disk full, file-size limit, power loss) is terminated, so
  the next record is never glued onto it;
* an unreadable or malformed record means *possibly open*: ``dirty()`` raises
  ``JournalUnreadable`` naming the line, ``recover`` restores the last recorded baseline and
  then acknowledges the line (``{"event": "ack", "line": N}``);
* a write that fails (``OSError``: disk full, read-only, size limit) raises ``JournalWriteError``
  -- exit 4 with a clear message, since the journal no longer says what the canary holds.
"""

from __future__ import annotations

import json
import os
import time
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from tuner.errors import RollbackError
from tuner.settings import Settings

CLOSING_OUTCOMES = ("restored", "kept", "not_applied")


class JournalWriteError(RollbackError):
    """The journal could not be written: the record of a change may be missing (exit 4)."""


class JournalUnreadable(RollbackError):
    """A record cannot be read: a change is possibly open (exit 4 until ``recover``)."""


class JournalEntry(BaseModel):
    model_config = ConfigDict(frozen=True)
    id: str
    study: str
    trial: int
    targets: list[str]
    baseline: Settings
    settings: Settings
    began_at: float
    outcomes: list[str] = []

    @property
    def closed(self) -> bool:
        return any(o.split(":")[0] in CLOSING_OUTCOMES for o in self.outcomes)

    @property
    def kept(self) -> bool:
        """Closed by keeping its settings on the canary (a winner): its last known state."""
        return any(o.split(":")[0] == "kept" for o in self.outcomes)


@dataclass(frozen=True)
class BadLine:
    """A line of the journal that is not a well-formed record (1-based ``line``)."""

    line: int
    reason: str


@dataclass(frozen=True)
class Scan:
    entries: list[JournalEntry]
    bad: list[BadLine]  # not yet acknowledged by ``recover``


def _crc(record: dict[str, Any]) -> str:
    body = json.dumps(record, separators=(",", ":"), sort_keys=True, ensure_ascii=True)
    return f"{zlib.crc32(body.encode('ascii')):08x}"


def encode(record: dict[str, Any]) -> bytes:
    """One journal line: the record plus its ``crc``, newline-terminated."""
    line = json.dumps({**record, "crc": _crc(record)}, separators=(",", ":"), ensure_ascii=True)
    return (line + "\n").encode("ascii")


def decode(line: bytes) -> dict[str, Any]:
    """The record of one line; ``ValueError`` naming what is wrong with it."""
    try:
        rec = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(rec, dict):
        kind = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(rec), "a number")
        raise ValueError(f"{kind}, not a record")
    crc = rec.pop("crc", None)
    if crc != _crc(rec):
        raise ValueError("checksum missing or wrong (torn or altered record)")
    return rec


_BEGIN = {"id": str, "study": str, "trial": int, "targets": list, "baseline": dict,
          "settings": dict, "at": (int, float)}
_END = {"id": str, "outcome": str}


def _shape(rec: dict[str, Any]) -> None:
    kinds: dict[Any, dict[str, Any]] = {"begin": _BEGIN, "end": _END, "ack": {"line": int}}
    fields = kinds.get(rec.get("event"))
    if fields is None:
        raise ValueError(f"unknown event {rec.get('event')!r}")
    for key, kind in fields.items():
        if not isinstance(rec.get(key), kind) or isinstance(rec.get(key), bool):
            raise ValueError(f"{rec['event']} record without a valid {key!r}")


class Journal:
    """Append-only change journal at ``path`` (its folder is created)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._write_error(exc) from None

    def _write_error(self, exc: OSError) -> JournalWriteError:
        return JournalWriteError(
            f"journal {self.path}: cannot write ({exc.strerror or exc}); the record of a "
            "change may be missing, so the canary may not be on its baseline. Free the space "
            f"or fix the folder, then run `ecntune recover --results {self.path.parent}`")

    def _append(self, record: dict[str, Any]) -> None:
        data = encode(record)
        try:
            new = not self.path.exists()
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
                         | os.O_NOFOLLOW, 0o600)  # a planted symlink is refused
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    data = b"\n" + data  # terminate a torn last line first
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            finally:
                os.close(fd)
            if new:  # make the file's creation itself durable
                dfd = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(dfd)
                finally:
                    os.close(dfd)
        except OSError as exc:
            raise self._write_error(exc) from None

    def begin(self, study: str, trial: int, targets: list[str], baseline: Settings,
              settings: Settings) -> str:
        """Record a change about to be made; returns its id."""
        entry_id = uuid.uuid4().hex[:12]
        self._append({"event": "begin", "id": entry_id, "study": study, "trial": trial,
                      "targets": targets, "baseline": baseline.model_dump(),
                      "settings": settings.model_dump(), "at": time.time()})
        return entry_id

    def end(self, entry_id: str, outcome: str) -> None:
        """Record what became of a change: ``applied``, ``restored``, ``kept``, ``failed:*``."""
        self._append({"event": "end", "id": entry_id, "outcome": outcome, "at": time.time()})

    def acknowledge(self, line: int) -> None:
        """``recover`` dealt with the unreadable record on ``line``."""
        self._append({"event": "ack", "line": line, "at": time.time()})

    def scan(self) -> Scan:
        """Every well-formed change in order, and the lines that are not well-formed."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Scan([], [])
        except OSError as exc:
            raise JournalUnreadable(f"journal {self.path}: cannot read ({exc.strerror}); a "
                                    "change is possibly open") from None
        begun: dict[str, dict[str, Any]] = {}
        bad: dict[int, BadLine] = {}
        acked: set[int] = set()
        for n, line in enumerate(raw.split(b"\n"), start=1):
            if not line.strip():
                continue
            try:
                rec = decode(line)
                _shape(rec)
                if rec["event"] == "begin":
                    baseline = Settings.model_validate(rec["baseline"])
                    settings = Settings.model_validate(rec["settings"])
                    begun[rec["id"]] = {**rec, "baseline": baseline, "settings": settings,
                                        "outcomes": []}
                elif rec["event"] == "end":
                    if rec["id"] not in begun:
                        raise ValueError(f"end of change {rec['id']!r} that never began")
                    begun[rec["id"]]["outcomes"].append(rec["outcome"])
                else:
                    acked.add(rec["line"])
            except (ValueError, ValidationError) as exc:
                reason = str(exc).splitlines()[0] if isinstance(exc, ValueError) else \
                    "a settings snapshot that does not validate"
                bad[n] = BadLine(n, reason)
        entries = [JournalEntry(id=r["id"], study=r["study"], trial=r["trial"],
                                targets=r["targets"], baseline=r["baseline"],
                                settings=r["settings"], began_at=r["at"],
                                outcomes=r["outcomes"]) for r in begun.values()]
        return Scan(entries, [b for n, b in sorted(bad.items()) if n not in acked])

    def entries(self) -> list[JournalEntry]:
        """All well-formed changes in order, with their outcomes."""
        return self.scan().entries

    def possibly_open(self) -> bool:
        """A change is open, or a record cannot be read (so one may be)."""
        try:
            scan = self.scan()
        except JournalUnreadable:
            return True
        return bool(scan.bad) or any(not e.closed for e in scan.entries)

    def dirty(self) -> JournalEntry | None:
        """The oldest change not closed by a restore/keep: the canary may be on its settings.

        Raises ``JournalUnreadable`` when a record cannot be read: a change is possibly open.
        """
        scan = self.scan()
        if scan.bad:
            b = scan.bad[0]
            raise JournalUnreadable(
                f"journal {self.path} line {b.line}: {b.reason}; a change is possibly open and "
                "the canary may not be on its baseline. Run `ecntune recover --results "
                f"{self.path.parent}` first")
        for entry in scan.entries:
            if not entry.closed:
                return entry
        return None
