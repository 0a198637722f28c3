"""nccl-tests ``all_reduce_perf`` / ``alltoall_perf`` output, v2.18 format
(shared/reference/nccl-tests/FORMAT-NOTES.md and allreduce-v2.18-version-banner-mpi-tagged.txt).

The programs only run under the emulated ``mpirun`` (they need peers); started directly they
fail the way a rank without its MPI peers does.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

PROGRAMS = {"all_reduce_perf": "all_reduce", "alltoall_perf": "alltoall"}
HEADER = (
    "#                                                              out-of-place"
    "                       in-place          \n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    "     time   algbw   busbw  #wrong \n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        "
    "     (us)  (GB/s)  (GB/s)         \n")


class UsageError(Exception):
    pass


@dataclass
class NcclArgs:
    min_bytes: int = 33554432
    max_bytes: int = 33554432
    step_factor: int = 2
    ngpus: int = 1
    iters: int = 20
    warmup: int = 1
    check: int = 1
    nthreads: int = 1
    cycles: int = 1  # -N: result rows printed once per cycle (0 = until stopped)


def _size(text: str) -> int:
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    t = text.strip().upper()
    if t and t[-1] in units:
        return int(float(t[:-1]) * units[t[-1]])
    return int(t)


def parse_args(argv: list[str]) -> NcclArgs:
    a = NcclArgs()
    opts = {"-b": "min_bytes", "--minbytes": "min_bytes", "-e": "max_bytes",
            "--maxbytes": "max_bytes", "-f": "step_factor", "--stepfactor": "step_factor",
            "-g": "ngpus", "--ngpus": "ngpus", "-n": "iters", "--iters": "iters",
            "-w": "warmup", "--warmup_iters": "warmup", "-c": "check", "--check": "check",
            "-t": "nthreads", "--nthreads": "nthreads", "-N": "cycles",
            "--run_cycles": "cycles"}
    ignored = {"-d", "--datatype", "-o", "--op", "-a", "--average", "-m", "--agg_iters",
               "-p", "--parallel_init", "-z", "--blocking", "-G", "--cudagraph", "-r",
               "--root", "-C", "--report_cputime", "-S", "--report_timestamps", "-y",
               "--stream_null", "-u", "--unalign", "-i", "--stepbytes"}
    it = iter(argv)
    for arg in it:
        flag, _, inline = arg.partition("=")
        if flag in opts or flag in ignored:
            value = inline or next(it, None)
            if value is None:
                raise UsageError(f"option requires an argument -- '{flag.lstrip('-')}'")
            if flag in ignored:
                continue
            name = opts[flag]
            try:
                setattr(a, name, _size(value) if name.endswith("bytes") else int(value))
            except ValueError:
                raise UsageError(f"invalid value {value!r} for {flag}") from None
        else:
            raise UsageError(f"invalid option -- '{arg}'")
    if a.ngpus != 1 or a.nthreads != 1:
        raise UsageError("emulated hosts have one GPU per rank: use -g 1 -t 1")
    if a.min_bytes > a.max_bytes or a.step_factor < 2 and a.min_bytes != a.max_bytes:
        raise UsageError("invalid size range")
    return a


def sizes(a: NcclArgs, nranks: int, op: str) -> list[int]:
    out, s = [], a.min_bytes
    while s <= a.max_bytes:
        # all_reduce counts float elements; alltoall splits the buffer over the ranks.
        unit = 4 * (nranks if op == "alltoall" else 1)
        out.append(max(unit, s // unit * unit))
        if a.step_factor < 2:
            break
        s *= a.step_factor
    return out


def fit(value: float, width: int) -> str:
    """nccl-tests: %.2f if it fits, else %.1f, else %.0f, else %e."""
    for fmt in ("{:.2f}", "{:.1f}", "{:.0f}"):
        text = fmt.format(value)
        if len(text) <= width:
            return text.rjust(width)
    return f"{value:e}".rjust(width)


def row(size: int, op: str, nranks: int, halves: list[tuple[float, float, float, str]]) -> str:
    count = size // 4 // (nranks if op == "alltoall" else 1)
    redop = "none" if op == "alltoall" else "sum"
    text = f"{size:12d}  {count:12d}  {'float':>8}  {redop:>6}  {-1:6d}"
    for t_us, algbw, busbw, wrong in halves:
        text += f"  {fit(t_us, 7)}  {fit(algbw, 6)}  {fit(busbw, 6)}  {wrong:>6}"
    return text


# NCCL's names (ncclFuncStr, ncclAlgoStr, ncclProtoStr); rocesim runs Ring and Tree AllReduce.
# AlltoAll is grouped send/recv, which takes the point-to-point path: no TUNING line.
FUNCS = {"all_reduce": "AllReduce"}
CHANNELS = 4  # rocesim.Collective's default channels


def algorithm(op: str, nccl_algo: str | None, planted: str | None) -> str | None:
    """The algorithm NCCL runs: its own choice (``planted``, else Ring) among those
    ``NCCL_ALGO`` allows (a list, or ``^`` and a list to exclude); None when it allows neither
    Ring nor Tree (NCCL: no algorithm available). AlltoAll is point-to-point: Ring here."""
    if op != "all_reduce":
        return "Ring"
    known = ("Ring", "Tree")
    allowed = list(known)
    if nccl_algo:
        names = {x.strip().lower() for x in nccl_algo.lstrip("^").split(",")}
        excluded = nccl_algo.startswith("^")
        allowed = [k for k in known if (k.lower() in names) != excluded]
    want = planted if planted in known else "Ring"
    return want if want in allowed else (allowed[0] if allowed else None)


def tuning_line(op: str, size: int, algo: str) -> str:
    """NCCL's current TUNING line for one call (NVIDIA/nccl@01e6dd9 src/enqueue.cc: "%s: %ld
    Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}", names from ncclAlgoToString and
    ncclProtoToString: RING, TREE; LL, LL128, SIMPLE); SIMPLE above 64 KiB, LL below."""
    proto = "SIMPLE" if size >= 65536 else "LL"
    return (f"NCCL INFO {FUNCS[op]}: {size} Bytes -> Algo {algo.upper()} proto {proto} "
            f"channel{{Lo..Hi}}={{0..{CHANNELS - 1}}}")


def main(argv: list[str]) -> int:
    prog = sys.argv[0].rsplit("/", 1)[-1]
    print(f"{prog}: no MPI peers: run it through mpirun on the emulated cluster "
          "(mpirun -np N -H host0,host1,... " + prog + " ...)", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
