"""Canary slices: disjoint parts of a fabric that parallel workers tune for one shared study.

Declared in the experiment's ``canary.slices``:

* ``{pod1: [leaf0, leaf1], pod2: [leaf2]}``: named slices of one fabric (each a list of canary
  switches; a switch belongs to at most one slice);
* ``N`` (sim backend): N identical simulated slices ``sim0`` ... ``sim<N-1>``, each its own
  rocesim fabric with ``canary.switches`` as its canary, so the scale-out machinery runs and is
  benchmarked without hardware.

``for_slice`` is the experiment one worker runs: the slice's switches as its canary, its own
results folder ``<results_dir>/slices/<name>`` (journal, lock, simulated device state, trial
files, so each slice is guarded on its own) and, pinned before the folder moves, the shared
study storage and MLflow store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tuner.errors import ConfigError
from tuner.experiment import NAME

if TYPE_CHECKING:
    from tuner.experiment import Experiment

MAX_SIM_SLICES = 64


def slices(exp: Experiment) -> dict[str, list[str]]:
    """Slice name -> canary switches; ``{}`` when the experiment declares none."""
    decl = exp.canary.slices
    if decl is None:
        return {}
    if isinstance(decl, int):
        if exp.fabric.backend != "sim":
            raise ConfigError(f"canary.slices: value {decl} -- a count of identical slices "
                              "exists only on the sim backend; name the slices of a real "
                              "fabric: {pod1: [leaf0], pod2: [leaf1]}")
        if not 1 <= decl <= MAX_SIM_SLICES:
            raise ConfigError(f"canary.slices: value {decl} -- use 1 to {MAX_SIM_SLICES}")
        return {f"sim{i}": list(exp.canary.switches) for i in range(decl)}
    if not decl:
        raise ConfigError("canary.slices: empty -- name at least one slice")
    owner: dict[str, str] = {}
    for name, switches in decl.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):  # a folder: never '..'
            raise ConfigError(f"canary.slices: slice name {name!r} -- use 1-64 letters, "
                              "digits, '_', '-', '.', starting with a letter or digit (it names "
                              "a folder and MLflow tags)")
        if not switches:
            raise ConfigError(f"canary.slices.{name}: no switches")
        for sw in switches:
            if sw in owner and owner[sw] != name:
                raise ConfigError(f"canary.slices: switch {sw!r} is in both {owner[sw]!r} and "
                                  f"{name!r} -- slices must be disjoint")
            owner[sw] = name
    return {k: list(v) for k, v in decl.items()}


def for_slice(exp: Experiment, name: str) -> Experiment:
    """The experiment as the worker of slice ``name`` runs it (see the module docstring)."""
    known = slices(exp)
    if name not in known:
        have = ", ".join(known) or "none (declare canary.slices)"
        raise ConfigError(f"--slice {name!r}: not a slice of {exp.name}; it has: {have}")
    return exp.model_copy(update={
        "canary": exp.canary.model_copy(update={"switches": known[name]}),
        "storage": exp.storage_url,
        "tracking": exp.tracking.model_copy(update={"uri": exp.tracking_uri}),
        "results_dir": str(exp.results_path / "slices" / name),
    })
