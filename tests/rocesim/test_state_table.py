"""The kernel's state handed to `run` as a table of addresses (rocesim._kernel, #24 item 4)."""

from __future__ import annotations

import copy
import importlib.util
from typing import NamedTuple

import numba
import numpy as np
import pytest
from numba.core import types
from numba.core.errors import TypingError

from rocesim import Collective, Fabric, Simulation, Topology, Workload
from rocesim import _kernel as K
from rocesim._kernel import StateRef, state_ref, state_table, unpack


class One(NamedTuple):
    grid: np.ndarray
    scale: float
    count: int
    on: bool


class Two(NamedTuple):
    col: np.ndarray
    cube: np.ndarray


@numba.njit(cache=False)
def _touch(table: np.ndarray, ref: StateRef) -> tuple[float, int, bool, float, int]:
    """Reads every kind of field through the table and writes into each array."""
    one, two = unpack(table, ref, 0), unpack(table, ref, 1)
    one.grid[1, 2] = 7.0
    two.col[1] = 9
    two.cube[1, 0, 1] += 1
    return one.scale, one.count, one.on, one.grid[0, 1], two.col.shape[0] + two.cube.shape[2]


def _state() -> tuple[One, Two]:
    grid = np.arange(12.0).reshape(3, 4)
    col = np.zeros((5, 3), dtype=np.int32)[:, 1]  # strided: 12-byte steps
    cube = np.zeros((2, 3, 4), dtype=np.uint16)
    return One(grid, -0.1, -(2**40), True), Two(col, cube)


def test_the_kernel_sees_the_same_memory_and_values() -> None:
    """Writes through the unpacked arrays land in the caller's arrays (a strided view too), and
    scalars come back exactly (a float's bits, a negative int, a bool)."""
    state = _state()
    scale, count, on, g01, sizes = _touch(state_table(state), state_ref(state))
    assert scale == -0.1 and count == -(2**40) and on is True
    assert g01 == 1.0 and sizes == 5 + 4
    assert state[0].grid[1, 2] == 7.0
    assert state[1].col[1] == 9 and state[1].col.base[1, 1] == 9  # the view's own element
    assert state[1].cube[1, 0, 1] == 1 and state[1].cube.sum() == 1


def test_state_types_that_differ_in_one_dtype_are_different_types() -> None:
    """A kernel compiled for 8-bit link ids must never be handed 16-bit ones: the key that
    makes the dispatcher's lookup cheap still tells the two apart (and equal states share)."""
    a, b = _state(), _state()
    c = (a[0], Two(a[1].col, a[1].cube.astype(np.uint8)))
    assert state_ref(a) == state_ref(b) and hash(state_ref(a)) == hash(state_ref(b))
    assert state_ref(a) != state_ref(c)
    assert types.TypeRef(numba.typeof(a)) != state_ref(a)


def test_the_dispatcher_hashes_no_field_type() -> None:
    """numba hashes each argument's type on every call: the state's key is a string and the
    structures' classes, not the nested field types (~100 µs per advance() when it was)."""
    name, classes = state_ref(_state()).key
    assert isinstance(name, str) and classes == (One, Two)


def test_run_takes_the_table_not_the_structures() -> None:
    """The first-compile saving: ``run``'s Python entry point unboxes the table and the type
    (a dummy), not the 107 arrays of the structures."""
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=2))
    sim = Simulation(fab, Workload(collectives=[Collective("all_reduce", 2**16,
                                                           fab.nic_names)]), max_time_us=50)
    sim.run()
    assert K.run.signatures  # one per kind of state this process ran
    for sig in K.run.signatures:
        assert sum(isinstance(a, types.Array) for a in sig) == 2  # the generator and the table
        assert isinstance(sig[-1], StateRef)


