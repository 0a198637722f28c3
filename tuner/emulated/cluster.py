"""Start and stop an emulated cluster: one real OpenSSH ``sshd`` per host/switch on 127.0.10.x.

Each target gets its own host key (listed in a generated ``known_hosts``), a ``SetEnv`` that tells
the stand-in tools which target they run on, and a state folder ``<root>/<name>/``. Everything
the cluster starts is stopped on exit: the listener by its pidfile, then every process whose
environment carries this cluster's ``ECNTUNE_EMU_ROOT`` (sessions and their children).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tuner.emulated import _procs
from tuner.emulated import hosts as hostmod
from tuner.emulated import state as st
from tuner.emulated import switches as swmod
from tuner.emulated._scripts import BASHENV_SH, SESSION_SH
from tuner.emulated.nvued import ENV_DAEMON
from tuner.errors import ConfigError, TunerError

SSHD = "/usr/sbin/sshd"
# command name -> module under tuner.emulated.tools
TOOLS = {
    "ethtool": "ethtool", "mlnx_qos": "mlnx_qos", "ip": "ip", "mpirun": "mpirun",
    "all_reduce_perf": "nccl_tests", "alltoall_perf": "nccl_tests",
    "ib_write_lat": "ib_write_lat", "ib_write_bw": "ib_write_bw", "ecnconfig": "ecnconfig",
    "show": "show", "nv": "nv", "sonic-db-cli": "sonic_db_cli", "sonic-cfggen": "sonic_cfggen",
    "mmuconfig": "mmuconfig", "counterpoll": "counterpoll", "mstconfig": "mstconfig",
    "mlxconfig": "mstconfig", "ibv_devinfo": "ibv_devinfo", "config": "sonic_config",
    "lspci": "lspci", "ping": "ping",
    # one module, the command name as its first argument
    "TSA": "traffic_shift TSA", "TSB": "traffic_shift TSB", "TSC": "traffic_shift TSC",
}
NETDEV = "ens1f0np0"
RDMA_DEVICE = "mlx5_0"
PCI = "0000:3b:00.0"


def rail_specs(host: str, index: int, address: str, rails: int) -> list[dict[str, Any]]:
    """A host's NIC ports: rail 0 is the one-NIC host's (its data address the SSH address);
    rail k > 0 is ``mlx5_<k>``/``ens<k+1>f0np0`` on its own PCI bus with data address
    ``10.<k>.0.<11+i>``."""
    out = []
    for k in range(rails):
        out.append({"rdma_device": f"mlx5_{k}", "netdev": f"ens{k + 1}f0np0",
                    "pci": f"0000:{0x3b + k:02x}:00.0",
                    "data_address": address if k == 0 else f"10.{k}.0.{11 + index}",
                    "rocesim_nic": f"{host}/mlx5_{k}"})
    return out


def sshd_available() -> bool:
    """True when Debian's openssh-server is installed (tests skip otherwise)."""
    return os.access(SSHD, os.X_OK)


class EmulatedClusterError(TunerError):
    """The emulated cluster could not be started or driven."""


def block_is_free(base_address: str, hosts: int = 4, switches: int = 2, port: int = 22) -> bool:
    """True when nothing listens on any address of the block (another cluster, another run)."""
    addrs = [f"{base_address}{2 + j}" for j in range(switches)]
    addrs += [f"{base_address}{11 + i}" for i in range(hosts)]
    for addr in addrs:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((addr, port))
            except OSError:
                return False
    return True


def free_base_address(hosts: int = 4, switches: int = 2, port: int = 22,
                      first: int = 10, last: int = 99) -> str:
    """The first ``127.0.N.`` block (N from ``first``) where the cluster's addresses are free.

    Test runs of several engineers share one machine; each session picks its own block.
    """
    for n in range(first, last + 1):
        base = f"127.0.{n}."
        if block_is_free(base, hosts, switches, port):
            return base
    raise EmulatedClusterError(f"no free 127.0.N. block for port {port} in {first}..{last}")


