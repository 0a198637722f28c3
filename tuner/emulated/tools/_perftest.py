"""What the perftest stand-ins (``ib_write_lat``, ``ib_write_bw``) share: the real binary as the
judge of the command line, option parsing, and the server/client meeting point per port.

Where Debian's perftest is installed (``/usr/bin/<tool>``), every command line is first given
to it with no RDMA device visible (``SYSFS_PATH`` pointing nowhere): perftest parses all options
before it looks for a device, so anything it refuses ("TOS only valid for rdma_cm based QP",
"unrecognized option") is refused here with its own words and exit status.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tuner.emulated import fabric
from tuner.emulated import state as st
from tuner.emulated.tools._base import Target, target

REAL_DIR = Path("/usr/bin")
# What perftest prints once the options passed and no device is there: the options were fine.
NO_DEVICE = ("Did not detect devices", "Unable to find the Infiniband/RoCE device")
DEFAULT_PORT = 18515
LINE = "-" * 87


class Usage(Exception):
    """A refused command line or a failed run: printed to stderr, exit status 1."""

    def __init__(self, text: str, code: int = 1) -> None:
        super().__init__(text)
        self.code = code


def real_verdict(tool: str, argv: list[str]) -> Usage | None:
    """``Usage`` with the real tool's complaint if it refuses ``argv``; None if it accepts it
    (or is not installed)."""
    real = REAL_DIR / tool
    if not (real.is_file() and os.access(real, os.X_OK)):
        return None
    env = {**os.environ, "SYSFS_PATH": "/nonexistent/ecntune-no-rdma"}
    try:
        res = subprocess.run([str(real), *argv], capture_output=True, text=True, timeout=5,
                             env=env, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return None  # past the option parser (a device was found and it started): accepted
    out = (res.stdout + res.stderr).strip()
    if any(m in out for m in NO_DEVICE):
        return None
    return Usage(out or f"{tool}: exit {res.returncode}", res.returncode or 1)


def parse(tool: str, argv: list[str]) -> dict[str, Any]:
    """The options the stand-ins act on; perftest's own rules where it has them."""
    o: dict[str, Any] = {"size": 65536 if tool.endswith("_bw") else 2, "iters": 1000,
                         "duration": None, "dev": None, "gid": 0, "port": DEFAULT_PORT,
                         "peer": None, "rdma_cm": False, "tos": None, "tclass": 0, "gap": 0,
                         "qps": 1, "rate": None, "gbits": False}
    with_arg = {"-d": "dev", "--ib-dev": "dev", "-s": "size", "--size": "size",
                "-n": "iters", "--iters": "iters", "-D": "duration", "--duration": "duration",
                "-x": "gid", "--gid-index": "gid", "-p": "port", "--port": "port",
                "-T": "tos", "--tos": "tos", "--tclass": "tclass", "--latency_gap": "gap",
                "-q": "qps", "--qp": "qps", "--rate_limit": "rate",
                "-i": None, "--ib-port": None, "-m": None, "--mtu": None, "-u": None,
                "--qp-timeout": None, "-S": None, "--sl": None, "--rate_units": None,
                "--rate_limit_type": None, "--burst_size": None, "-t": None, "--tx-depth": None}
    flags = {"-F", "--CPU-freq", "--report_gbits", "-R", "--rdma_cm", "-z", "--com_rdma_cm",
             "-e", "--events", "-U", "--report-unsorted", "-H", "--report-histogram"}
    it = iter(argv)
    for a in it:
        flag, eq, inline = a.partition("=")
        if flag in with_arg:
            value = inline if eq else next(it, None)
            if value is None:
                raise Usage(f"{tool}: option requires an argument -- '{flag.lstrip('-')}'")
            key = with_arg[flag]
            if key == "dev":
                o["dev"] = value
            elif key == "rate":
                o["rate"] = float(value)
            elif key:
                o[key] = int(value)
                o["gid_set"] = o.get("gid_set", False) or key == "gid"
        elif a in flags:
            o["rdma_cm"] = o["rdma_cm"] or a in ("-R", "--rdma_cm", "-z", "--com_rdma_cm")
            o["gbits"] = o["gbits"] or a == "--report_gbits"
        elif a in ("-a", "--all"):
            raise Usage(f" -a (all sizes) is not supported by the emulated {tool}")
        elif a.startswith("-"):
            raise Usage(f"{tool}: unrecognized option '{a}'\n Invalid Command or flag.")
        else:
            o["peer"] = a
    if o["tos"] is not None and not o["rdma_cm"]:
        raise Usage(" TOS only valid for rdma_cm based QP and RawEth QP ")
    if o["gap"] and tool.endswith("_bw"):
        raise Usage(" Latency gap feature is only for latency tests")
    if o["size"] < 1 or o["iters"] < 5:
        raise Usage(" Size must be at least 1 and iterations at least 5")
    return o


