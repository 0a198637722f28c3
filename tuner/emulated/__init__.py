"""An emulated cluster for integration tests and dry runs: one real ``sshd`` per host/switch on
127.0.10.x, and stand-in tools that print the real output formats from a rocesim fabric.

Start one by hand with ``python -m tuner.emulated up ROOT``; see :class:`EmulatedCluster`.
The package import stays cheap (the stand-in tools import ``tuner.emulated.*`` on every SSH
command), so the cluster manager is loaded on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["EmulatedCluster", "sshd_available"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tuner.emulated import cluster

        return getattr(cluster, name)
    raise AttributeError(name)
