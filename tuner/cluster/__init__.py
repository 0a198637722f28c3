"""Cluster backends: one abstract contract (``base.Cluster``), two implementations
(``sim`` drives rocesim; ``ssh`` drives real or emulated hosts and switches)."""

from __future__ import annotations

from tuner.cluster.base import Cluster, ClusterDescription, Monitor
from tuner.cluster.build import build_cluster

__all__ = ["Cluster", "ClusterDescription", "Monitor", "build_cluster"]
