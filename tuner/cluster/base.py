"""The contract every cluster backend keeps.

Call order in a study::

    describe() -> snapshot() -> [apply(s) -> read_back() -> measure(w, monitor)]* -> apply(base)
    -> close()

``read_*``/``snapshot``/``counters``/``describe`` never change anything; ``apply`` is the only
method that does. ``apply`` is all-or-nothing over the canary: if any target fails, the targets
already changed are put back before ``ApplyError`` is raised. Backends are not thread-safe; the
loop drives one at a time. The contract tests in ``tests/cluster/`` run against every backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from objectives.measurement import Counters, Measurement
    from tuner.settings import Settings
    from tuner.workload import Workload


class ClusterDescription(BaseModel):
    """What the tuner touches: the canary's switches and NICs, and what it must not touch."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    backend: str
    canary_switches: list[str]
    canary_nics: list[str]
    other_switches: list[str] = Field(default_factory=list)
    other_nics: list[str] = Field(default_factory=list)
    nic_gbps: float = 0.0  # line rate of one canary NIC
    facts: dict[str, str] = Field(default_factory=dict)  # topology, versions: for MLflow params


class Monitor(Protocol):
    """Live safety check, called by ``measure`` with cumulative counters while traffic runs.

    ``poll`` raises ``tuner.errors.SafetyAbort`` to stop the measurement; the backend then
    stops its traffic and re-raises. ``interval_s`` is how often the backend should poll.
    """

    interval_s: float

    def poll(self, counters: Counters, elapsed_s: float) -> None: ...


class Cluster(ABC):
    """A fabric the tuner can read, change (only on the canary) and measure."""

    @abstractmethod
    def describe(self) -> ClusterDescription:
        """The canary and the rest; pure read."""

    @abstractmethod
    def snapshot(self) -> Settings:
        """The canary's current settings (the baseline to restore)."""

    @abstractmethod
    def apply(self, settings: Settings) -> None:
        """Set every target in ``settings``; all or none (raises ``ApplyError``)."""

    @abstractmethod
    def read_back(self) -> Settings:
        """Read the canary's settings from the devices themselves."""

    @abstractmethod
    def counters(self) -> Counters:
        """Cumulative counters of every canary NIC port and switch port."""

    @abstractmethod
    def measure(self, workload: Workload, monitor: Monitor | None = None, *,
                replicate: int = 0) -> Measurement:
        """Run the workload on the canary and return what it measured.

        ``replicate`` names a paired replicate: every trial measured with the same replicate
        runs on the same placement (ranks, probe pairs, in the simulator also the seed), so two
        settings are compared like with like (common random numbers)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default holds none."""

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
