"""ecntune: closed-loop ECN/DCQCN auto-tuner for RoCE fabrics.

Importing this package is cheap on purpose: Optuna, MLflow and paramiko are imported lazily by
the modules that need them. ``tuner.errors`` and ``tuner.settings`` are dependency-free leaf
modules shared by ``objectives`` and ``safety``.
"""

from __future__ import annotations

__version__ = "0.1.0"
