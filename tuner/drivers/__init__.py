"""Device drivers behind one interface (``base.Driver``): mlx5 NICs (OFED sysfs or upstream
debugfs), SONiC and Cumulus NVUE switches. A new platform is one new module plus one line in
``SWITCH_DRIVERS``."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from tuner.drivers.base import Driver, Runner
from tuner.drivers.mlx5_debugfs import Mlx5DebugfsDriver
from tuner.drivers.mlx5_sysfs import Mlx5SysfsDriver
from tuner.drivers.nvue import NvueDriver
from tuner.drivers.sonic import SonicDriver
from tuner.errors import ConfigError

if TYPE_CHECKING:
    from tuner.drivers._mlx5 import Mlx5Driver
    from tuner.inventory import HostEntry, SwitchEntry

__all__ = ["Driver", "Runner", "Mlx5SysfsDriver", "Mlx5DebugfsDriver", "SonicDriver",
           "NvueDriver", "SWITCH_DRIVERS", "NIC_LAYOUTS", "detect_command", "nic_driver",
           "switch_driver"]

SWITCH_DRIVERS: dict[str, type[SonicDriver] | type[NvueDriver]] = {
    "sonic": SonicDriver, "nvue": NvueDriver}
NIC_LAYOUTS: dict[str, type[Mlx5SysfsDriver] | type[Mlx5DebugfsDriver]] = {
    "sysfs": Mlx5SysfsDriver, "debugfs": Mlx5DebugfsDriver}


def detect_command(host: HostEntry, runner: Runner | None = None) -> str:
    """One test that prints ``sysfs``, ``debugfs`` or ``none`` (OFED sysfs wins when both)."""
    sysfs = Mlx5SysfsDriver(runner, host)  # type: ignore[arg-type]
    debugfs = Mlx5DebugfsDriver(runner, host)  # type: ignore[arg-type]
    a = shlex.quote(f"{sysfs.folder()}/{sysfs.names['rpg_time_reset']}")
    b = shlex.quote(f"{debugfs.folder()}/{debugfs.names['rpg_time_reset']}")
    return (f"if [ -e {a} ]; then echo sysfs; elif [ -e {b} ]; then echo debugfs; "
            "else echo none; fi")


def nic_driver(runner: Runner, host: HostEntry) -> Mlx5Driver:
    """The mlx5 driver for ``host``, detecting the layout when the inventory says ``auto``."""
    layout: str = host.nic_layout
    if layout == "auto":
        layout = runner.run(detect_command(host)).stdout.strip()
        if layout not in NIC_LAYOUTS:
            raise ConfigError(
                f"hosts ({host.name}): neither {Mlx5SysfsDriver(runner, host).folder()} "
                f"(MLNX_OFED) nor {Mlx5DebugfsDriver(runner, host).folder()} (debugfs) "
                "exists; is debugfs mounted and the NIC an mlx5 PF?")
    return NIC_LAYOUTS[layout](runner, host)


def switch_driver(runner: Runner, switch: SwitchEntry) -> SonicDriver | NvueDriver:
    return SWITCH_DRIVERS[switch.platform](runner, switch)