def server_file(tdir: Path, port: int) -> Path:
    return tdir / f"perftest_server-{port}.json"


def result_file(tdir: Path, port: int) -> Path:
    return tdir / f"perftest_result-{port}.json"


def _gid(addr: str) -> str:
    parts = [f"{int(x):02d}" for x in addr.split(".")]
    return "00:00:00:00:00:00:00:00:00:00:255:255:" + ":".join(parts)


def banner(title: str, settings: list[str], inline: int, o: dict[str, Any],
           local: dict[str, Any], remote: dict[str, Any]) -> str:
    """perftest's connection banner: test title, settings lines, both ends' QP and GID."""
    rng = random.Random(f"{local['name']}-{remote['name']}-{o['port']}-{title}")
    qpn = rng.randrange(0x100, 0x400)
    lines = [
        LINE, f"                    {title}",
        f" Dual-port       : OFF\t\tDevice         : {o['dev']}",
        f" Number of qps   : {o['qps']}\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF", *settings,
        " Mtu             : 4096[B]", " Link type       : Ethernet",
        f" GID index       : {o['gid']}", f" Max inline data : {inline}[B]",
        f" rdma_cm QPs\t : {'ON' if o['rdma_cm'] else 'OFF'}",
        f" Data ex. method : {'rdma_cm' if o['rdma_cm'] else 'Ethernet'}", LINE,
        f" local address: LID 0000 QPN {qpn:#06x} PSN {rng.randrange(1 << 24):#08x} "
        f"RKey {rng.randrange(1 << 24):#08x} VAddr {rng.randrange(1 << 40):#016x}",
        f" GID: {_gid(local.get('data_address') or local['address'])}",
        f" remote address: LID 0000 QPN {qpn + 1:#06x} PSN {rng.randrange(1 << 24):#08x} "
        f"RKey {rng.randrange(1 << 24):#08x} VAddr {rng.randrange(1 << 40):#016x}",
        f" GID: {_gid(remote.get('data_address') or remote['address'])}", LINE]
    return "\n".join(lines) + "\n"


def run(tool: str, argv: list[str], render: Callable[..., str],
        client: Callable[[Target, dict[str, Any]], int]) -> int:
    """A perftest stand-in's main: judge the command line, then serve or run the client;
    ``render(o, local, remote, stats)`` prints a finished test."""
    t = target(tool)
    st.log_command(t.dir, tool, argv)
    try:
        refused = real_verdict(tool, argv)
        if refused is not None:
            raise refused
        o = parse(tool, argv)
        check_device(t, o)
        if o["peer"] is None:
            return serve(t, o, tool, lambda o, r: render(
                {**o, **r["opts"]}, t.state, st.load_state(t.root / r["client"]), r["stats"]))
        return client(t, o)
    except Usage as e:
        print(str(e), file=sys.stderr)
        return e.code


def finish(t: Target, o: dict[str, Any], server: str, peer: dict[str, Any],
           stats: dict[str, Any], render: Callable[..., str]) -> int:
    """Hand the result to the waiting server and print it on the client side too."""
    st.write_json(result_file(t.root / server, o["port"]),
                  {"client": t.name, "stats": stats,
                   "opts": {"size": o["size"], "duration": o["duration"]}})
    sys.stdout.write(render(o, t.state, peer, stats))
    return 0


