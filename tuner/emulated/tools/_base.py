"""What every stand-in does first: find its target's state and honour the generic faults."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tuner.emulated import hosts, state


@dataclass
class Target:
    root: Path
    dir: Path
    name: str
    state: dict[str, Any]
    faults: dict[str, Any]

    def tick_counter_faults(self) -> None:
        """Rate faults (PFC storm, drops, CRC) add the events that happened since last read."""
        state.tick_fault_events(self.dir, self.faults, self._fault_deltas)

    def _fault_deltas(self, events: dict[str, int]) -> dict[str, dict[str, int]]:
        if self.state["kind"] == "host":
            deltas = hosts.fault_counter_deltas(self.state, events)
            return {self.state["netdev"]: deltas} if deltas else {}
        from tuner.emulated import switches

        return switches.fault_counter_deltas(self.state, events)

    def counters(self) -> dict[str, dict[str, int]]:
        return dict(state.read_json(self.dir / "counters.json", {}) or {})


def target(command: str) -> Target:
    root, name = state.emu_root(), state.emu_name()
    tdir = root / name
    faults = state.load_faults(tdir)
    state.apply_command_faults(command, faults)
    return Target(root, tdir, name, state.load_state(tdir), faults)