def test_a_copied_simulation_runs_on_its_own_arrays() -> None:
    """deepcopy keeps the state's identity in the copy but not its addresses: the copy's table
    is written again, so the copy never steps the original's arrays."""
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=4))
    sim = Simulation(fab, Workload(collectives=[Collective("all_reduce", 2**20,
                                                           fab.nic_names)]), max_time_us=400)
    sim.advance(100)
    twin = copy.deepcopy(sim)
    before = sim.l_counters.copy()
    first = twin.run()
    assert (sim.l_counters == before).all()
    second = sim.run()
    assert first.collectives[0].busbw_gbytes_per_s == second.collectives[0].busbw_gbytes_per_s
    assert (twin.l_counters == sim.l_counters).all()


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match=r"Two\.cube: 4 dimensions"):
        state_table((One(np.zeros((1, 1)), 0.0, 0, False), Two(np.zeros(1), np.zeros((1,) * 4))))

    @numba.njit(cache=False)
    def not_constant(table: np.ndarray, ref: StateRef, i: int) -> int:
        return unpack(table, ref, i).grid.shape[0]

    state = _state()
    with pytest.raises(TypingError, match="index must be a constant"):
        not_constant(state_table(state), state_ref(state), 0)


def test_declared_trailing_dimensions_are_compiled_in_and_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A dimension in ``CONST_DIMS`` reaches the kernel as a constant, not from the table (the
    table's shape cell, altered after the check, is not read), and ``state_table`` refuses an
    array whose shape differs from it, naming the field."""
    monkeypatch.setattr(K, "CONST_DIMS", {("One", "grid"): (4,)})

    @numba.njit(cache=False)
    def width(table: np.ndarray, ref: StateRef) -> tuple[int, int, float]:
        grid = unpack(table, ref, 0).grid
        return grid.shape[0], grid.shape[1], grid[2, 3]

    state = _state()
    table = state_table(state)
    assert width(table, state_ref(state)) == (3, 4, 11.0)
    table[0, 2] = 9  # grid's second dimension in the table
    assert width(table, state_ref(state)) == (3, 4, 11.0)
    wide = (One(np.zeros((3, 5)), 0.0, 0, False), state[1])
    with pytest.raises(ValueError, match=r"One\.grid: shape \(3, 5\), the kernel is compiled "
                                         r"for \[\.\.\., 4\]"):
        state_table(wide)


def test_the_simulations_state_has_the_declared_dimensions() -> None:
    """Every declared field exists in the structures, and a simulation's arrays have the
    declared trailing dimensions (state_table would refuse them otherwise)."""
    from rocesim import _state
    for (struct, name), dims in K.CONST_DIMS.items():
        assert name in getattr(_state, struct)._fields, (struct, name)
        assert all(d > 0 for d in dims)
    fab = Fabric(Topology(kind="single_switch", hosts_per_leaf=2))
    sim = Simulation(fab, Workload(collectives=[Collective("all_reduce", 2**16,
                                                           fab.nic_names)]), max_time_us=5)
    sim.run()
    structs = {type(s).__name__: s for s in sim._table_of}
    for (struct, name), dims in K.CONST_DIMS.items():
        assert getattr(structs[struct], name).shape[-len(dims):] == dims, (struct, name)


def test_a_state_constant_edited_alone_stops_the_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """numba keys the kernel's cache on _kernel.py alone and compiles _state's column constants
    into it: one edited in _state.py alone must stop the import, not run the cached kernel with
    the old columns."""
    from rocesim import _state
    assert K.state_fingerprint() == K.STATE_FINGERPRINT
    monkeypatch.setattr(_state, "NFF", _state.NFF + 1)  # a column added
    with pytest.raises(ImportError, match=r'set STATE_FINGERPRINT = "[0-9a-f]{16}" there'):
        K.check_state_fingerprint()
    # and loading the module makes the check
    spec = importlib.util.spec_from_file_location("kernel_again", K.__file__)
    assert spec is not None and spec.loader is not None
    with pytest.raises(ImportError, match="rocesim/_state.py's column constants changed"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