def find_peer(t: Target, peer: str, port: int) -> tuple[str, dict[str, Any]]:
    """The host (and its rail: the state seen through that NIC port) with that address."""
    from tuner.emulated.hosts import rail_of

    for name, s in fabric.targets(t.root).items():
        if s["kind"] != "host":
            continue
        rail = s if peer == name else rail_of(s, address=peer)
        if rail is not None:
            return name, rail
    raise Usage(f" Couldn't connect to {peer}:{port}\n"
                "Unable to open file descriptor for socket connection Unable to init the "
                "socket connection")


def check_device(t: Target, o: dict[str, Any]) -> None:
    """``-d`` names one of the host's RDMA devices; the tool then runs on that rail (the
    target's state becomes that rail's view: its ``rocesim_nic``, netdev, address)."""
    from tuner.emulated.hosts import rail_of

    dev = o["dev"] or t.state.get("rdma_device")
    rail = rail_of(t.state, device=str(dev))
    if rail is None:
        raise Usage(f" IB device {dev} not found\n Unable to find the Infiniband/RoCE device")
    t.state = rail
    o["dev"] = dev
    if o.get("gid_set"):
        check_gid(t, o)


def check_gid(t: Target, o: dict[str, Any]) -> None:
    """``-x`` must name the RoCE v2 GID of this rail's data address in the device's GID table
    (``ports/1/gids/<i>``, ``gid_attrs/types/<i>``): from any other entry the QP's packets are
    RoCE v1 or carry another source address, which a routed fabric does not deliver."""
    from tuner.diagnose.parse import ipv4_gid

    port = t.dir / f"sys/class/infiniband/{o['dev']}/ports/1"
    address = t.state.get("data_address") or t.state["address"]
    try:
        gid = (port / f"gids/{int(o['gid'])}").read_text().strip()
        kind = (port / f"gid_attrs/types/{int(o['gid'])}").read_text().strip()
    except OSError:
        raise Usage(f" Failed to query GID index {o['gid']} of {o['dev']}\n Couldn't create "
                    "IB resources") from None
    if gid != ipv4_gid(address) or kind != "RoCE v2":
        raise Usage(" Failed to modify QP to RTR\n Unable to Connect the HCA's through the "
                    f"link (GID index {o['gid']} is {kind} {gid}, not RoCE v2 {address})")


def connect(t: Target, o: dict[str, Any], tool: str) -> tuple[str, dict[str, Any]]:
    """The client side of the meeting: a live server of the same tool on that host and port."""
    name, peer = find_peer(t, o["peer"], o["port"])
    server = st.read_json(server_file(t.root / name, o["port"]))
    if server is None or not fabric.alive(int(server["pid"])) or server.get("tool") != tool:
        raise Usage(f" Couldn't connect to {o['peer']}:{o['port']}\nUnable to open file "
                    "descriptor for socket connection Unable to init the socket connection")
    if st.load_faults(t.dir).get("link_down") or st.load_faults(t.root / name).get("link_down"):
        raise Usage(" Failed to modify QP to RTR\n Unable to Connect the HCA's through the link")
    return name, peer


def serve(t: Target, o: dict[str, Any], tool: str, render: Any) -> int:
    """Wait for a client on ``-p``, then print what it measured (``render(o, result)``)."""
    result_file(t.dir, o["port"]).unlink(missing_ok=True)
    st.write_json(server_file(t.dir, o["port"]), {"pid": os.getpid(), "port": o["port"],
                                                  "tool": tool})
    try:
        print("\n************************************\n* Waiting for client to connect... *\n"
              "************************************", flush=True)
        while not result_file(t.dir, o["port"]).exists():
            time.sleep(0.02)
        result = json.loads(result_file(t.dir, o["port"]).read_text())
    finally:
        server_file(t.dir, o["port"]).unlink(missing_ok=True)
    result_file(t.dir, o["port"]).unlink(missing_ok=True)
    sys.stdout.write(render(o, result))
    return 0
