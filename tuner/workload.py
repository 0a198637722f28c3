"""The traffic mix a trial measures, as data shared by every cluster backend.

A workload is a list of concurrent parts: collectives (scored, with a weight), background traffic
(not scored; it is what the collectives compete with) and latency probes (scored by p99).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_STRICT = ConfigDict(frozen=True, extra="forbid")

CollectiveOp = Literal["all_reduce", "alltoall", "all_gather", "reduce_scatter"]


class CollectivePart(BaseModel):
    """A NCCL-style collective over the canary's NICs, repeated ``iterations`` times."""

    model_config = _STRICT
    kind: Literal["collective"] = "collective"
    op: CollectiveOp
    size_bytes: int = Field(gt=0, le=2**36)  # at most 64 GiB, past any nccl-tests sweep
    iterations: int = Field(default=5, ge=1, le=1000)
    weight: float = Field(default=1.0, ge=0, allow_inf_nan=False)
    channels: int = Field(default=4, ge=1, le=64)  # ring channels (NCCL_MIN_NCHANNELS-like)
    qps_per_connection: int = Field(default=1, ge=1, le=16)  # NCCL_IB_QPS_PER_CONNECTION
    # NCCL's algorithm: "ring" or "tree" (double binary tree, all_reduce only); rocesim
    # simulates it, on SSH it becomes NCCL_ALGO.
    algo: Literal["ring", "tree"] = "ring"
    # NCCL_ALGO / NCCL_PROTO for real runs (e.g. "Ring", "^NVLS", "Simple"); rocesim ignores them.
    nccl_algo: str | None = Field(default=None, pattern=r"^\^?[A-Za-z0-9]+(,[A-Za-z0-9]+)*$")
    nccl_proto: str | None = Field(default=None, pattern=r"^\^?[A-Za-z0-9]+(,[A-Za-z0-9]+)*$")

    @model_validator(mode="after")
    def _tree_is_all_reduce(self) -> CollectivePart:
        if self.algo == "tree" and self.op != "all_reduce":
            raise ValueError(f"algo: tree (NCCL's Tree) implements all_reduce only, not {self.op}")
        return self


class BackgroundPart(BaseModel):
    """Storage/backup flows at a share of line rate; ``priority: roce`` puts them in the RoCE
    (lossless) class - the classic incident - ``other`` in a second class."""

    model_config = _STRICT
    kind: Literal["background"] = "background"
    pattern: Literal["incast", "permutation"] = "incast"
    load: float = Field(default=0.3, gt=0, le=1.0)
    fan_in: int = Field(default=4, ge=1, le=256)  # senders per receiver for incast
    priority: Literal["roce", "other"] = "roce"
    lossless: bool = True  # only meaningful for priority "other"
    # rocesim: the DSCP the tenant marks (default: the RoCE DSCP in the RoCE priority); another
    # DSCP with priority roce is a foreign tenant the switch maps into the RoCE queue.
    dscp: int | None = Field(default=None, ge=0, le=63)


class ProbePart(BaseModel):
    """Small-message latency probes between random canary pairs at a fixed interval."""

    model_config = _STRICT
    kind: Literal["probe"] = "probe"
    size_bytes: int = Field(default=64, ge=2, le=65536)
    interval_us: float = Field(default=50.0, gt=0, allow_inf_nan=False)
    pairs: int = Field(default=4, ge=1, le=256)


Part = Annotated[CollectivePart | BackgroundPart | ProbePart, Field(discriminator="kind")]


class Workload(BaseModel):
    """The concurrent parts of one measurement."""

    model_config = _STRICT
    parts: list[Part] = Field(min_length=1)
    # a measurement past this is a failure (finite: .inf would never fail one)
    time_limit_s: float = Field(default=600.0, gt=0, allow_inf_nan=False)

    @property
    def collectives(self) -> list[CollectivePart]:
        return [p for p in self.parts if isinstance(p, CollectivePart)]

    @property
    def background(self) -> list[BackgroundPart]:
        return [p for p in self.parts if isinstance(p, BackgroundPart)]

    @property
    def probes(self) -> list[ProbePart]:
        return [p for p in self.parts if isinstance(p, ProbePart)]
