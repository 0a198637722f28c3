"""The change journal: written and fsync'd before every change, closed after every restore.

One JSON object per line, append-only, so a crash can at worst lose a half-written last line
(ignored on read). A change is *open* from ``begin`` until an outcome that puts the canary back on
a known state (``restored``, ``kept``, ``not_applied``); while one is open the canary may be dirty,
``ecntune run``/``resume`` refuse to start, and ``ecntune recover`` restores its baseline.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from tuner.settings import Settings

CLOSING_OUTCOMES = ("restored", "kept", "not_applied")


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


class Journal:
    """Append-only change journal at ``path`` (its folder is created)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _append(self, record: dict[str, Any]) -> None:
        new = not self.path.exists()
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(record, separators=(",", ":")) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if new:  # make the file's creation itself durable
            fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

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

    def entries(self) -> list[JournalEntry]:
        """All changes in order, with their outcomes (a torn last line is skipped)."""
        if not self.path.exists():
            return []
        begun: dict[str, dict[str, Any]] = {}
        for line in self.path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("event") == "begin":
                begun[rec["id"]] = {**rec, "outcomes": []}
            elif rec.get("event") == "end" and rec.get("id") in begun:
                begun[rec["id"]]["outcomes"].append(rec["outcome"])
        return [JournalEntry(id=r["id"], study=r["study"], trial=r["trial"],
                             targets=r["targets"], baseline=Settings(**r["baseline"]),
                             settings=Settings(**r["settings"]), began_at=r["at"],
                             outcomes=r["outcomes"]) for r in begun.values()]

    def dirty(self) -> JournalEntry | None:
        """The oldest change not closed by a restore/keep: the canary may be on its settings."""
        for entry in self.entries():
            if not entry.closed:
                return entry
        return None
