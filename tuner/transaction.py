"""One guarded change of the canary: journal begin -> apply -> read-back -> ... -> restore -> end.

Trials, the confirmation repeats and ``--keep-best`` all change the canary through this module,
so each change is journalled (fsync'd) before the first write, verified by read-back, and put
back on the baseline (verified again by ``safety.rollback.restore``) whatever happens inside,
a ``KeyboardInterrupt`` included. The counters are read inside the change, before the first
write, so a trial cut short still has its "before" side.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from safety.rollback import restore
from tuner.errors import ApplyError, RollbackError

if TYPE_CHECKING:
    from objectives.measurement import Counters
    from safety.journal import Journal
    from tuner.cluster.base import Cluster
    from tuner.settings import Settings

Shield = Callable[[], AbstractContextManager[None]]


@dataclass
class Change:
    """What a change saw: the counters before the first write, and the restore time."""

    counters_before: Counters
    restore_s: float = 0.0


class Transactions:
    """Guarded changes of one canary against its ``baseline`` settings.

    ``shield`` returns a context in which signals wait (restores are never half-done).
    """

    def __init__(self, cluster: Cluster, journal: Journal, study: str, baseline: Settings,
                 shield: Shield) -> None:
        self.cluster = cluster
        self.journal = journal
        self.study = study
        self.baseline = baseline
        self.shield = shield

    def _apply_verified(self, settings: Settings) -> None:
        self.cluster.apply(settings)
        got = self.cluster.read_back()
        if got != settings:
            diffs = ", ".join(f"{k}: {a} != {b}" for k, (a, b) in
                              list(got.diff(settings).items())[:5])
            raise ApplyError(f"read-back differs from what was applied: {diffs}")

    def restore(self) -> float:
        """Put the canary back on the baseline and verify it; seconds taken."""
        with self.shield():
            return restore(self.cluster, self.baseline).seconds

    def applied(self, settings: Settings, trial: int) -> AbstractContextManager[Change]:
        """``settings`` on the canary for the body; the baseline again afterwards, always.

        ``ApplyError`` (a refused write or a read-back mismatch) leaves the ``with`` after the
        restore, like any other exception.
        """
        return self._change(settings, trial, keep=False)

    def tentative(self, settings: Settings, trial: int) -> AbstractContextManager[Change]:
        """``settings`` for the body, then kept (journal ``kept``) if the body returns, or the
        baseline restored (journal ``restored``) if it raises: a promotion wave and its gate.
        """
        return self._change(settings, trial, keep=True)

    @contextmanager
    def _change(self, settings: Settings, trial: int, *, keep: bool) -> Iterator[Change]:
        entry = self.journal.begin(self.study, trial, settings.targets(), self.baseline,
                                   settings)
        change = Change(counters_before=self.cluster.counters())
        kept = False
        try:
            self._apply_verified(settings)
            yield change
            kept = keep
        finally:
            if kept:
                self.journal.end(entry, "kept")
            else:
                with self.shield():
                    change.restore_s = self.restore()
                    self.journal.end(entry, "restored")

    def keep(self, settings: Settings, trial: int) -> None:
        """Leave ``settings`` on the canary (``--keep-best``), verified; journal ``kept``.
        On a failure the baseline is restored and the error raised."""
        entry = self.journal.begin(self.study, trial, settings.targets(), self.baseline,
                                   settings)
        with self.shield():
            try:
                restore(self.cluster, settings)  # apply + verified read-back, with retries
            except RollbackError:
                self.restore()
                self.journal.end(entry, "restored")
                raise
            self.journal.end(entry, "kept")
