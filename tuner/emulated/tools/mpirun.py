"""Stand-in Open MPI ``mpirun`` launching nccl-tests across emulated hosts.

``mpirun [--allow-run-as-root] -np N -H h0,h1[:slots],... [-x VAR[=v]] [--tag-output]
[--bind-to X] [--map-by X] [--mca k v] <all_reduce_perf|alltoall_perf> [nccl-tests args]``.
An emulated host has one GPU per rail (one NIC port): local rank j runs on GPU j and rail j
(``host:slots`` up to the rails); hosts may be given by name or address. Numbers come from
rocesim with the settings applied on the devices right now.
"""

from __future__ import annotations

import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from tuner.emulated import fabric
from tuner.emulated import hosts as hostmod
from tuner.emulated import state as st
from tuner.emulated.tools import _gpus, nccl_tests
from tuner.emulated.tools._base import target

_WITH_ARG = {"-np", "-n", "-H", "--host", "-host", "-x", "--bind-to", "--map-by", "--rank-by",
             "-npernode", "--npernode", "-wdir", "--wdir", "--prefix", "-hostfile",
             "--hostfile"}
_WITH_TWO = {"--mca", "-mca", "-gmca", "--gmca"}


START_S = 0.3  # mpirun + NCCL initialisation before the first byte moves (seconds on hardware)


class MpiError(Exception):
    pass


