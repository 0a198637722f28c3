"""The kernel's first compile, split over two processes (#24 item 4).

With an empty numba cache the first simulation compiles ~40 functions: ~9 s on one core, which
a new user meets on their first run. ``two_processes`` starts a second Python that compiles
``burst_table`` and three of the step's phases (``ELSEWHERE``, with what they call) into numba's
on-disk cache while this process compiles the other phases (``HERE``), takes ``burst_table``
from the cache to fill the structures, waits for the second process, and leaves ``run`` to its
first call, which loads the second half from the cache: numba caches each function's LLVM
bitcode with its object code, so ``run`` still inlines every phase, and the results are
bit-identical.

The phases' signatures are the ones ``run`` calls them with (``signatures``; a test holds them to
what a compile of ``run`` produces): a phase compiled with another signature would be compiled
again by ``run``, which costs time and nothing else. A warm cache, a kernel already compiled in
this process, ``ROCESIM_SPLIT_COMPILE=0`` or a second process that fails leaves the ordinary
path: every function is compiled (or loaded) where it is first called.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numba
from numba.core import types

from rocesim import _kernel as K

log = logging.getLogger("rocesim.compile")

# Compiled by the second process, in this order, with what they call: ``burst_table`` (the
# first thing a simulation calls: its tables fill the structures) and about half of the phases'
# compile time (measured one by one with an empty cache: docs/benchmarks.md, "First run").
ELSEWHERE = ("burst_table", "service", "marking", "injection")
HERE = ("arrive", "notify", "react", "record", "all_done", "pfc", "probes", "collectives")
_split_done = False
WAIT_S = 600.0  # a second process still compiling then is stopped: ``run`` compiles the rest


def signatures(sim: Any) -> dict[str, tuple[Any, ...]]:
    """Numba argument types of ``run``, of the phases it calls and of ``burst_table``, for
    ``sim``'s structures (``sim._pack()``: their types, not their values, so the burst tables
    may be stand-ins)."""
    state = sim._pack()
    L, S, N, F, G, P, R, X = (numba.typeof(s) for s in state)
    i8, u4, f8, b1 = types.int64, types.uint32, types.float64, types.boolean
    rng, lrate = numba.typeof(sim.rng), numba.typeof(state[6].lrate)
    return {
        "run": (i8, i8, f8, i8, rng, numba.typeof(K.state_table(state)),
                K.state_ref(state)),
        "burst_table": (i8, i8),
        "arrive": (u4, i8, L, S, F),
        "notify": (u4, i8, i8, f8, f8, N, F, L, X),
        "react": (u4, i8, f8, f8, N, F),
        "record": (i8, f8, L, F, R, X, types.literal(False)),
        "all_done": (G,),
        "pfc": (i8, f8, f8, L, S),
        "service": (i8, i8, f8, f8, L, S, X),
        "marking": (i8, f8, rng, L, S, F, X),
        "injection": (f8, L, S, F, X, lrate, b1),
        "probes": (f8, f8, rng, L, S, P, X),
        "collectives": (i8, f8, L, F, G, lrate, b1),
    }


def _tried() -> bool:
    """True once this process has compiled or loaded ``run``, or started its first compile (a
    second simulation built before the first one runs finds the phases compiled), or if numba
    compiles nothing."""
    return bool(_split_done or K.run.overloads or getattr(numba.config, "DISABLE_JIT", False))


def cold(run_sig: tuple[Any, ...]) -> bool:
    """True if neither this process nor numba's cache holds ``run`` for ``run_sig``."""
    if _tried():
        return False
    try:  # numba's cache index (internal): {(signature, target, source stamp): file}
        index = K.run._cache._cache_file._load_index()
    except Exception:  # noqa: BLE001  -- an unknown numba: take the ordinary path
        return False
    return not any(key[0] == run_sig for key in index)


@contextlib.contextmanager
def two_processes(sim: Any) -> Iterator[None]:
    """Around ``sim``'s first calls into the kernel (its burst tables first, which ``sim`` may
    hold as stand-ins of their types until the block): with a cold cache, says so (INFO), then,
    unless ``ROCESIM_SPLIT_COMPILE=0``, a second process compiles ``ELSEWHERE`` while this one
    compiles ``HERE``, waits for ``burst_table``, runs the block, and waits for the rest."""
    global _split_done
    sigs = None if _tried() else signatures(sim)  # the common case costs one test
    if sigs is None or not cold(sigs["run"]):
        yield
        return
    _split_done = True
    log.info("compiling rocesim's kernel into numba's cache (%s): once per machine and version, "
             "~5-10 s", getattr(K.run._cache, "_cache_path", "?"))
    if os.environ.get("ROCESIM_SPLIT_COMPILE", "1") == "0":
        yield
        return
    with tempfile.NamedTemporaryFile(suffix=".sigs") as job, tempfile.TemporaryFile() as err:
        pickle.dump({name: sigs[name] for name in ELSEWHERE}, job)
        job.flush()
        # the child imports this rocesim (its source files key numba's cache), wherever it is
        here = str(Path(K.__file__).resolve().parents[1])
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [here, *filter(None, [os.environ.get("PYTHONPATH")])]))
        child = subprocess.Popen([sys.executable, "-c", _CHILD, job.name], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)
        assert child.stdout is not None
        try:
            for name in HERE:
                getattr(K, name).compile(sigs[name])
            # the child prints each name once that function is cached: its first line (or its
            # end, if it failed) means the block's first call, burst_table, is a cache hit
            if select.select([child.stdout], [], [], WAIT_S)[0]:
                child.stdout.readline()
            yield
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=WAIT_S)
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
            child.stdout.close()
        if child.returncode:
            err.seek(0)
            log.warning("the kernel's second compile process failed (exit %s), so its phases "
                        "(%s) compile in this process: %s", child.returncode,
                        ", ".join(ELSEWHERE), err.read()[-2000:].decode(errors="replace").strip())


def compile_from(path: str) -> None:
    """The second process: compiles the functions named in the pickle at ``path`` with their
    signatures, in order, printing each name once it is in the cache, then exits at once:
    the interpreter's teardown after a compile takes ~0.5 s, which the first process would
    wait for (measured: docs/benchmarks.md, "First run")."""
    with open(path, "rb") as f:
        sigs = pickle.load(f)
    for name, sig in sigs.items():
        getattr(K, name).compile(sig)
        print(name, flush=True)
    sys.stderr.flush()
    os._exit(0)


# run with ``python -c`` (``-m rocesim._compile`` would import this module twice: the package
# imports it first)
_CHILD = "import sys; from rocesim._compile import compile_from; compile_from(sys.argv[1])"