@dataclass
class Target:
    name: str
    kind: str  # "host" | "switch"
    address: str
    platform: str = ""
    nic_layout: str = ""
    pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class EmulatedCluster:
    """An emulated RoCE cluster on loopback, as a context manager.

    Example:
        >>> with EmulatedCluster(tmp_path) as emu:          # doctest: +SKIP
        ...     inventory = emu.inventory_path             # hand this to the SSH backend
        ...     emu.inject("host1", refuse_write={"rpg_time_reset": "EINVAL"})

    Hosts ``host0..`` listen on ``base_address + str(11 + i)``, switches on
    ``base_address + str(2 + j)``. Host ``hostN`` is rocesim NIC ``hostN/mlx5_0``; the switches
    are the rocesim leaves (hosts are spread over them in order).
    """

    def __init__(
        self,
        root: Path,
        hosts: int = 4,
        switches: list[tuple[str, str]] | None = None,
        nic_layouts: list[str] | None = None,
        base_address: str = "127.0.10.",
        port: int = 22,
        spines: int = 1,
        nic_gbps: int = 100,
        seed: int = 1,
        background: list[dict[str, Any]] | None = None,
        sonic_release: str = swmod.WRED_ECN_SINCE,
        operator_fix: bool = False,
        rails: int = 1,
        buffer_bytes: int | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        if any(c.isspace() for c in str(self.root)):
            raise ConfigError(f"emulated cluster root {self.root!s} must not contain whitespace "
                              "(it is passed through sshd SetEnv and the bash write hook)")
        self.port = port
        switch_specs = switches if switches is not None else [("leaf0", "sonic"),
                                                              ("leaf1", "nvue")]
        if not switch_specs:
            raise ConfigError("an emulated cluster needs at least one switch (leaf)")
        for name, platform in switch_specs:
            if platform not in ("sonic", "nvue"):
                raise ConfigError(f"switch {name}: platform {platform!r} is not sonic|nvue")
        if sonic_release not in swmod.SONIC_RELEASES:
            raise ConfigError(f"sonic_release: {sonic_release!r} is not one of "
                              f"{', '.join(swmod.SONIC_RELEASES)}")
        self.sonic_release = sonic_release
        # SONiC switches boot with stock qos_config.j2 maps (RoCE's DSCP 26 -> lossy TC 1);
        # True: every start/reset also applies the operator's QoS fix (``operator_qos_fix``)
        self.operator_fix = operator_fix
        layouts = nic_layouts or ["sysfs", "debugfs"]
        for lay in layouts:
            if lay not in ("sysfs", "debugfs"):
                raise ConfigError(f"nic_layouts: {lay!r} is not sysfs|debugfs")
        if not 1 <= int(rails) <= 16:
            raise ConfigError(f"rails: {rails} is not 1..16 (NIC ports per host)")
        # rails > 1: a GPU host, one GPU and one NIC port (mlx5_<k>) per rail; rocesim models
        # the same rails (``nics_per_host``: host<i>/mlx5_<k>, one leaf port each)
        self.rails = int(rails)
        self.hosts_per_leaf = -(-hosts // len(switch_specs))
        self.topology: dict[str, Any] = {
            "kind": "leaf_spine", "leaves": len(switch_specs), "spines": spines,
            "hosts_per_leaf": self.hosts_per_leaf, "nics_per_host": self.rails,
            "nic_gbps": nic_gbps,
            "seed": seed, "background": list(background or [])}
        # buffer_bytes: switches whose buffer model is what their CONFIG_DB says, the SONiC
        # lossless pool this size at its stock dynamic_th, in the physics and in BUFFER_POOL /
        # BUFFER_PROFILE alike. None keeps the older stand-in: a stock SN2700 CONFIG_DB (4.58
        # MB, dynamic_th 0) over rocesim's own defaults (32 MiB, alpha 1/8), which the tests'
        # measured numbers were taken on.
        self.buffer_bytes = None if buffer_bytes is None else int(buffer_bytes)
        if self.buffer_bytes is not None:
            self.topology["buffer_bytes"] = self.buffer_bytes
            self.topology["pfc_alpha_log2"] = swmod.SN2700_PG_DYNAMIC_TH
        self._initial_background = list(background or [])
        self.targets: dict[str, Target] = {}
        for j, (name, platform) in enumerate(switch_specs):
            self.targets[name] = Target(name, "switch", f"{base_address}{2 + j}", platform)
        for i in range(hosts):
            self.targets[f"host{i}"] = Target(f"host{i}", "host", f"{base_address}{11 + i}",
                                              nic_layout=layouts[i % len(layouts)])
        self.bin_dir = self.root / "bin"
        self.keys_dir = self.root / "keys"
        self.run_dir = self.root / "run"
        self.client_key = self.keys_dir / "id_ed25519"
        self.known_hosts = self.root / "known_hosts"
        self.inventory_path = self.root / "inventory.yaml"
        self._started = False

    # -- lifecycle -------------------------------------------------------------------------
    def __enter__(self) -> EmulatedCluster:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self, timeout_s: float = 10.0) -> None:
        if not sshd_available():
            raise EmulatedClusterError(f"{SSHD} not found: install Debian's openssh-server")
        for d in (self.root, self.bin_dir, self.keys_dir, self.run_dir):
            d.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # sshd's privsep directory
        self._write_keys()
        self._write_tools()
        self._write_states()
        if self.operator_fix:
            self.operator_qos_fix()
        self._write_known_hosts()
        (self.root / "topology.json").write_text(json.dumps(self.topology, indent=1))
        self._write_inventory()
        self._started = True
        try:
            self._start_sshd(list(self.targets), timeout_s)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every sshd and session process of this cluster; files stay for post-mortem."""
        for name in self.targets:
            self._kill_listener(name)
        self._kill_env_processes()
        self._started = False

    def reset(self, *, operator_fix: bool | None = None) -> None:
        """Factory settings, zero counters, no faults; the sshd listeners keep running.
        ``operator_fix`` (default: the cluster's) then applies the operator's QoS fix."""
        self._write_states()
        if self.operator_fix if operator_fix is None else operator_fix:
            self.operator_qos_fix()
        self._write_refused_all()
        self.set_background(self._initial_background)
        for name in self.host_names:
            for leftover in (self.root / name).glob("perftest_*.json"):
                leftover.unlink(missing_ok=True)
            (self.root / name / "commands.jsonl").unlink(missing_ok=True)
        for leftover in (self.root / "traffic").glob("*.json"):
            leftover.unlink(missing_ok=True)
        for name, t in self.targets.items():
            self._clear_run(name)
            if (self.keys_dir / f"{name}_host_ed25519.orig").exists():
                self.restore_host_key(name)
            elif t.pid is None and self._started:
                self.start_target(name)

    # -- test hooks --------------------------------------------------------------------------
    def inject(self, target: str, **faults: Any) -> None:
        """Merge faults into ``<root>/<target>/faults.json`` (keys: ``state.FAULT_KEYS``)."""
        unknown = set(faults) - set(st.FAULT_KEYS)
        if unknown:
            raise ConfigError(
                f"unknown fault(s) {sorted(unknown)}; known: {sorted(st.FAULT_KEYS)}")
        tdir = self._tdir(target)
        with st.locked(tdir):
            current = st.load_faults(tdir)
            for key, value in faults.items():
                if isinstance(value, dict) and isinstance(current.get(key), dict):
                    current[key] = {**current[key], **value}
                else:
                    current[key] = value
            st.write_json(tdir / "faults.json", current)
            if set(faults) & set(st.RATE_FAULTS):
                st.start_fault_clock(tdir)
            self._write_refused(tdir, current)
            self._apply_link(tdir, bool(current.get("link_down")))
            self._apply_host_files(tdir, current)
            down = current.get("port_down") if "port_down" in faults else None
        if down is not None:  # both ends of a cable see it: the attached host's link goes down
            attached = st.load_state(tdir).get("hosts", {})
            for host, port in attached.items():
                self.inject(host, link_down=port in down)

    def set_background(self, background: list[dict[str, Any]]) -> None:
        """Traffic of "other tenants" in every later run (``rocesim.Background`` keyword
        dicts, e.g. ``{"pattern": "incast", "load": 0.3, "fan_in": 3}``)."""
        self.topology["background"] = list(background)
        (self.root / "topology.json").write_text(json.dumps(self.topology, indent=1))

    def set_qos(self, target: str, *, trust: str | None = None, pfc: list[int] | None = None,
                mtu: int | None = None) -> None:
        """Change a host's QoS/MTU behind the tuner's back (to make pre-flight checks fail)."""
        tdir = self._tdir(target)
        with st.locked(tdir):
            s = st.load_state(tdir)
            if s["kind"] != "host":
                raise ConfigError(f"set_qos: {target} is not a host")
            if trust is not None:
                s["qos"]["trust"] = trust
            if pfc is not None:
                if len(pfc) != 8:
                    raise ConfigError("set_qos: pfc needs 8 values (priorities 0..7)")
                s["qos"]["pfc"] = [int(bool(x)) for x in pfc]
            if mtu is not None:
                s["mtu"] = int(mtu)
                for view in hostmod.rail_views(s):
                    (tdir / f"sys/class/net/{view['netdev']}/mtu").write_text(f"{int(mtu)}\n")
            st.write_json(tdir / "state.json", s)

    def edit_state(self, target: str, change: Any) -> None:
        """Change a target's device state behind the tuner's back: ``change(state)`` edits the
        dict in place (e.g. bind a switch profile to an uplink, set ``cc_algorithm``)."""
        tdir = self._tdir(target)
        with st.locked(tdir):
            s = st.load_state(tdir)
            change(s)
            st.write_json(tdir / "state.json", s)

    def operator_qos_fix(self) -> list[str]:
        """The operator's QoS fix on every SONiC switch, running config and saved file alike
        (``sonic-db-cli CONFIG_DB HSET 'DSCP_TO_TC_MAP|AZURE' 26 3`` then ``config save
        -y``): stock ``qos_config.j2`` sends RoCE's DSCP 26 to lossy TC 1, and pre-flight
        refuses that. Returns the switches changed."""
        done = []
        for name in self.switch_names:
            if self.targets[name].platform == "sonic":
                def fix(s: dict[str, Any]) -> None:
                    swmod.operator_qos_fix(s["config_db"])
                    swmod.operator_qos_fix(s["saved_config_db"])

                self.edit_state(name, fix)
                done.append(name)
        return done

    def set_naming_mode(self, switch: str, mode: str) -> None:
        """What ``config interface_naming_mode <mode>`` leaves on SONiC switch ``switch`` until
        the next reset: its login exports ``SONIC_CLI_IFACE_MODE=<mode>`` (``~/.bashrc``), so a
        ``show`` that does not name its mode prints vendor aliases in ``alias`` mode."""
        if mode not in ("default", "alias"):
            raise ConfigError(f"{switch}: interface naming mode {mode!r} is not default or alias")
        if self.targets[switch].platform != "sonic":
            raise ConfigError(f"{switch}: interface naming mode on a "
                              f"{self.targets[switch].platform} switch")
        self.edit_state(switch, lambda s: s.update(iface_naming_mode=mode))

    def play_release(self, switch: str, release: str) -> None:
        """Make SONiC switch ``switch`` behave like ``release`` until the next reset: before
        202505 there is no ``show queue wredcounters``/``counterpoll wredqueue``, no
        FLEX_COUNTER_TABLE|WRED_ECN_QUEUE row and no STATE_DB QUEUE_COUNTER_CAPABILITIES."""
        if release not in swmod.SONIC_RELEASES:
            raise ConfigError(f"{switch}: sonic_release {release!r} is not one of "
                              f"{', '.join(swmod.SONIC_RELEASES)}")
        if self.targets[switch].platform != "sonic":
            raise ConfigError(f"{switch}: sonic_release on a {self.targets[switch].platform} "
                              "switch")

        def change(s: dict[str, Any]) -> None:
            s["sonic_release"] = release
            s["state_db"] = swmod.init_sonic_state_db(release)
            for db in (s["config_db"], s["saved_config_db"]):
                flex = db.setdefault("FLEX_COUNTER_TABLE", {})
                if not swmod.has_wred_ecn(release):
                    flex.pop("WRED_ECN_QUEUE", None)
                else:
                    flex.setdefault("WRED_ECN_QUEUE", {"FLEX_COUNTER_STATUS": "disable",
                                                       "POLL_INTERVAL": "10000"})

        self.edit_state(switch, change)

    def clear_faults(self, target: str) -> None:
        tdir = self._tdir(target)
        with st.locked(tdir):
            st.write_json(tdir / "faults.json", {})
            self._write_refused(tdir, {})
            self._apply_link(tdir, False)
            self._apply_host_files(tdir, {})

    def rotate_host_key(self, target: str) -> None:
        """New host key, sshd restarted: clients holding the old known_hosts must refuse it."""
        key = self.keys_dir / f"{target}_host_ed25519"
        self._kill_listener(target)
        for p in (key, key.with_name(key.name + ".pub")):
            orig = p.with_name(p.name + ".orig")
            if not orig.exists():
                p.rename(orig)
            p.unlink(missing_ok=True)
        _procs.keygen(key, comment=f"root@{target}-rotated").wait()
        os.chmod(key, 0o600)
        self._start_sshd([target], 10.0)

    def restore_host_key(self, target: str) -> None:
        """Undo :meth:`rotate_host_key` (the key in known_hosts is served again)."""
        key = self.keys_dir / f"{target}_host_ed25519"
        if not key.with_name(key.name + ".orig").exists():
            return
        self._kill_listener(target)
        for p in (key, key.with_name(key.name + ".pub")):
            p.with_name(p.name + ".orig").replace(p)
        self._start_sshd([target], 10.0)

    def stop_target(self, target: str) -> None:
        """Make a target unreachable (its sshd stops; the address refuses connections)."""
        self._kill_listener(target)
        self.kill_sessions(target)

    def start_target(self, target: str) -> None:
        self._start_sshd([target], 10.0)

    def reboot(self, target: str, *, keep_settings: bool = False) -> None:
        """The target restarts: its sshd and every process of it (dead-man timers, NVUE's
        confirm timer) die, its /run (a tmpfs) comes back empty, and the device settings come
        back the way the platform boots them (docs/real-cluster.md, "A target that reboots"):

        * SONiC: CONFIG_DB is loaded from the saved ``/etc/sonic/config_db.json``
          (``saved_config_db``; ``config save`` writes it, a runtime ``ecnconfig`` does not);
        * Cumulus NVUE: the startup revision (``/etc/nvue.d/startup.yaml``) is applied; with
          auto-save (the default since CL 5.9) a plain ``nv config apply`` had written it, an
          unconfirmed ``--confirm`` apply had not;
        * mlx5 host: the DCQCN files hold the firmware's values again (``factory_dcqcn``), then
          every enabled systemd unit under ``<root>/<host>/etc/systemd/system`` runs its
          ``ExecStart=`` lines (``ecntune promote --persist``'s boot unit).

        ``keep_settings``: the worst case -- every device comes back with what it held (a
        trial's values persisted somewhere ecntune cannot see)."""
        self.stop_target(target)
        for pid in _procs.pids_with_env(st.ENV_ROOT, str(self.root), ENV_DAEMON, target):
            _procs.kill(pid, signal.SIGKILL)
        self._clear_run(target)
        tdir = self._tdir(target)
        with st.locked(tdir):
            s = st.load_state(tdir)
            s.pop("confirm", None)  # the confirm timer died with the switch
            if not keep_settings and s.get("platform") == "sonic":
                s["config_db"] = st.json_copy(s["saved_config_db"])
            elif not keep_settings and s.get("platform") == "nvue":
                s["applied"] = st.json_copy(s["startup"])
                s["pending"] = st.json_copy(s["startup"])
            st.write_json(tdir / "state.json", s)
        if not keep_settings and s["kind"] == "host":
            hostmod.boot(tdir, s)
        self.start_target(target)

    def _clear_run(self, target: str) -> None:
        import shutil

        run = self._tdir(target) / "run"
        shutil.rmtree(run, ignore_errors=True)
        run.mkdir(mode=0o700)

    def kill_sessions(self, target: str) -> int:
        """Drop every open SSH connection (and its commands) of one target; returns how many
        processes were killed. A shell killed while it forks can leave a child that the scan
        before the kill did not see, so the scan repeats until two in a row find nothing new
        (at most 2 s)."""
        listener = self.targets[target].pid
        killed: set[int] = set()
        quiet = 0
        deadline = time.monotonic() + 2.0
        while quiet < 2 and time.monotonic() < deadline:
            found = set(_procs.pids_with_env(st.ENV_ROOT, str(self.root), st.ENV_NAME, target))
            found.update(_procs.descendants(listener) if listener else [])
            new = found - killed
            killed.update(_procs.kill_all(sorted(new)))
            quiet = 0 if new else quiet + 1
            time.sleep(0.02)
        return len(killed)

    # -- accessors ---------------------------------------------------------------------------
    def target_dir(self, target: str) -> Path:
        return self._tdir(target)

    def state(self, target: str) -> dict[str, Any]:
        return st.load_state(self._tdir(target))

    def commands(self, target: str, tool: str | None = None) -> list[list[str]]:
        """Argument lists ``mpirun``/``ib_write_lat``/``ib_write_bw`` ran with on ``target``
        (only ``tool``'s if given), oldest first, since the last ``reset``."""
        return [c["argv"] for c in st.read_commands(self._tdir(target))
                if tool is None or c["tool"] == tool]

    def env(self, target: str) -> dict[str, str]:
        """The environment an SSH session on ``target`` gets (to run stand-ins locally)."""
        return {**os.environ, st.ENV_ROOT: str(self.root), st.ENV_NAME: target,
                "PATH": f"{self.bin_dir}:/usr/bin:/bin",
                "BASH_ENV": str(self.root / "bashenv.sh")}

    @property
    def host_names(self) -> list[str]:
        return [t.name for t in self.targets.values() if t.kind == "host"]

    @property
    def switch_names(self) -> list[str]:
        return [t.name for t in self.targets.values() if t.kind == "switch"]

    # -- internals ---------------------------------------------------------------------------
    def _tdir(self, target: str) -> Path:
        if target not in self.targets:
            raise ConfigError(f"unknown emulated target {target!r}; have {sorted(self.targets)}")
        return self.root / target

    def _write_keys(self) -> None:
        procs = []
        if not self.client_key.exists():
            procs.append(_procs.keygen(self.client_key, comment="ecntune-emulated-client"))
        for name in self.targets:
            key = self.keys_dir / f"{name}_host_ed25519"
            if not key.exists():
                procs.append(_procs.keygen(key, comment=f"root@{name}"))
        for p in procs:
            if p.wait() != 0:
                err = p.stderr.read().decode(errors="replace") if p.stderr else ""
                raise EmulatedClusterError(f"ssh-keygen failed: {err}")
        for key in self.keys_dir.glob("*ed25519"):
            os.chmod(key, 0o600)  # sshd and ssh refuse group/world-readable private keys
        (self.keys_dir / "authorized_keys").write_text(
            self.client_key.with_name("id_ed25519.pub").read_text())

    def _write_known_hosts(self) -> None:
        lines = []
        for t in self.targets.values():
            pub = (self.keys_dir / f"{t.name}_host_ed25519.pub").read_text().split()
            host = t.address if self.port == 22 else f"[{t.address}]:{self.port}"
            lines.append(f"{host} {pub[0]} {pub[1]}")
        self.known_hosts.write_text("\n".join(lines) + "\n")

    def _write_tools(self) -> None:
        import importlib.util

        import tuner

        pkg_root = Path(tuner.__file__).resolve().parent.parent
        for command, spec in TOOLS.items():
            module, _, lead = spec.partition(" ")
            if importlib.util.find_spec(f"tuner.emulated.tools.{module}") is None:
                continue
            path = self.bin_dir / command
            path.write_text(
                "#!/bin/sh\n"
                f"PYTHONPATH='{pkg_root}'${{PYTHONPATH:+:$PYTHONPATH}} "
                f"exec '{sys.executable}' -m tuner.emulated.tools.{module} {lead} \"$@\"\n")
            path.chmod(0o755)
        (self.root / "bashenv.sh").write_text(BASHENV_SH)
        session = self.root / "session.sh"
        session.write_text(SESSION_SH)
        session.chmod(0o755)

    def _write_states(self) -> None:
        from rocesim.config import Topology  # the physics' uplink speed (not set here)
        from tuner.settings import KNOBS, NIC_KNOBS

        nic_defaults = {k: KNOBS[k].default for k in NIC_KNOBS}
        ecn = {k: KNOBS[k].default for k in ("kmin_bytes", "kmax_bytes", "pmax_percent")}
        switch_names = self.switch_names
        host_names = self.host_names
        uplinks = int(self.topology["spines"])
        for j, sw in enumerate(switch_names):
            t = self.targets[sw]
            mine = host_names[j * self.hosts_per_leaf:(j + 1) * self.hosts_per_leaf]
            ports_fn = swmod.sonic_ports if t.platform == "sonic" else swmod.nvue_ports
            g = self.rails  # one leaf port per rail, in rocesim's order (host-major)
            host_ports, up_ports = ports_fn(self.hosts_per_leaf * g, uplinks)
            state: dict[str, Any] = {
                "kind": "switch", "name": sw, "address": t.address, "platform": t.platform,
                "lossless_queue": 3,
                "wred_profile": "AZURE_LOSSLESS", "host_ports": host_ports[:len(mine) * g],
                "uplink_ports": up_ports,
                "hosts": dict(zip(mine, host_ports[::g], strict=False)),
                "rocesim_name": f"leaf{j}",
            }
            if t.platform == "sonic":
                ports = host_ports[:len(mine) * g] + up_ports
                speeds = {**dict.fromkeys(host_ports, int(self.topology["nic_gbps"]) * 1000),
                          **dict.fromkeys(up_ports, int(Topology.uplink_gbps) * 1000)}
                state["config_db"] = swmod.init_sonic(
                    ecn["kmin_bytes"], ecn["kmax_bytes"], ecn["pmax_percent"], ports, 3,
                    self.sonic_release, self.buffer_bytes or swmod.SN2700_POOL_BYTES,
                    {p: speeds[p] for p in ports})
                # what the HWSKU's qos.json.j2 renders (`config qos reload` writes it back)
                state["qos_template"] = swmod.qos_template_render(
                    ecn["kmin_bytes"], ecn["kmax_bytes"], ecn["pmax_percent"], ports, 3)
                state["sonic_release"] = self.sonic_release
                state["state_db"] = swmod.init_sonic_state_db(self.sonic_release)
                # /etc/sonic/config_db.json as booted (``config save`` replaces it)
                state["saved_config_db"] = json.loads(json.dumps(state["config_db"]))
            else:
                state.update(swmod.init_nvue(ecn["kmin_bytes"], ecn["kmax_bytes"],
                                             ecn["pmax_percent"], 3,
                                             swmod.twin_xoff(self.topology, f"leaf{j}")))
            t.extra = state
            self._init_dir(sw, state)
            for h, port in state["hosts"].items():
                self.targets[h].extra = {"leaf": sw, "switch_port": port}
        for i, h in enumerate(host_names):
            t = self.targets[h]
            state = {
                "kind": "host", "name": h, "address": t.address, "netdev": NETDEV,
                "rdma_device": RDMA_DEVICE,
                "rails": rail_specs(h, i, t.address, self.rails),
                "pci": PCI, "nic_layout": t.nic_layout, "mtu": 9000,
                "speed_mbps": int(self.topology["nic_gbps"]) * 1000,
                "firmware": "22.41.1000", "roce_priority": 3,
                "qos": {"dcbx": "Firmware controlled", "trust": "dscp",
                        "pfc": [0, 0, 0, 1, 0, 0, 0, 0]},
                "rocesim_nic": f"{h}/{RDMA_DEVICE}", "factory_dcqcn": nic_defaults,
                **t.extra,
            }
            self._init_dir(h, state)
            hostmod.init_host(self.root / h, state, nic_defaults)

    def _init_dir(self, name: str, state: dict[str, Any]) -> None:
        tdir = self.root / name
        tdir.mkdir(parents=True, exist_ok=True)
        st.write_json(tdir / "state.json", state)
        st.write_json(tdir / "counters.json", {})
        st.write_json(tdir / "faults.json", {})
        (tdir / "refused_writes").write_text("")
        (tdir / "run").mkdir(mode=0o700, exist_ok=True)  # the target's /run (dead-man timers)

    def _write_inventory(self) -> None:
        import yaml

        key = str(self.client_key)
        hosts = []
        for i, h in enumerate(self.host_names):
            t = self.targets[h]
            entry: dict[str, Any] = {
                "name": h, "address": t.address, "port": self.port, "user": "root",
                "key_file": key, "sudo": False, "netdev": NETDEV, "rdma_device": RDMA_DEVICE,
                "pci": PCI, "roce_priority": 3, "nic_layout": t.nic_layout,
                "sysfs_root": str(self.root / h),
                "nic_gbps": float(self.topology["nic_gbps"]), "leaf": t.extra["leaf"]}
            if self.rails > 1:  # the rails form: PCI addresses and GID indices from sysfs
                for f in ("netdev", "rdma_device", "pci"):
                    del entry[f]
                entry["rails"] = [{k: r[k] for k in ("rdma_device", "netdev", "data_address")}
                                  for r in rail_specs(h, i, t.address, self.rails)]
            hosts.append(entry)
        switches = []
        for s in self.switch_names:
            t = self.targets[s]
            sw = {"name": s, "address": t.address, "port": self.port, "user": "root",
                  "key_file": key, "platform": t.platform, "lossless_queue": 3,
                  "canary_ports": list(t.extra["host_ports"]), "other_ports": [],
                  "uplink_ports": list(t.extra["uplink_ports"])}
            if t.platform == "sonic":
                sw["wred_profile"] = "AZURE_LOSSLESS"
            else:  # NVUE shows no buffer pool: the inventory carries the rocesim leaf's
                pool, dynamic_th = swmod.twin_pool(self.topology, t.extra["rocesim_name"])
                sw.update(pfc_pool_bytes=pool, pfc_dynamic_th=dynamic_th)
            switches.append(sw)
        inv = {
            "ssh": {"known_hosts": str(self.known_hosts), "trust_on_first_use": False,
                    "connect_timeout_s": 5, "command_timeout_s": 60, "max_parallel": 8},
            "hosts": hosts,
            "switches": switches,
            "launcher": {
                "host": self.host_names[0], "nccl_tests_dir": str(self.bin_dir),
                "mpirun": "mpirun --allow-run-as-root -np {np} -H {hostlist}",
                "perftest_bin": "ib_write_lat",
                # stand-in probes listen within ~1 s even on a loaded 2-core machine
                "probe_start_s": 2.0,
                "nccl_env": {"NCCL_IB_HCA": RDMA_DEVICE, "NCCL_IB_TC": "106",
                             "NCCL_IB_TIMEOUT": "22"}},
        }
        if self.rails > 1:  # ecntune lists every rail in NCCL_IB_HCA; one GPU per rail
            inv["launcher"]["nccl_env"] = {"NCCL_IB_TIMEOUT": "22"}  # type: ignore[index]
            inv["launcher"]["gpus_per_host"] = self.rails  # type: ignore[index]
        self.inventory_path.write_text(
            "# generated by tuner.emulated (EmulatedCluster); agreed inventory schema\n"
            + yaml.safe_dump(inv, sort_keys=False))

    def _write_refused(self, tdir: Path, faults: dict[str, Any]) -> None:
        """Lines for the bash hook: relpath, value to restore, errno text."""
        state = st.load_state(tdir)
        lines = []
        for view in hostmod.rail_views(state) if state["kind"] == "host" else []:
            paths = hostmod.knob_relpaths(view)
            by_debugfs = {v: k for k, v in hostmod.DEBUGFS_NAME.items()}
            for knob, errno_name in (faults.get("refuse_write") or {}).items():
                sysname = by_debugfs.get(knob, knob)
                if sysname not in paths:
                    raise ConfigError(f"refuse_write: {knob!r} is not a knob of {tdir.name} "
                                      f"({state['nic_layout']} layout)")
                text = st.ERRNO_TEXT.get(str(errno_name), str(errno_name))
                value = (tdir / paths[sysname]).read_text().strip()
                lines.append(f"{tdir / paths[sysname]} {value} {text}")
        (tdir / "refused_writes").write_text("".join(f"{ln}\n" for ln in lines))

    def _write_refused_all(self) -> None:
        for name in self.targets:
            (self.root / name / "refused_writes").write_text("")

    def _apply_link(self, tdir: Path, down: bool) -> None:
        state = st.load_state(tdir)
        for view in hostmod.rail_views(state) if state["kind"] == "host" else []:
            (tdir / f"sys/class/net/{view['netdev']}/operstate").write_text(
                "down\n" if down else "up\n")

    def _apply_host_files(self, tdir: Path, faults: dict[str, Any]) -> None:
        state = st.load_state(tdir)
        if state["kind"] == "host":
            from tuner.emulated import hostdiag

            hostdiag.apply_faults(tdir, state, faults)

    def _config(self, t: Target) -> Path:
        cfg = self.run_dir / f"sshd_{t.name}.conf"
        env = " ".join(f'"{k}={v}"' for k, v in (
            (st.ENV_ROOT, str(self.root)), (st.ENV_NAME, t.name),
            ("PATH", f"{self.bin_dir}:/usr/bin:/bin"),
            ("BASH_ENV", str(self.root / "bashenv.sh")),
            ("ECNTUNE_DEADMAN_DIR", str(self.root / t.name / "run")),  # its own, as a tmpfs
            # sshd's login bash reads ~/.bashrc; the machine's root .bashrc costs ~200 ms
            # (pyenv init) per command. HOME here keeps sessions independent of it.
            ("HOME", str(self.run_dir))))
        cfg.write_text("\n".join([
            f"ListenAddress {t.address}:{self.port}",
            f"HostKey {self.keys_dir / (t.name + '_host_ed25519')}",
            f"AuthorizedKeysFile {self.keys_dir / 'authorized_keys'}",
            f"PidFile {self.run_dir / (t.name + '.pid')}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "PrintMotd no",
            "PrintLastLog no",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "PermitUserEnvironment no",
            "Subsystem sftp /usr/lib/openssh/sftp-server",
            f"ForceCommand {self.root / 'session.sh'}",
            "LogLevel ERROR",
            f"SetEnv {env}",
            "",
        ]))
        return cfg

    def _start_sshd(self, names: list[str], timeout_s: float) -> None:
        procs = []
        for name in names:
            t = self.targets[name]
            (self.run_dir / f"{name}.pid").unlink(missing_ok=True)
            cfg = self._config(t)
            procs.append((t, subprocess.Popen(
                [SSHD, "-f", str(cfg), "-E", str(self.run_dir / f"sshd_{name}.log")],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)))
        for t, p in procs:
            out, err = p.communicate(timeout=timeout_s)
            if p.returncode != 0:
                log = (self.run_dir / f"sshd_{t.name}.log")
                detail = (err or out).decode(errors="replace").strip()
                if log.exists():
                    detail += " " + log.read_text().strip()
                raise EmulatedClusterError(
                    f"sshd for {t.name} ({t.address}:{self.port}) failed: {detail}")
        deadline = time.monotonic() + timeout_s
        for t, _ in procs:
            self._wait_ready(t, deadline)

    def _wait_ready(self, t: Target, deadline: float) -> None:
        pidfile = self.run_dir / f"{t.name}.pid"
        last = "no pidfile"
        while time.monotonic() < deadline:
            try:
                t.pid = int(pidfile.read_text().strip())
                with socket.create_connection((t.address, self.port), timeout=1.0) as s:
                    if s.recv(64).startswith(b"SSH-2.0-"):
                        return
            except (OSError, ValueError) as e:
                last = str(e)
            time.sleep(0.01)
        log = self.run_dir / f"sshd_{t.name}.log"
        raise EmulatedClusterError(
            f"sshd for {t.name} not ready on {t.address}:{self.port}: {last}; "
            f"{log.read_text().strip() if log.exists() else ''}")

    def _kill_listener(self, name: str) -> None:
        pidfile = self.run_dir / f"{name}.pid"
        pid = self.targets[name].pid
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            pass
        if pid is None:
            return
        if _procs.is_sshd(pid):
            sessions = _procs.descendants(pid)
            _procs.kill(pid, signal.SIGTERM)
            for child in sessions:  # open connections die with the "machine"
                _procs.kill(child, signal.SIGKILL)
            _procs.wait_gone(pid, 3.0)
        pidfile.unlink(missing_ok=True)
        self.targets[name].pid = None

    def _kill_env_processes(self) -> None:
        for _ in range(3):
            pids = _procs.pids_with_env(st.ENV_ROOT, str(self.root))
            if not pids:
                return
            for pid in pids:
                _procs.kill(pid, signal.SIGKILL)
            for pid in pids:
                _procs.wait_gone(pid, 2.0)
