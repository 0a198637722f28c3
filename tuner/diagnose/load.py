"""Load for the error-counter window (``diagnose --load``): CRC errors of a dirty optic often
show only at full load, so each host sends one ``ib_write_bw`` flow at line rate to the next
(the measurement's own background-flow commands, ``tuner.ssh.plan.background_flows``, pattern
``permutation``) for the length of the window."""

from __future__ import annotations

from typing import Any

from tuner.ssh.measure import _stop, _wait_listening
from tuner.ssh.plan import Flow, background_flows
from tuner.workload import BackgroundPart


def load_flows(inv: Any, seconds: float) -> list[Flow]:
    """One line-rate flow per host to the next (the measurement's background-flow commands)."""
    return background_flows(inv, [BackgroundPart(pattern="permutation", load=1.0)], seconds)


class Load:
    """Flows started by ``start`` and stopped by ``stop``; ``error`` says why there are none."""

    def __init__(self) -> None:
        self.procs: list[Any] = []
        self.error: str | None = None
        self.flows = 0

    def start(self, cluster: Any, hosts: list[str], seconds: float) -> Load:
        inv = cluster.inventory
        if len(hosts) < 2:
            self.error = "load needs two reachable hosts"
            return self
        live = inv.model_copy(update={"hosts": [h for h in inv.hosts if h.name in hosts]})
        flows = load_flows(live, seconds)
        try:
            servers = [cluster.pool[f.server].start(f.server_cmd, timeout_s=seconds + 30)
                       for f in flows]
            self.procs += servers
            _wait_listening(servers)
            self.procs += [cluster.pool[f.client].start(f.client_cmd, timeout_s=seconds + 30)
                           for f in flows]
            self.flows = len(flows)
        except Exception as exc:  # noqa: BLE001 - no load is a "not checked", not a crash
            self.stop()
            self.error = f"ib_write_bw load could not start: {exc}"
        return self

    def stop(self) -> None:
        _stop(*reversed(self.procs))
        self.procs = []
