"""What the two mlx5 layouts share: knob files, one-command read/write, counters.

The OFED sysfs layout and the upstream debugfs layout expose the same firmware fields
(``MODIFY_CONG_PARAMS``) with the same units under different file names (see
shared/reference/mlx5-dcqcn-config/upstream-debugfs-cc_params-layout.txt, "Mapping"). A layout
module only says where the folder is and how each ``DcqcnSettings`` field is spelled there.
"""

from __future__ import annotations

import shlex
from abc import abstractmethod
from typing import TYPE_CHECKING

from tuner.drivers.base import Driver, Runner
from tuner.errors import ApplyError
from tuner.settings import NIC_KNOBS, DcqcnSettings
from tuner.ssh.shell import check, q

if TYPE_CHECKING:
    from tuner.inventory import HostEntry

HW_COUNTERS_MARK = "==ecntune:hw_counters=="

# Counters the safety monitor and the scoring read; absent ones are reported, never zeroed.
def expected_counters(priority: int) -> tuple[str, ...]:
    """NIC counters a measurement expects; per-priority ones exist only where PFC is on."""
    p = int(priority)
    return (f"rx_prio{p}_pause", f"tx_prio{p}_pause", f"rx_prio{p}_pause_duration",
            f"tx_prio{p}_pause_duration", "rx_out_of_buffer", "np_cnp_sent",
            "np_ecn_marked_roce_packets", "rp_cnp_handled", "out_of_sequence",
            "packet_seq_err", "local_ack_timeout_err")


class Mlx5Driver(Driver[DcqcnSettings]):
    """DCQCN on one ConnectX port; subclasses give the folder and the file names."""

    layout = ""
    # DcqcnSettings field -> file name relative to ``folder()``.
    names: dict[str, str] = {}

    def __init__(self, runner: Runner, host: HostEntry) -> None:
        super().__init__(runner, host.nic)
        self.host = host
        missing = set(NIC_KNOBS) - set(self.names)
        if missing:  # pragma: no cover - a layout module bug
            raise TypeError(f"{type(self).__name__} lacks files for {sorted(missing)}")

    @abstractmethod
    def folder(self) -> str:
        """The layout's folder of knob files on the host (under ``sysfs_root``)."""

    # -- commands (pure) ---------------------------------------------------------------
    def read_command(self) -> str:
        files = " ".join(shlex.quote(self.names[k]) for k in NIC_KNOBS)
        return f"cd {q('path', self.folder())} && grep -H . {files}"

    def write_steps(self, current: DcqcnSettings, settings: DcqcnSettings) -> list[str]:
        """One ``printf > file`` per knob that differs (the shell is already in ``folder``)."""
        values, old = settings.model_dump(), current.model_dump()
        return [f"printf '%s\\n' {q('value', int(values[k]))} > {shlex.quote(self.names[k])}"
                for k in NIC_KNOBS if old.get(k) != values[k]]

    def counters_command(self) -> str:
        h = self.host
        hw = h.sys_path(f"/sys/class/infiniband/{check('rdma_device', h.rdma_device)}"
                        f"/ports/{int(h.rdma_port)}/hw_counters")
        return (f"ethtool -S {q('netdev', h.netdev)} && echo {shlex.quote(HW_COUNTERS_MARK)}"
                f" && cd {q('path', hw)} && grep -H . *")

    def commands(self) -> list[str]:
        return [self.read_command(),
                self.write_command(DcqcnSettings(), DcqcnSettings(rpg_time_reset=150)),
                self.counters_command()]

    # -- parsing (pure) ----------------------------------------------------------------
    def parse(self, text: str) -> DcqcnSettings:
        by_file = {}
        for line in text.splitlines():
            name, sep, value = line.rpartition(":")
            if sep:
                by_file[name.strip()] = value.strip()
        values: dict[str, int] = {}
        for knob in NIC_KNOBS:
            raw = by_file.get(self.names[knob])
            if raw is None:
                raise ApplyError(f"{self.target}: {self.layout} file {self.names[knob]} "
                                 f"unreadable in {self.folder()}")
            try:
                values[knob] = int(raw, 0)
            except ValueError:
                raise ApplyError(f"{self.target}: {self.names[knob]} holds {raw!r}, "
                                 "not an integer") from None
        try:
            return DcqcnSettings(**values)
        except ValueError as exc:
            raise ApplyError(f"{self.target}: device reports out-of-range DCQCN values: "
                             f"{exc}") from None

    # -- Driver ------------------------------------------------------------------------
    def counters_from(self, text: str) -> dict[str, dict[str, int]]:
        """``ethtool -S`` and hw_counters output (split by the mark) as one counter row."""
        from objectives.parsers import parse_ethtool_stats, parse_hw_counters

        eth, _, hw = text.partition(HW_COUNTERS_MARK)
        row = dict(parse_ethtool_stats(eth).counters)
        row.update(parse_hw_counters(hw).counters())
        return {self.target: {k: int(v) for k, v in row.items()}}

    def counters(self) -> dict[str, dict[str, int]]:
        # `ethtool -S` and sysfs hw_counters (mode 0444) need no root: never under sudo, so the
        # login user's PATH finds the tools
        return self.counters_from(self.runner.run(self.counters_command(), sudo=False).stdout)
