"""``verify``: read the live settings of a group and report every value that left what was
promoted (the last line per target of the promoted record). Read-only.

``drift`` is the pure core (expected entries + live settings -> findings); ``verify_group``
does the reading through a ``Fleet``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from tuner.lifecycle.fleet import Fleet
    from tuner.lifecycle.promoted import PromotedEntry
    from tuner.settings import Settings


class Drift(BaseModel):
    """One knob of one target that differs from what was promoted there."""

    model_config = ConfigDict(frozen=True)
    target: str
    knob: str
    live: int | bool | None  # None: the device does not report this knob
    expected: int | bool
    since: str  # when the expected value was recorded
    study: str
    event: str


class VerifyReport(BaseModel):
    model_config = ConfigDict(frozen=True)
    group: str
    checked: list[str]  # targets compared
    drift: list[Drift]
    unreadable: dict[str, str]  # target -> error
    never_promoted: list[str]  # group members without a record line

    @property
    def clean(self) -> bool:
        return not self.drift and not self.unreadable


def drift(expected: dict[str, PromotedEntry], live: Settings) -> list[Drift]:
    """Every knob whose live value differs from the expected one (targets read only)."""
    values = {**live.switches, **live.nics}
    out: list[Drift] = []
    for target in sorted(set(expected) & set(values)):
        entry = expected[target]
        want = entry.expected().model_dump()
        have = values[target].model_dump()
        for knob in sorted(want):
            if have.get(knob) != want[knob]:
                out.append(Drift(target=target, knob=knob, live=have.get(knob),
                                 expected=want[knob], since=entry.at, study=entry.study,
                                 event=entry.event))
    return out


def verify_group(fleet: Fleet, expected: dict[str, PromotedEntry]) -> VerifyReport:
    """Read every group member that has a record line and compare."""
    keys = [k for k in fleet.keys if k in expected]
    live, failed = fleet.read_settings(keys)
    return VerifyReport(
        group=fleet.group, checked=sorted(k for k in keys if k not in failed),
        drift=drift(expected, live),
        unreadable={k: str(e) for k, e in sorted(failed.items())},
        never_promoted=sorted(k for k in fleet.keys if k not in expected))