def _parse(argv: list[str]) -> tuple[dict[str, Any], list[str]]:
    o: dict[str, Any] = {"np": None, "hosts": [], "env": {}, "tag": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if not a.startswith("-"):
            return o, argv[i:]
        if a in _WITH_TWO:
            i += 3
            continue
        if a in _WITH_ARG:
            if i + 1 >= len(argv):
                raise MpiError(f"mpirun: option {a} requires an argument")
            v = argv[i + 1]
            if a in ("-np", "-n"):
                o["np"] = int(v)
            elif a in ("-H", "--host", "-host"):
                o["hosts"] += [h for h in v.split(",") if h]
            elif a == "-x":
                k, eq, val = v.partition("=")
                o["env"][k] = val if eq else os.environ.get(k, "")
            i += 2
            continue
        if a in ("--tag-output", "-tag-output"):
            o["tag"] = True
        i += 1
    raise MpiError("mpirun: no executable specified")


def _resolve(root: Path, hosts: list[str]) -> list[str]:
    by_addr = {s.get("address"): n for n, s in fabric.targets(root).items()}
    names = set(fabric.targets(root))
    out = []
    for h in hosts:
        name, _, slots = h.partition(":")
        name = by_addr.get(name, name)
        if name not in names or not name.startswith("host"):
            raise MpiError(
                "--------------------------------------------------------------------------\n"
                f"ORTE was unable to reliably start one or more daemons.\n"
                f"Could not resolve host: {name}\n"
                "--------------------------------------------------------------------------")
        out += [name] * (int(slots) if slots else 1)
    return out


def main(argv: list[str]) -> int:
    t = target("mpirun")
    st.log_command(t.dir, "mpirun", argv)
    try:
        o, program = _parse(argv)
        prog = Path(program[0]).name.removesuffix("_mpi")
        if prog not in nccl_tests.PROGRAMS:
            raise MpiError(
                "--------------------------------------------------------------------------\n"
                "mpirun was unable to find the specified executable file, and therefore\n"
                f"did not launch the job.  Executable: {program[0]}\n"
                "--------------------------------------------------------------------------")
        slots = _resolve(t.root, o["hosts"] or [t.name])
        np_ = o["np"] or len(slots)
        if np_ > len(slots):
            raise MpiError(
                "--------------------------------------------------------------------------\n"
                f"There are not enough slots available in the system to satisfy the {np_}\n"
                f"slots that were requested by the application:\n\n  {program[0]}\n\n"
                "--------------------------------------------------------------------------")
        ranks_hosts = slots[:np_]
        gpus = {h: _gpus.count(len(hostmod.rail_views(fabric.targets(t.root)[h])))
                for h in ranks_hosts}
        for h in set(ranks_hosts):
            if ranks_hosts.count(h) > gpus[h]:
                raise MpiError(f"emulated {h} has {gpus[h]} GPU(s): at most "
                               f"{gpus[h]} slot(s) (-H {h}:{gpus[h]})")
        args = nccl_tests.parse_args(program[1:])
    except (MpiError, nccl_tests.UsageError, ValueError) as e:
        print(str(e), file=sys.stderr)
        return 1
    return _run(t.root, prog, ranks_hosts, args, o)


def _run(root: Path, prog: str, ranks_hosts: list[str], a: nccl_tests.NcclArgs,
         o: dict[str, Any]) -> int:
    op = nccl_tests.PROGRAMS[prog]
    states = {h: st.load_state(root / h) for h in ranks_hosts}
    faults = {h: st.load_faults(root / h) for h in ranks_hosts}
    prefix = "[1,0]<stdout>:" if o["tag"] else ""
    pid = os.getpid()

    def out(line: str = "") -> None:
        sys.stdout.write(f"{prefix}{line}\n")

    for h in ranks_hosts:
        st.apply_command_faults(prog, faults[h])
    down = [h for h in ranks_hosts if faults[h].get("link_down")]
    if down:
        h = down[0]
        print(f"{h}:{pid}:{pid + 3} [0] transport/net_ib.cc:1234 NCCL WARN NET/IB : "
              f"{states[h]['rdma_device']}:1 port is not active (state DOWN)",
              file=sys.stderr)
        print(f"{h}: Test NCCL failure common.cu:1005 'unhandled system error (run with "
              "NCCL_DEBUG=INFO for details) / '", file=sys.stderr)
        return 1
    env = {**os.environ, **o["env"]}
    hca = env.get("NCCL_IB_HCA", "").lstrip("=^")
    wanted = [x.split(":")[0] for x in hca.split(",") if x]
    # local rank j runs on the j-th GPU CUDA_VISIBLE_DEVICES lists, and GPU k's traffic on
    # rail k (rail-aligned: NCCL takes the NIC nearest the GPU) if NCCL_IB_HCA allows it, else
    # on another allowed rail; no allowed rail: NCCL finds no device
    views = {h: hostmod.rail_views(states[h]) for h in ranks_hosts}
    allowed = {h: [v for v in views[h] if not wanted or v["rdma_device"] in wanted]
               for h in ranks_hosts}
    if not all(allowed.values()):
        h = ranks_hosts[0]
        print(f"{h}:{pid}:{pid} [0] NCCL INFO NET/IB : No device found.", file=sys.stderr)
        print(f"{h}:{pid}:{pid + 3} [0] init.cc:1458 NCCL WARN NET/IB : no device matches "
              f"NCCL_IB_HCA={hca} (emulated hosts have only {states[h]['rdma_device']}; the "
              "socket fallback is not emulated)", file=sys.stderr)
        return 1
    gpus = _gpus.rank_gpus(ranks_hosts, {h: _gpus.count(len(v)) for h, v in views.items()},
                           env.get("CUDA_VISIBLE_DEVICES"))
    error = gpus if isinstance(gpus, str) else _gpus.claim(root, ranks_hosts, gpus, pid)
    if error is not None or isinstance(gpus, str):
        print(f"{error}\n{ranks_hosts[0]}:{pid}:{pid + 3} [0] NCCL WARN Cuda failure: "
              f"{error}", file=sys.stderr)
        return 1
    nics: list[str] = []
    for h, g in zip(ranks_hosts, gpus, strict=True):
        near = views[h][g % len(views[h])]
        nic = (near if near in allowed[h] else allowed[h][g % len(allowed[h])])["rocesim_nic"]
        nics += [nic] if nic not in nics else []
    if env.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE"):
        for r, h in enumerate(ranks_hosts):
            s = states[h]
            print(f"{h}:{pid + r}:{pid + r} [0] NCCL INFO NET/IB : Using [0]"
                  f"{s['rdma_device']}:1/RoCE [RO]; OOB {s['netdev']}:{s['address']}<0>")
            print(f"{h}:{pid + r}:{pid + r} [0] NCCL INFO Using network IB")
    n = len(ranks_hosts)
    szs = nccl_tests.sizes(a, n, op)
    algo = nccl_tests.algorithm(op, env.get("NCCL_ALGO"),
                                faults[ranks_hosts[0]].get("nccl_algo_choice"))
    if algo is None:
        print(f"{ranks_hosts[0]}:{pid}:{pid + 3} [0] NCCL WARN Error : no algorithm/protocol "
              f"available for NCCL_ALGO={env.get('NCCL_ALGO')}", file=sys.stderr)
        return 1
    time.sleep(START_S)
    cycles = a.cycles if a.cycles > 0 else 10**9
    results, lat = fabric.run_collective(
        root, op, nics, szs, a.iters,
        counted_iters=a.warmup + 2 * a.iters * min(cycles, 10**6), algo=algo.lower())
    wrong = sum(int(faults[h].get("nccl_wrong", 0) or 0) for h in ranks_hosts)
    out("# nccl-tests version 2.18.0 nccl-headers=22703 nccl-library=22703")
    out(f"# Collective test starting: {prog}")
    out(f"# nThread {a.nthreads} nGpus {a.ngpus} minBytes {a.min_bytes} maxBytes {a.max_bytes} "
        f"step: {a.step_factor}(factor) warmup iters: {a.warmup} iters: {a.iters} "
        f"agg iters: 1 validation: {a.check} graph: 0")
    out("#")
    out("# Using devices")
    for r, (h, g) in enumerate(zip(ranks_hosts, gpus, strict=True)):
        out(f"#  Rank {r:2d} Group  0 Pid {pid + r:6d} on {h:>10} device {g:2d} [0000:1b:00] "
            "NVIDIA H100 80GB HBM3")
    out("#")
    for line in nccl_tests.HEADER.splitlines():
        out(line)
    sys.stdout.flush()
    subsys = {x.upper() for x in env.get("NCCL_DEBUG_SUBSYS", "").split(",")}
    if env.get("NCCL_DEBUG", "").upper() in ("INFO", "TRACE") and subsys & {"TUNING", "ALL"} \
            and op in nccl_tests.FUNCS:
        h0 = ranks_hosts[0]
        for size in szs:  # rank 0, once per call: warmup, then out-of-place and in-place
            for _ in range(a.warmup + 2 * a.iters):
                out(f"{h0}:{pid}:{pid} [0] " + nccl_tests.tuning_line(op, size, algo))
    for h in ranks_hosts:
        if faults[h].get("nccl_warn"):
            print(f"{h}:{pid}:{pid + 7} [0] NCCL WARN {faults[h]['nccl_warn']}", flush=True)
    if any(not r.completed or not math.isfinite(r.time_us) for r in results):
        print(f"{ranks_hosts[0]}:{pid}:{pid + 3} [0] NCCL WARN NET/IB : Got completion from "
              "peer with error 12, opcode 1, len 0, vendor err 129 (Send)", file=sys.stderr)
        return 1
    # Real time: each cycle runs warmup (first cycle only) + out-of-place + in-place iterations
    # of every size, then prints its rows; probes see this run's load only meanwhile.
    per_cycle = sum(2 * a.iters * r.time_us for r in results) / 1e6
    warm = sum(a.warmup * r.time_us for r in results) / 1e6
    busbws: list[float] = []
    start = time.time()
    with fabric.traffic(root, "mpirun", {"start": start,
                                         "end": start + warm + per_cycle * cycles,
                                         "samples_us": lat}):
        time.sleep(warm)
        for _ in range(cycles):
            time.sleep(per_cycle)
            for res in results:
                w = str(wrong) if a.check else "N/A"
                # In-place runs the same transfers; rocesim gives one time for both halves.
                half = (res.time_us, res.algbw, res.busbw, w)
                out(nccl_tests.row(res.size_bytes, op, n, [half, half]))
                busbws += [res.busbw, res.busbw]
            sys.stdout.flush()
    oob = wrong if a.check else 0
    out(f"# Out of bounds values : {oob} {'FAILED' if oob else 'OK'}")
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    out(f"# Avg bus bandwidth    : {avg:g} ")
    out("#")
    out(f"# Collective test concluded: {prog}")
    out("#")
    out()
    return 1 if oob else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
