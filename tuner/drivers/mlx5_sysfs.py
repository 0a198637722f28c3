"""mlx5 DCQCN through the MLNX_OFED sysfs folders ``/sys/class/net/<if>/ecn/roce_rp|roce_np``.

File names are the ``attr.name`` strings of OFED ``en_sysfs.c`` (shared/reference/
mlx5-dcqcn-config/mlnx-ofed-sysfs-ecn-layout.txt); every file holds one decimal (``%d\\n``) in the
unit of the ``DcqcnSettings`` field of the same name. Per-priority ``enable/<p>`` files are read
as facts, not tuned.
"""

from __future__ import annotations

from tuner.drivers._mlx5 import Mlx5Driver
from tuner.settings import NIC_KNOBS
from tuner.ssh.shell import check

NAMES = {k: (f"roce_np/{k}" if k == "min_time_between_cnps" else f"roce_rp/{k}")
         for k in NIC_KNOBS}


class Mlx5SysfsDriver(Mlx5Driver):
    layout = "sysfs"
    names = NAMES

    def folder(self) -> str:
        return self.host.sys_path(f"/sys/class/net/{check('netdev', self.host.netdev)}/ecn")

