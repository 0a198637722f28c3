"""The experiment's backend, built from its ``fabric:`` and ``canary:`` sections."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.errors import ConfigError

if TYPE_CHECKING:
    from tuner.cluster.base import Cluster
    from tuner.experiment import Experiment


def build_cluster(exp: Experiment, source: str | None = None) -> Cluster:
    """The experiment's backend, with its baseline (vendor defaults + ``current:``); a
    ``ConfigError`` names ``source``, where ``exp`` came from, when given."""
    try:
        return _build(exp)
    except ConfigError as exc:
        if source is None:
            raise
        from tuner.input_checks import with_source

        raise with_source(exc, source) from None


def _build(exp: Experiment) -> Cluster:
    if exp.fabric.backend == "sim":
        from tuner.cluster.sim import SimCluster
        from tuner.cluster.statefile import StateFileCluster

        # The simulated devices' state outlives the process, as real devices' does: a killed
        # run leaves the canary dirty until `ecntune recover` (tuner/cluster/statefile.py).
        return StateFileCluster(
            SimCluster(exp.fabric, list(exp.canary.switches), dict(exp.current),
                       name=exp.name),
            exp.results_path / "sim-state.json", exp.results_path / "journal.jsonl")
    if exp.fabric.backend == "ssh":
        from tuner.cluster.deadman import DeadmanCluster
        from tuner.cluster.ssh import SshCluster

        # Commit-confirm: every change is armed with a dead-man timer on its targets.
        return DeadmanCluster(SshCluster.from_fabric(exp.fabric, name=exp.name),
                              exp.safety.deadman_timeout_s,
                              nvue_confirm_s=exp.safety.nvue_confirm_s)
    raise ConfigError(f"fabric.backend: value {exp.fabric.backend!r} -- not available")
