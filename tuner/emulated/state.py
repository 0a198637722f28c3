"""On-disk state of one emulated target, shared by the cluster manager and the stand-in tools.

Layout under the cluster root (``$ECNTUNE_EMU_ROOT``)::

    topology.json              rocesim topology behind the cluster
    <name>/state.json          target description + settings not kept in the fake /sys tree
    <name>/counters.json       cumulative counters (ethtool -S / switch ports)
    <name>/faults.json         injected faults (see ``FAULT_KEYS``)
    <name>/refused_writes      "<relpath under sys/> <saved value> <errno text>" per line,
                               read by the bash hook (``bashenv.sh``)
    <name>/commands.jsonl      {"tool", "argv"} per run of mpirun/ib_write_lat/ib_write_bw
                               there: what actually ran on the host (tests audit placements)
    <name>/sys/...             fake sysfs/debugfs tree of an emulated host

Every read-modify-write goes through :func:`locked` (``fcntl.flock`` on ``<name>/.lock``), and
files are replaced atomically, because a concurrent ``mpirun`` updates other targets' counters.
This module imports only the standard library: the stand-in tools start on every SSH command.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ENV_ROOT = "ECNTUNE_EMU_ROOT"
ENV_NAME = "ECNTUNE_EMU_NAME"

# Keys of faults.json, what they do, and who reads them.
FAULT_KEYS = {
    "refuse_write": "{knob: 'EINVAL'|'EACCES'} sysfs/debugfs writes fail like the firmware",
    "hang": "{command: seconds} the stand-in sleeps before doing anything",
    "exit_code": "{command: rc} the stand-in prints an error and exits with rc",
    "nccl_warn": "text: mpirun prints an 'NCCL WARN' line with it",
    "nccl_wrong": "int: nccl-tests '#wrong' column reports this many errors",
    "nccl_algo_choice": "'Ring'|'Tree': NCCL's own AllReduce choice when NCCL_ALGO leaves it "
                        "one (default Ring; read on the first rank's host)",
    "pfc_storm": "float: pause frames per second received on the lossless priority (50 us each)",
    "lossless_drops": "float: drops per second on the lossless priority",
    "cnp_drops": "float: drops per second on a switch's CNP queue (6: a starved DWRR queue)",
    "crc_errors": "float: rx_crc_errors_phy per second",
    "link_down": "bool: the port is down (ethtool/ip/switch show it; mpirun fails)",
    "ecnconfig_fail_after": "int: ecnconfig's CONFIG_DB writes fail after this many",
    "nv_apply_fail": "text: 'nv config apply' fails with this message",
    # host faults `ecntune diagnose` finds (tuner.emulated.hostdiag)
    "pcie_width": "int: lspci LnkSta shows this link width (x8 of a x16 NIC: downgraded)",
    "numa_wrong": "bool: the NIC's IRQs are pinned to CPUs of the other NUMA node",
    "fec_off": "bool: ethtool --show-fec reports 'Active FEC encoding: Off'",
    "link_flaps": "float: link flaps per second (carrier_changes rises by 2 per flap)",
    "firmware": "text: the NIC firmware version ethtool -i / ibv_devinfo report",
    "gid_v1": "bool: the data IP's GID at the inventory gid_index is RoCE v1, not v2",
    # switch faults `ecntune diagnose` finds (tuner.emulated.tools._swdiag)
    "port_down": "[port]: these switch ports are oper down (the attached host's link too)",
    "port_speed_gbps": "{port: gbps}: these switch ports trained at this speed",
    "port_rx_errors": "{port: float}: RX errors per second counted on these switch ports",
    "port_flaps": "{port: float}: link flaps per second on these switch ports (SONiC's "
                  "`show interfaces flap` count, NVUE's carrier-transitions by 2 per flap)",
    "os_version": "text: the switch OS build `show version` / `nv show system` report",
}

ERRNO_TEXT = {"EINVAL": "Invalid argument", "EACCES": "Permission denied",
              "EPERM": "Operation not permitted", "EIO": "Input/output error"}


def emu_root() -> Path:
    try:
        return Path(os.environ[ENV_ROOT])
    except KeyError:
        sys.exit(f"{ENV_ROOT} is not set: this command only works on an emulated target")


def emu_name() -> str:
    try:
        return os.environ[ENV_NAME]
    except KeyError:
        sys.exit(f"{ENV_NAME} is not set: this command only works on an emulated target")


def target_dir(name: str | None = None, root: Path | None = None) -> Path:
    return (root or emu_root()) / (name or emu_name())


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def json_copy(data: Any) -> Any:
    """A deep copy of a JSON value."""
    return json.loads(json.dumps(data))


def write_json(path: Path, data: Any) -> None:
    """Atomic replace: a reader sees the old or the new file, never half of one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


