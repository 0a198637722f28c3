"""Shared fixtures. Emulated cluster: one real sshd per host/switch on 127.0.10.x (needs Debian's
openssh-server; tests skip with the reason when /usr/sbin/sshd is missing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tuner.emulated import EmulatedCluster, sshd_available


@pytest.fixture(scope="session")
def emulated_cluster_session(tmp_path_factory: pytest.TempPathFactory
                             ) -> Iterator[EmulatedCluster]:
    """One emulated cluster for the whole run, on the first free 127.0.N.x block (127.0.10.x
    unless another test session holds it); prefer ``emulated_cluster``, which resets it to
    factory state first. Read addresses from ``targets`` or the inventory, never hard-code."""
    if not sshd_available():
        pytest.skip("/usr/sbin/sshd missing: apt-get install openssh-server "
                    "(.ci/run does) to run the emulated-cluster tests")
    from tuner.emulated.cluster import EmulatedClusterError, free_base_address

    for attempt in range(5):  # another test session may take the block between check and bind
        # The operator's QoS fix: stock SONiC (qos_config.j2) maps RoCE's DSCP 26 to lossy
        # TC 1 and pre-flight refuses that, so the cluster every test gets is one an operator
        # prepared for RoCE (DSCP 26 -> TC 3). `reset(operator_fix=False)` gives the stock one.
        emu = EmulatedCluster(tmp_path_factory.mktemp("emulated"),
                              base_address=free_base_address(), operator_fix=True)
        try:
            emu.start()
            break
        except EmulatedClusterError:
            if attempt == 4:
                raise
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def emulated_cluster(emulated_cluster_session: EmulatedCluster) -> EmulatedCluster:
    """The emulated cluster at factory settings, zero counters, no faults.

    ``emulated_cluster.inventory_path`` is an inventory file in the agreed schema.
    """
    emulated_cluster_session.reset()
    return emulated_cluster_session


def record_study(storage: str, name: str, base: object, slice_name: str | None = None) -> None:
    """What ``run`` records before its first change, for a journal a test writes by hand:
    study ``name`` in ``storage`` and its baseline snapshot (``recover`` checks against it)."""
    import optuna

    from tuner import optuna_io, study_store

    try:
        study = optuna_io.load_study(name, storage)
    except Exception:
        study = optuna_io.create_study(name, storage, ["maximize"],
                                       optuna.samplers.RandomSampler())
    study_store.record_snapshot(study, base, slice_name)  # type: ignore[arg-type]
