"""The promoted record: what was put where, by which study, when (``<results>/promoted.jsonl``).

Journal-like: one JSON object per line, appended and fsync'd, never rewritten; a torn last line
(crash mid-write) is ignored on read. Each line says what one target *should hold from now on*:

    {"at": "2026-12-01T23:10:04+00:00", "event": "promoted", "study": "moe-mix",
     "group": "pod1", "wave": 2, "target": "host3/mlx5_0", "kind": "nic",
     "settings": {"rpg_time_reset": 150, ...}, "persisted": false}

``event`` is ``promoted`` (a wave put the study's settings there), ``rolled_back`` (a wave was
undone: ``settings`` is what was restored) or ``persisted`` (the same settings were also written
to the boot-time source). The expected state of a target is its last line; ``verify`` compares
the live devices against it.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tuner.settings import DcqcnSettings, EcnSettings

RECORD_FILE = "promoted.jsonl"
Event = Literal["promoted", "rolled_back", "persisted"]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class PromotedEntry(BaseModel):
    """One target's expected settings from ``at`` on."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    at: str = Field(default_factory=now_iso)
    event: Event
    study: str
    group: str
    wave: int | None = None
    target: str  # Settings key: ``leaf0`` or ``host0/mlx5_0``
    kind: Literal["switch", "nic"]
    settings: dict[str, int | bool]
    persisted: bool = False

    def expected(self) -> EcnSettings | DcqcnSettings:
        model = EcnSettings if self.kind == "switch" else DcqcnSettings
        return model.model_validate(self.settings)


def entry_for(target: str, value: EcnSettings | DcqcnSettings, **fields: object) -> PromotedEntry:
    kind: Literal["switch", "nic"] = "switch" if isinstance(value, EcnSettings) else "nic"
    return PromotedEntry(target=target, kind=kind, settings=value.model_dump(),
                         **fields)  # type: ignore[arg-type]


class PromotedRecord:
    """Append-only ``promoted.jsonl`` (its folder is created on the first write)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def append(self, entries: list[PromotedEntry]) -> None:
        if not entries:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new = not self.path.exists()
        with open(self.path, "a", encoding="utf-8") as fh:
            for e in entries:
                fh.write(e.model_dump_json() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if new:  # the file's creation itself must survive a crash
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def entries(self) -> list[PromotedEntry]:
        """Every readable line in order; a torn or foreign line is skipped."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            try:
                out.append(PromotedEntry.model_validate(json.loads(line)))
            except (ValueError, ValidationError):
                continue
        return out

    def expected(self) -> dict[str, PromotedEntry]:
        """The last entry per target: what it should hold now."""
        last: dict[str, PromotedEntry] = {}
        for e in self.entries():
            last[e.target] = e
        return last