@contextlib.contextmanager
def locked(tdir: Path) -> Iterator[None]:
    """Exclusive lock of one target's state (read-modify-write of its JSON files)."""
    with open(tdir / ".lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def load_state(tdir: Path) -> dict[str, Any]:
    state = read_json(tdir / "state.json")
    if state is None:
        sys.exit(f"{tdir / 'state.json'} is missing: emulated target not initialised")
    return dict(state)


def load_faults(tdir: Path) -> dict[str, Any]:
    return dict(read_json(tdir / "faults.json", {}) or {})


# Faults that are rates in time, as on a real port: a counter read sees the events that happened
# since the fault was injected, however often or slowly it is read.
RATE_FAULTS = ("pfc_storm", "lossless_drops", "crc_errors", "cnp_drops", "link_flaps",
               "port_rx_errors", "port_flaps")
FAULT_CLOCK = "fault_clock.json"


def start_fault_clock(tdir: Path) -> None:
    """The rate faults were (re)set: count their events from now. Call under ``locked``."""
    write_json(tdir / FAULT_CLOCK, {"since": time.time(), "counted": {}})


def tick_fault_events(tdir: Path, faults: dict[str, Any],
                      to_deltas: Callable[[dict[str, int]], dict[str, dict[str, int]]]) -> None:
    """Count the events of each rate fault since the last tick (whole events; the fraction
    carries) into ``counters.json`` as ``to_deltas(events)``.

    Taking the events and adding them is one step under the lock: a ``show pfc counters``
    running beside a ``show queue counters`` that took the events but had not yet added them
    would miss them in this reading and double them in the next (a burst and a lull).
    """
    with locked(tdir):
        clock = read_json(tdir / FAULT_CLOCK) or {"since": time.time(), "counted": {}}
        elapsed = max(0.0, time.time() - float(clock["since"]))
        counted: dict[str, int] = clock["counted"]
        events = {}
        for fault in RATE_FAULTS:
            value = faults.get(fault) or 0
            # a per-port rate ({port: rate}) counts each port on its own: "<fault>:<port>"
            rates = ({f"{fault}:{k}": r for k, r in value.items()} if isinstance(value, dict)
                     else {fault: value})
            for key, rate in rates.items():
                due = int(float(rate or 0) * elapsed)
                if due > counted.get(key, 0):
                    events[key] = due - counted.get(key, 0)
                    counted[key] = due
        write_json(tdir / FAULT_CLOCK, {"since": clock["since"], "counted": counted})
        if events:
            _add_counters(tdir, to_deltas(events))


def apply_command_faults(command: str, faults: dict[str, Any]) -> None:
    """The generic faults every stand-in honours first: hang, then exit non-zero."""
    hang = faults.get("hang", {}).get(command)
    if hang:
        time.sleep(float(hang))
    rc = faults.get("exit_code", {}).get(command)
    if rc:
        print(f"{command}: emulated failure (injected exit code {rc})", file=sys.stderr)
        sys.exit(int(rc))


def log_command(tdir: Path, tool: str, argv: list[str]) -> None:
    """Append one run of ``tool`` to ``<name>/commands.jsonl`` (one line, one write)."""
    line = json.dumps({"tool": tool, "argv": list(argv)}) + "\n"
    with locked(tdir), open(tdir / "commands.jsonl", "a") as fh:
        fh.write(line)


def read_commands(tdir: Path) -> list[dict[str, Any]]:
    """The runs ``log_command`` recorded on a target, oldest first."""
    try:
        text = (tdir / "commands.jsonl").read_text()
    except FileNotFoundError:
        return []
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def add_counters(tdir: Path, deltas: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Add ``{port: {counter: delta}}`` to ``counters.json``; returns the new totals."""
    with locked(tdir):
        return _add_counters(tdir, deltas)


def _add_counters(tdir: Path, deltas: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = read_json(tdir / "counters.json", {}) or {}
    for port, cnts in deltas.items():
        row = totals.setdefault(port, {})
        for name, value in cnts.items():
            row[name] = int(row.get(name, 0)) + int(value)
    write_json(tdir / "counters.json", totals)
    return totals
