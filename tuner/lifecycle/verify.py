"""``verify``: read the live settings of a group and report every value that left what was
promoted (the last line per target of the promoted record). Read-only.

``drift`` is the pure core (expected entries + live settings -> findings); ``verify_group``
does the reading through a ``Fleet``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from tuner.settings import DcqcnSettings, EcnSettings, Settings

if TYPE_CHECKING:
    from tuner.lifecycle.fleet import Fleet
    from tuner.lifecycle.persist import HostMethod
    from tuner.lifecycle.promoted import PromotedEntry


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
    source: str = "live"  # "live" device state, or "boot": the persistent source


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


def drift(expected: dict[str, PromotedEntry], live: Settings, source: str = "live"
          ) -> list[Drift]:
    """Every knob whose value in ``live`` differs from the expected one (targets read only)."""
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
                                 event=entry.event, source=source))
    return out


def read_boot(fleet: Fleet, keys: list[str], method: HostMethod
              ) -> tuple[Settings, dict[str, Exception]]:
    """What each target's persistent (boot-time) source holds."""
    from tuner.lifecycle.persist import persistence_for, read_persistent

    res = fleet.fan(lambda d: read_persistent(persistence_for(d, method)), keys)
    ok = {k: o.value for k, o in res.items() if o.error is None}
    return (Settings(switches={k: v for k, v in ok.items() if isinstance(v, EcnSettings)},
                     nics={k: v for k, v in ok.items() if isinstance(v, DcqcnSettings)}),
            {k: o.error for k, o in res.items() if o.error is not None})


def verify_group(fleet: Fleet, expected: dict[str, PromotedEntry],
                 boot: HostMethod | None = None) -> VerifyReport:
    """Read every group member that has a record line and compare; with ``boot`` also the
    persistent source of every target recorded as persisted."""
    keys = [k for k in fleet.keys if k in expected]
    live, failed = fleet.read_settings(keys)
    found = drift(expected, live)
    unreadable = {k: str(e) for k, e in failed.items()}
    if boot is not None:
        saved = [k for k in keys if expected[k].persisted]
        held, bad = read_boot(fleet, saved, boot)
        found += drift(expected, held, "boot")
        unreadable.update({f"{k} (boot)": str(e) for k, e in bad.items()})
    return VerifyReport(
        group=fleet.group, checked=sorted(k for k in keys if k not in failed),
        drift=found, unreadable=dict(sorted(unreadable.items())),
        never_promoted=sorted(k for k in fleet.keys if k not in expected))
