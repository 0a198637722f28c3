"""mlx5 DCQCN through the upstream debugfs folder ``/sys/kernel/debug/mlx5/<pci>/cc_params``.

Names from the kernel's ``drivers/infiniband/hw/mlx5/cong.c`` table (shared/reference/
mlx5-dcqcn-config/upstream-debugfs-cc_params-layout.txt, "Mapping"): ``rp_*`` for the reaction
point, ``np_*`` for the notification point. Same firmware fields and units as the OFED sysfs
files; files are root-only (mode 0600), so real hosts need ``sudo: true`` or root.
"""

from __future__ import annotations

from tuner.drivers._mlx5 import Mlx5Driver
from tuner.ssh.shell import check

NAMES = {
    "clamp_tgt_rate": "rp_clamp_tgt_rate",
    "clamp_tgt_rate_after_time_inc": "rp_clamp_tgt_rate_ati",
    "rpg_time_reset": "rp_time_reset",
    "rpg_byte_reset": "rp_byte_reset",
    "rpg_threshold": "rp_threshold",
    "rpg_max_rate": "rp_max_rate",
    "rpg_ai_rate": "rp_ai_rate",
    "rpg_hai_rate": "rp_hai_rate",
    "rpg_gd": "rp_gd",
    "rpg_min_dec_fac": "rp_min_dec_fac",
    "rpg_min_rate": "rp_min_rate",
    "rate_to_set_on_first_cnp": "rp_rate_to_set_on_first_cnp",
    "dce_tcp_g": "rp_dce_tcp_g",
    "dce_tcp_rtt": "rp_dce_tcp_rtt",
    "rate_reduce_monitor_period": "rp_rate_reduce_monitor_period",
    "initial_alpha_value": "rp_initial_alpha_value",
    "min_time_between_cnps": "np_min_time_between_cnps",
}


class Mlx5DebugfsDriver(Mlx5Driver):
    layout = "debugfs"
    names = NAMES

    def folder(self) -> str:
        return self.host.sys_path(f"/sys/kernel/debug/mlx5/{check('pci', self.host.pci)}"
                                  "/cc_params")
