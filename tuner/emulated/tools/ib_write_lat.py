"""Stand-in perftest ``ib_write_lat`` (RoCE), latency from rocesim probes.

Server (no peer argument) waits for a client; the client (``ib_write_lat [opts] <server>``)
needs a waiting server, like the real tool. Latencies: the probes of a CONCURRENT ``mpirun``
(latency under load: the client waits for that run and uses its probes), else of the most
recent run if the settings have not changed since, else a short probe run of the idle fabric.
Options honoured: ``-d -i -s -n -D -x -F -R -T -p --report_gbits``; ``-a`` is refused.
Formats: shared/reference/perftest/FORMAT-NOTES.md (REPORT_FMT_LAT with TABs; ``-D`` rows).
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from tuner.emulated import fabric
from tuner.emulated import state as st
from tuner.emulated.tools._base import Target, target

LINE = "-" * 87
SERVER_FILE = "perftest_server.json"
RESULT_FILE = "perftest_result.json"
DEFAULT_PORT = 18515


class Usage(Exception):
    pass


def _parse(argv: list[str]) -> dict[str, Any]:
    o: dict[str, Any] = {"size": 2, "iters": 1000, "duration": None, "dev": "mlx5_0",
                         "gid": 3, "port": DEFAULT_PORT, "peer": None, "rdma_cm": False}
    with_arg = {"-d": "dev", "--ib-dev": "dev", "-s": "size", "--size": "size",
                "-n": "iters", "--iters": "iters", "-D": "duration", "--duration": "duration",
                "-x": "gid", "--gid-index": "gid", "-p": "port", "--port": "port",
                "-i": None, "--ib-port": None, "-T": None, "--tos": None, "-m": None,
                "--mtu": None, "-u": None, "--qp-timeout": None, "-S": None, "--sl": None}
    flags = {"-F", "--CPU-freq", "--report_gbits", "-R", "--rdma_cm", "-z", "--com_rdma_cm",
             "-c", "-e", "--events", "-I", "-U", "--report-unsorted", "-H",
             "--report-histogram"}
    it = iter(argv)
    for a in it:
        flag, eq, inline = a.partition("=")
        if flag in with_arg:
            value = inline if eq else next(it, None)
            if value is None:
                raise Usage(f"ib_write_lat: option requires an argument -- '{flag}'")
            key = with_arg[flag]
            if key:
                o[key] = value if key == "dev" else int(value)
        elif a in flags:
            if a in ("-R", "--rdma_cm", "-z", "--com_rdma_cm"):
                o["rdma_cm"] = True
        elif a in ("-a", "--all"):
            raise Usage(" -a (all sizes) is not supported by the emulated ib_write_lat")
        elif a.startswith("-"):
            raise Usage(f"ib_write_lat: unrecognized option '{a}'")
        else:
            o["peer"] = a
    if o["size"] < 1 or o["iters"] < 5:
        raise Usage(" Size must be at least 1 and iterations at least 5")
    return o


def _banner(o: dict[str, Any], local: dict[str, Any], remote: dict[str, Any]) -> str:
    def gid(addr: str) -> str:
        parts = [f"{int(x):02d}" for x in addr.split(".")]
        return "00:00:00:00:00:00:00:00:00:00:255:255:" + ":".join(parts)

    rng = random.Random(f"{local['name']}-{remote['name']}")
    qpn = rng.randrange(0x100, 0x400)
    cm = "ON " if o["rdma_cm"] else "OFF"
    lines = [
        LINE, "                    RDMA_Write Latency Test",
        f" Dual-port       : OFF\t\tDevice         : {o['dev']}",
        " Number of qps   : 1\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: OFF", " ibv_wr* API     : ON", " TX depth        : 1",
        " Mtu             : 4096[B]", " Link type       : Ethernet",
        f" GID index       : {o['gid']}", " Max inline data : 220[B]",
        f" rdma_cm QPs\t : {cm.strip()}",
        f" Data ex. method : {'rdma_cm' if o['rdma_cm'] else 'Ethernet'}", LINE,
        f" local address: LID 0000 QPN {qpn:#06x} PSN {rng.randrange(1 << 24):#08x} "
        f"RKey {rng.randrange(1 << 24):#08x} VAddr {rng.randrange(1 << 40):#016x}",
        f" GID: {gid(local['address'])}",
        f" remote address: LID 0000 QPN {qpn + 1:#06x} PSN {rng.randrange(1 << 24):#08x} "
        f"RKey {rng.randrange(1 << 24):#08x} VAddr {rng.randrange(1 << 40):#016x}",
        f" GID: {gid(remote['address'])}", LINE]
    return "\n".join(lines) + "\n"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _samples(root: Path, a: dict[str, Any], b: dict[str, Any], size: int) -> list[float]:
    marker = root / "mpirun.running"
    while marker.exists():  # latency under load: wait for the concurrent run's probes
        try:
            if not _alive(int(marker.read_text() or 0)):
                break
        except (OSError, ValueError):
            break
        time.sleep(0.05)
    settings = fabric.applied_settings(root)
    last = st.read_json(root / "last_probes.json")
    if last and last.get("settings") == settings and last.get("samples_us"):
        return [float(x) for x in last["samples_us"]]
    import rocesim

    fab = fabric.build_fabric(root, settings)
    bg = fabric.background(root, fab.nic_names) or [
        rocesim.Background(pattern="permutation", load=0.01, nics=fab.nic_names)]
    res = rocesim.simulate(fab, rocesim.Workload(
        background=bg, probes=rocesim.Probes(pairs=2, nics=[a["rocesim_nic"], b["rocesim_nic"]],
                                             size_bytes=size)),
        seed=int(fabric.load_topology(root).get("seed", 1)), max_time_us=3000)
    return [float(x) for x in res.latency_us.tolist()]


def _stats(samples: list[float], iters: int, seed: str) -> dict[str, float]:
    rng = random.Random(seed)
    draw = sorted(rng.choice(samples) for _ in range(iters))

    def pct(p: float) -> float:
        return draw[min(len(draw) - 1, int(p * len(draw)))]

    avg = sum(draw) / len(draw)
    std = (sum((x - avg) ** 2 for x in draw) / len(draw)) ** 0.5
    return {"t_min": draw[0], "t_max": draw[-1], "t_typical": draw[len(draw) // 2],
            "t_avg": avg, "t_stdev": std, "p99": pct(0.99), "p999": pct(0.999)}


def _report(o: dict[str, Any], r: dict[str, Any]) -> str:
    if o["duration"]:
        head = " #bytes        #iterations       t_avg[usec]    tps average"
        tps = 1e6 / (2 * r["t_avg"])
        row = f" {o['size']:<7d}       {r['iters']:<10d}         {r['t_avg']:<7.2f}" \
              f"        {tps:<7.2f}"
        return f"{head}\n{row}\n{LINE}\n"
    head = (" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
            "t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ")
    row = (f" {o['size']:<7d} {r['iters']}          {r['t_min']:<7.2f}        "
           f"{r['t_max']:<7.2f}      {r['t_typical']:<7.2f}  \t       {r['t_avg']:<7.2f}     "
           f"\t{r['t_stdev']:<7.2f}\t\t{r['p99']:<7.2f} \t\t{r['p999']:<7.2f}")
    return f"{head}\n{row}\n{LINE}\n"


def _find(t: Target, peer: str) -> tuple[str, dict[str, Any]]:
    for name, s in fabric.targets(t.root).items():
        if s["kind"] == "host" and peer in (name, s.get("address")):
            return name, s
    raise Usage(f" Couldn't connect to {peer}:{DEFAULT_PORT}\n"
                "Unable to open file descriptor for socket connection Unable to init the "
                "socket connection")


def main(argv: list[str]) -> int:
    t = target("ib_write_lat")
    try:
        o = _parse(argv)
        if o["dev"] != t.state.get("rdma_device"):
            raise Usage(f" IB device {o['dev']} not found\n Unable to find the Infiniband/RoCE "
                        "device")
        if o["peer"] is None:
            return _server(t, o)
        return _client(t, o)
    except Usage as e:
        print(str(e), file=sys.stderr)
        return 1


def _server(t: Target, o: dict[str, Any]) -> int:
    (t.dir / RESULT_FILE).unlink(missing_ok=True)
    st.write_json(t.dir / SERVER_FILE, {"pid": os.getpid(), "port": o["port"]})
    try:
        print("\n************************************\n* Waiting for client to connect... *\n"
              "************************************", flush=True)
        while not (t.dir / RESULT_FILE).exists():
            time.sleep(0.02)
        result = json.loads((t.dir / RESULT_FILE).read_text())
    finally:
        (t.dir / SERVER_FILE).unlink(missing_ok=True)
    (t.dir / RESULT_FILE).unlink(missing_ok=True)
    peer = st.load_state(t.root / result["client"])
    sys.stdout.write(_banner(o, t.state, peer) + _report({**o, **result["opts"]},
                                                          result["stats"]))
    return 0


def _client(t: Target, o: dict[str, Any]) -> int:
    name, peer = _find(t, o["peer"])
    server = st.read_json(t.root / name / SERVER_FILE)
    if server is None or not _alive(int(server["pid"])) or server["port"] != o["port"]:
        raise Usage(f" Couldn't connect to {o['peer']}:{o['port']}\nUnable to open file "
                    "descriptor for socket connection Unable to init the socket connection")
    if st.load_faults(t.dir).get("link_down") or st.load_faults(t.root / name).get("link_down"):
        raise Usage(" Failed to modify QP to RTR\n Unable to Connect the HCA's through the link")
    samples = _samples(t.root, t.state, peer, o["size"])
    if not samples:
        raise Usage(" Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81")
    if o["duration"]:
        time.sleep(float(o["duration"]))
        avg = sum(samples) / len(samples)
        stats = {"t_avg": avg, "iters": int(o["duration"] * 1e6 / (2 * avg))}
    else:
        stats = {**_stats(samples, o["iters"], f"{t.name}-{name}-{o['size']}"),
                 "iters": o["iters"]}
    st.write_json(t.root / name / RESULT_FILE, {"client": t.name, "stats": stats,
                                                "opts": {"size": o["size"],
                                                         "duration": o["duration"]}})
    sys.stdout.write(_banner(o, t.state, peer) + _report(o, stats))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
