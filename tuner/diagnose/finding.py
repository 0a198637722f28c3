"""What a diagnosis says: findings with their evidence, and the checks that could not run.

A ``Finding`` names its layer, the evidence (the counter or output line, and where it was read),
the likely cause and the action an operator takes. ``dominant`` marks a non-congestion cause that
would make tuning paper over it (ECMP imbalance, a degraded PCIe link, CRC under load, an MTU
mismatch): ``run`` refuses such a fabric unless ``--accept-findings``. A check that cannot run
(no ``lspci`` on the host, a tool missing) is ``NotChecked``, never a silent "healthy".
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Layer = Literal["physical", "host", "ip", "rdma", "fabric", "collectives"]
LAYERS: tuple[Layer, ...] = ("physical", "host", "ip", "rdma", "fabric", "collectives")

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class Finding(BaseModel):
    """One problem found. ``check`` is a stable id (``pcie_link``, ``ecmp_balance``, ...)."""

    model_config = _FROZEN
    layer: Layer
    check: str
    where: str  # the host, switch, port or link the evidence was read on
    evidence: str  # the counter or output line, verbatim where it came from a tool
    cause: str
    action: str
    dominant: bool = False  # a non-congestion cause tuning would paper over


class NotChecked(BaseModel):
    """A check that could not run on ``where`` and why (a missing tool, an unreadable file)."""

    model_config = _FROZEN
    layer: Layer
    check: str
    where: str
    reason: str


class Diagnosis(BaseModel):
    """Everything one ``diagnose`` run found, saved as ``diagnosis.json``."""

    model_config = _FROZEN
    backend: str
    findings: list[Finding] = Field(default_factory=list)
    not_checked: list[NotChecked] = Field(default_factory=list)
    checks_run: list[str] = Field(default_factory=list)
    # host -> {"firmware": ..., "driver": ...}: the versions table the drift check compared
    versions: dict[str, dict[str, str]] = Field(default_factory=dict)
    # switch -> {"platform": ..., "os": ...}: the OS build per canary switch
    switch_versions: dict[str, dict[str, str]] = Field(default_factory=dict)
    # all_reduce part -> NCCL's version and choice, busbw as chosen, with Ring, with Tree
    nccl: dict[str, dict[str, str]] = Field(default_factory=dict)

    @property
    def dominant(self) -> list[Finding]:
        return [f for f in self.findings if f.dominant]
