"""SSH backend speed on the emulated cluster: snapshot + apply + read-back, warm and cold.

Writes its section of docs/benchmarks.md (between ``<!-- ssh:start -->`` and
``<!-- ssh:end -->``; other sections are kept). Run: ``.venv/bin/python bench/ssh_bench.py``
(``--hosts 4,8,16,32,64`` and ``--repeat 5`` by default). Needs Debian's openssh-server.

Warm = connections already open and mlx5 layouts detected (the middle of a study); cold = a new
``SshCluster``: every handshake, layout detection, then the same three steps.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.cluster.ssh import SshCluster  # noqa: E402
from tuner.emulated.cluster import EmulatedCluster, sshd_available  # noqa: E402
from tuner.inventory import load_inventory  # noqa: E402
from tuner.settings import Settings  # noqa: E402

SWITCHES = [("leaf0", "sonic"), ("leaf1", "nvue"), ("leaf2", "sonic"), ("leaf3", "nvue")]
A = {"kmin_bytes": 200_000, "kmax_bytes": 800_000, "pmax_percent": 20, "rpg_time_reset": 150,
     "rpg_ai_rate": 10, "min_time_between_cnps": 4}
B = {"kmin_bytes": 400_000, "kmax_bytes": 1_600_000, "pmax_percent": 10, "rpg_time_reset": 300,
     "rpg_ai_rate": 5, "min_time_between_cnps": 0}
START, END = "<!-- ssh:start -->", "<!-- ssh:end -->"


def cycle(c: SshCluster, values: dict[str, int]) -> float:
    """snapshot + apply + read_back (verified equal); returns seconds."""
    t0 = time.perf_counter()
    base = c.snapshot()
    new = Settings.uniform(list(base.switches), list(base.nics), values)
    c.apply(new)
    if c.read_back() != new:
        raise SystemExit("read-back differs from what was applied")
    return time.perf_counter() - t0


def path_time(c: SshCluster, which: str, values: dict[str, int]) -> float:
    """read + write + read on only the switches or only the hosts (the two critical paths)."""
    drivers = c.drivers()
    keys = [k for k in drivers if ("/" in k) == (which == "hosts")]
    base = c.snapshot()
    new = Settings.uniform(list(base.switches), list(base.nics), values)
    want = {**new.switches, **new.nics}
    t0 = time.perf_counter()
    res = c._fan(lambda d: (d.read(), d.write(want[d.target]), d.read()), keys)
    if any(not o.ok for o in res.values()):
        raise SystemExit(f"{which} path failed: {[o.error for o in res.values() if o.error]}")
    return time.perf_counter() - t0


def one_size(hosts: int, repeat: int, workdir: Path) -> dict[str, float]:
    with EmulatedCluster(workdir / f"emu{hosts}", hosts=hosts, switches=SWITCHES,
                         base_address="127.0.13.") as emu:
        inv = load_inventory(emu.inventory_path)
        colds, connects = [], []
        for _ in range(2):
            emu.reset()
            t0 = time.perf_counter()
            with SshCluster(inv) as c:
                c.connect()
                c.drivers()
                connects.append(time.perf_counter() - t0)
                cycle(c, A)
                colds.append(time.perf_counter() - t0)
        emu.reset()
        with SshCluster(inv) as c:
            c.connect()
            cycle(c, B)  # warm-up: layouts detected, stand-ins' page cache hot
            warm = [cycle(c, A if i % 2 == 0 else B) for i in range(repeat)]
            t0 = time.perf_counter()
            c.counters()
            counters = time.perf_counter() - t0
            switches = statistics.median(path_time(c, "switches", A if i % 2 else B)
                                         for i in range(3))
            hosts_only = statistics.median(path_time(c, "hosts", A if i % 2 else B)
                                           for i in range(3))
    return {"hosts": hosts, "targets": hosts + len(SWITCHES),
            "warm_median": statistics.median(warm), "warm_max": max(warm),
            "cold_connect": statistics.median(connects), "cold_total": statistics.median(colds),
            "counters": counters, "switch_path": switches, "host_path": hosts_only}


def render(rows: list[dict[str, float]], repeat: int, load: tuple[float, float]) -> str:
    cpu = os.cpu_count()
    lines = [
        START,
        "## SSH backend (emulated cluster)",
        "",
        f"`bench/ssh_bench.py`, {time.strftime('%Y-%m-%d')}, {platform.machine()}, {cpu} cores "
        f"shared (load average {load[0]:.1f} at start, {load[1]:.1f} at the end: other test "
        f"runs share the machine), Python {platform.python_version()}. Each host and switch "
        "is a real OpenSSH server on 127.0.N.x with stand-in tools (Python scripts for "
        "`ecnconfig`, `nv`, `show`, `ethtool`); 4 switches (2 SONiC, 2 NVUE); mlx5 layouts "
        "alternate sysfs/debugfs. One *cycle* = `snapshot()` + `apply()` (per target one "
        "command: read, write the knobs that differ, read back) + `read_back()`, verified "
        f"equal. Warm = connections open (median and worst of {repeat} cycles); cold = new "
        "`SshCluster`: handshakes, layout detection, then one cycle (median of 2).",
        "",
        "| hosts | targets | warm cycle (median) | warm (worst) | cold: connect + detect "
        "| cold: total | counters() | switches alone | hosts alone |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['hosts']} | {r['targets']} | {r['warm_median']:.2f} s | "
                     f"{r['warm_max']:.2f} s | {r['cold_connect']:.2f} s | "
                     f"{r['cold_total']:.2f} s | {r['counters']:.2f} s | "
                     f"{r['switch_path']:.2f} s | {r['host_path']:.2f} s |")
    target = next((r for r in rows if r["hosts"] == 32), None)
    if target is not None:
        verdict = "meets" if target["warm_median"] <= 2.0 else "MISSES"
        lines += ["", f"Target (32 hosts + 4 switches, warm, <= 2 s): {verdict} it at "
                  f"{target['warm_median']:.2f} s."]
    lines += ["", "*switches alone* / *hosts alone*: read + write + read-back on only the "
              "switches / only the hosts, in parallel (warm, median of 3): the two critical "
              "paths of a cycle. A switch write is one SSH command running its CLI 4-6 times "
              "in sequence (`ecnconfig -l`, one `ecnconfig -p` per threshold in the min < max "
              "safe order with `-gdrop` on the last, `ecnconfig -l`; NVUE: `nv show`, `nv set` "
              "per field, `nv config apply`, `nv show`), and every stand-in CLI is a Python "
              "start (~60-80 ms idle, several times that under load), as the real `ecnconfig` "
              "is: the switches set the floor of a cycle at every size; hosts (plain sysfs "
              "reads and writes, one SSH command each) grow with the count, bounded by sshd CPU "
              "on 2 shared cores.", END]
    return "\n".join(lines) + "\n"


def write_section(path: Path, section: str) -> None:
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if START in text and END in text:
        head, rest = text.split(START, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        text = head + section + ("\n" + tail if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--hosts", default="4,8,16,32,64")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    args = ap.parse_args()
    if not sshd_available():
        raise SystemExit("needs /usr/sbin/sshd (apt-get install openssh-server)")
    rows = []
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ecntune-ssh-bench-") as tmp:
        for n in (int(x) for x in args.hosts.split(",")):
            row = one_size(n, args.repeat, Path(tmp))
            print(f"{n:3d} hosts: warm {row['warm_median']:.2f} s (worst {row['warm_max']:.2f})"
                  f", cold connect {row['cold_connect']:.2f} s, cold total "
                  f"{row['cold_total']:.2f} s, counters {row['counters']:.2f} s", flush=True)
            rows.append(row)
    write_section(Path(args.out), render(rows, args.repeat, (load0, os.getloadavg()[0])))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
