"""Persistence, the way each platform expects it, verified by reading the persistent source.

Runtime writes do not survive a reboot everywhere: mlx5 DCQCN values written to sysfs/debugfs
are gone at boot (the firmware starts from its NVCONFIG), while switch CLIs change the running
configuration until it is saved. Per platform:

* mlx5 host, ``boot-unit`` (default): a systemd oneshot unit ``ecntune-dcqcn-<netdev>.service``
  whose ``ExecStart=`` lines write each DCQCN value to the same files the driver writes, enabled
  for ``multi-user.target``; read back: the unit file (parsed back to settings) and
  ``systemctl is-enabled``;
* mlx5 host, ``mlxconfig``: the NIC's non-volatile configuration, ``mlxconfig -d <pci> -y set
  RPG_TIME_RESET_P1=150 ...`` (mstflint names, INDEX.md section 2: the knob name upper-cased plus
  ``_P<port>``); takes effect after a firmware reset or reboot; read back: ``mlxconfig -d <pci>
  query ...`` (the Next Boot column);
* SONiC: ``config save -y`` (running CONFIG_DB to ``/etc/sonic/config_db.json``); read back:
  ``sonic-cfggen -j /etc/sonic/config_db.json --print-data`` (the saved file: the profile bound
  to the canary queues there);
* Cumulus NVUE: ``nv config save`` (applied revision to ``/etc/nvue.d/startup.yaml``); read back:
  ``nv config show -r startup -o json`` (the canary ports' profile in the startup revision).

Every class is pure (commands from settings, settings from output); ``persist`` runs them
through a driver's connection and compares what the persistent source holds with what was
asked. A host's ``sysfs_root`` prefixes the unit's paths too (the emulated cluster's fake tree).
"""

from __future__ import annotations

import json
import re
import shlex
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, Literal

from tuner.errors import ApplyError
from tuner.settings import NIC_KNOBS, DcqcnSettings, EcnSettings
from tuner.ssh.shell import check, q

if TYPE_CHECKING:
    from tuner.drivers._mlx5 import Mlx5Driver
    from tuner.drivers.base import Driver, Runner
    from tuner.drivers.nvue import NvueDriver
    from tuner.drivers.sonic import SonicDriver

HostMethod = Literal["boot-unit", "mlxconfig"]
MARK = "==ecntune:persist=="
SONIC_CONFIG = "/etc/sonic/config_db.json"


def systemd_escape(name: str) -> str:
    """Unit-name escaping of one path component (``systemd-escape``): bytes outside
    ``[A-Za-z0-9:_.]`` and a leading ``.`` become ``\\xNN``."""
    out = []
    for i, ch in enumerate(name):
        if (ch.isascii() and (ch.isalnum() or ch in ":_.")) and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"\\x{b:02x}" for b in ch.encode())
    return "".join(out)


class Persistence(ABC):
    """How one target's settings are made to survive a reboot."""

    method = ""

    def __init__(self, driver: Driver[Any]) -> None:
        self.driver = driver
        self.target = driver.target

    @abstractmethod
    def save_commands(self, settings: Any) -> list[str]:
        """Commands that make ``settings`` the boot-time configuration (run in order)."""

    @abstractmethod
    def read_command(self) -> str:
        """One command printing the persistent source."""

    @abstractmethod
    def parse(self, text: str) -> Any:
        """Settings held by the persistent source; raises ``ApplyError`` when unreadable."""

    def guard(self, runner: Runner) -> None:  # noqa: B027 -- most saves persist only ours
        """Refuse before saving when the save would persist more than ecntune's change."""


class BootUnit(Persistence):
    """A systemd oneshot unit that re-writes the DCQCN files at boot."""

    method = "boot-unit"
    driver: Mlx5Driver

    @property
    def unit(self) -> str:
        return f"ecntune-dcqcn-{check('netdev', self.driver.host.netdev)}.service"

    @property
    def root(self) -> str:
        return self.driver.host.sysfs_root.rstrip("/")

    @property
    def unit_path(self) -> str:
        return self.driver.host.sys_path(f"/etc/systemd/system/{self.unit}")

    def _systemctl(self) -> str:
        return f"systemctl --root={q('path', self.root)}" if self.root else "systemctl"

    def unit_text(self, settings: DcqcnSettings) -> str:
        h, drv = self.driver.host, self.driver
        folder = check("path", drv.folder())
        if drv.layout == "sysfs":
            dev = systemd_escape(f"sys-subsystem-net-devices-{h.netdev}") + ".device"
            order = [f"After={dev}", f"BindsTo={dev}"]
        else:  # debugfs must be mounted, and the files are root-only
            order = ["After=sys-kernel-debug.mount", "RequiresMountsFor=/sys/kernel/debug"]
        values = settings.model_dump()
        lines = [
            "# Written by ecntune: DCQCN values do not survive a reboot on their own.",
            "[Unit]",
            f"Description=ecntune: re-apply DCQCN to {h.netdev} ({drv.layout}) at boot",
            *order,
            "",
            "[Service]",
            "Type=oneshot",
            "RemainAfterExit=yes",
            *(f"ExecStart=/bin/sh -c 'echo {int(values[k])} > {folder}/{drv.names[k]}'"
              for k in NIC_KNOBS),
            "",
            "[Install]",
            "WantedBy=multi-user.target",
        ]
        return "\n".join(lines) + "\n"

    def save_commands(self, settings: DcqcnSettings) -> list[str]:
        path = q("path", self.unit_path)
        body = " ".join(shlex.quote(ln) for ln in self.unit_text(settings).splitlines())
        enable = f"{self._systemctl()} enable {shlex.quote(self.unit)}"
        if not self.root:
            enable = f"systemctl daemon-reload && {enable}"
        return [f"mkdir -p {shlex.quote(self.unit_path.rsplit('/', 1)[0])}",
                f"printf '%s\\n' {body} > {path}.tmp && mv {path}.tmp {path}", enable]

    def read_command(self) -> str:
        path = q("path", self.unit_path)
        return (f"if [ -e {path} ]; then cat {path}; fi && echo {shlex.quote(MARK)} && "
                f"({self._systemctl()} is-enabled {shlex.quote(self.unit)} 2>&1 || true)")

    def parse(self, text: str) -> DcqcnSettings:
        unit, _, state = text.partition(f"{MARK}\n")
        if not unit.strip():
            raise ApplyError(f"{self.target}: no boot unit at {self.unit_path}")
        if state.strip() != "enabled":
            raise ApplyError(f"{self.target}: {self.unit} is not enabled "
                             f"(systemctl is-enabled: {state.strip() or 'no answer'})")
        by_file = {f"{self.driver.folder()}/{v}": k for k, v in self.driver.names.items()}
        found: dict[str, int] = {}
        for m in re.finditer(r"^ExecStart=/bin/sh -c 'echo (\d+) > (\S+)'$", unit, re.M):
            knob = by_file.get(m.group(2))
            if knob is None:
                raise ApplyError(f"{self.target}: {self.unit} writes {m.group(2)}, which is "
                                 f"not a DCQCN file of this host")
            found[knob] = int(m.group(1))
        missing = sorted(set(NIC_KNOBS) - set(found))
        if missing:
            raise ApplyError(f"{self.target}: {self.unit_path} does not set {missing}")
        return DcqcnSettings(**found)


class Mlxconfig(Persistence):
    """The NIC's NVCONFIG through mlxconfig (mstflint's mstconfig takes the same syntax)."""

    method = "mlxconfig"
    driver: Mlx5Driver

    def _params(self) -> dict[str, str]:
        port = int(self.driver.host.rdma_port)
        return {k: f"{k.upper()}_P{port}" for k in NIC_KNOBS}

    def save_commands(self, settings: DcqcnSettings) -> list[str]:
        values = settings.model_dump()
        sets = " ".join(f"{p}={int(values[k])}" for k, p in self._params().items())
        return [f"mlxconfig -d {q('pci', self.driver.host.pci)} -y set {sets}"]

    def read_command(self) -> str:
        return (f"mlxconfig -d {q('pci', self.driver.host.pci)} query "
                + " ".join(self._params().values()))

    def parse(self, text: str) -> DcqcnSettings:
        from objectives.parsers import parse_mlxconfig_query

        try:
            dev = parse_mlxconfig_query(text).devices[0]
            return DcqcnSettings(**{k: int(dev.value(p))  # type: ignore[arg-type]
                                    for k, p in self._params().items()})
        except (KeyError, ValueError, TypeError) as exc:
            raise ApplyError(f"{self.target}: mlxconfig query lacks a DCQCN value: "
                             f"{exc}") from None


class _SwitchSave(Persistence):
    """A switch whose running configuration is saved by one command."""

    save = ""

    def save_commands(self, settings: EcnSettings) -> list[str]:
        return [self.save]


class SonicSave(_SwitchSave):
    """The saved ``config_db.json``: the profile bound to the canary ports' lossless queue
    there (the driver's ``ECNTUNE_CANARY`` clone, or the original) and its green values."""

    method = "config-save"
    save = "config save -y"
    driver: SonicDriver

    def read_command(self) -> str:
        return f"sonic-cfggen -j {SONIC_CONFIG} --print-data"

    def ours(self) -> set[tuple[str, str]]:
        """The CONFIG_DB entries a study writes: the canary WRED profile and the canary ports'
        lossless-queue bindings."""
        queue = int(self.driver.switch.lossless_queue)
        return {("WRED_PROFILE", self.driver.canary),
                *(("QUEUE", f"{p}|{queue}") for p in self.driver.switch.canary_ports)}

    def guard(self, runner: Runner) -> None:
        """``config save`` writes all of the running CONFIG_DB, other people's unsaved
        changes included: refuse unless running and saved differ only in ``ours``."""
        res = runner.run(f"sonic-cfggen -d --print-data && echo {shlex.quote(MARK)} && "
                         f"{self.read_command()}")
        running, _, saved = res.stdout.partition(f"{MARK}\n")
        try:
            foreign = unsaved_changes(json.loads(running), json.loads(saved), self.ours())
        except ValueError as exc:
            raise ApplyError(f"{self.target}: cannot compare the running and the saved "
                             f"configuration: {exc}") from None
        if foreign:
            more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
            raise ApplyError(
                f"{self.target}: the running configuration holds unsaved changes that are not "
                f"ecntune's: {'; '.join(foreign[:5])}{more}. `config save` would persist them "
                f"too: save or revert them first, then promote again")

    def parse(self, text: str) -> EcnSettings:
        from tuner.drivers.sonic import _settings

        try:
            db = json.loads(text)
            used = set(self.driver.bound_profiles(db.get("QUEUE", {})).values())
            if len(used) != 1 or None in used:
                raise ValueError(f"canary queues use {sorted(map(str, used))}")
            name = str(used.pop())
            return _settings(self.target, name, db["WRED_PROFILE"][name])
        except (ValueError, KeyError, TypeError, ApplyError) as exc:
            raise ApplyError(f"{self.target}: {SONIC_CONFIG} has no usable WRED profile for "
                             f"the canary queues: {exc}") from None


class NvueSave(_SwitchSave):
    """The startup revision: the congestion-control profile of the canary ports there (the
    driver's own profile, or ``default-global``) and its RoCE traffic class."""

    method = "nv-config-save"
    save = "nv config save"
    driver: NvueDriver

    def read_command(self) -> str:
        return "nv config show -r startup -o json"

    def parse(self, text: str) -> EcnSettings:
        from tuner.drivers.nvue import GLOBAL, applied_tree, port_profiles, settings_of, tc_values

        tree = applied_tree(text)
        bound = port_profiles(tree)
        names = {bound.get(p, GLOBAL) for p in self.driver.switch.canary_ports}
        row = tc_values(tree, names.pop(), self.driver.tc) if len(names) == 1 else None
        if row is None:
            raise ApplyError(f"{self.target}: the startup configuration has no single "
                             "congestion-control profile on the canary ports")
        return settings_of(self.target, row)


def unsaved_changes(running: dict[str, Any], saved: dict[str, Any],
                    ours: set[tuple[str, str]]) -> list[str]:
    """Every ``TABLE|key`` that differs between two CONFIG_DB dumps, except ``ours``.

    Example: ``["PORT|Ethernet8: mtu 9100 -> 1500", "VLAN|Vlan20: added"]``.
    """
    out = []
    for table in sorted(set(running) | set(saved)):
        now, then = running.get(table) or {}, saved.get(table) or {}
        if not isinstance(now, dict) or not isinstance(then, dict):
            raise ValueError(f"table {table} is not a mapping")
        for key in sorted(set(now) | set(then)):
            if (table, key) in ours or now.get(key) == then.get(key):
                continue
            if key not in then:
                out.append(f"{table}|{key}: added")
            elif key not in now:
                out.append(f"{table}|{key}: removed")
            else:
                a, b = then[key], now[key]
                fields = sorted(set(a) | set(b)) if isinstance(a, dict) and isinstance(
                    b, dict) else []
                what = ", ".join(f"{f} {a.get(f, '(unset)')} -> {b.get(f, '(unset)')}"
                                 for f in fields if a.get(f) != b.get(f)) or "changed"
                out.append(f"{table}|{key}: {what}")
    return out


def persistence_for(driver: Driver[Any], host_method: HostMethod = "boot-unit") -> Persistence:
    from tuner.drivers._mlx5 import Mlx5Driver
    from tuner.drivers.nvue import NvueDriver
    from tuner.drivers.sonic import SonicDriver

    if isinstance(driver, Mlx5Driver):
        return BootUnit(driver) if host_method == "boot-unit" else Mlxconfig(driver)
    if isinstance(driver, SonicDriver):
        return SonicSave(driver)
    if isinstance(driver, NvueDriver):
        return NvueSave(driver)
    raise ApplyError(f"{driver.target}: no persistence method for {type(driver).__name__}")


def read_persistent(p: Persistence) -> Any:
    """What the persistent source holds now (read-only)."""
    runner: Runner = p.driver.runner
    return p.parse(runner.run(p.read_command()).stdout)


def persist(p: Persistence, settings: Any) -> Any:
    """Save ``settings`` as the boot-time configuration and verify it from the saved source.

    Raises ``ApplyError`` naming the target when a command fails or the saved source holds
    something else; returns what the source holds.
    """
    runner: Runner = p.driver.runner
    p.guard(runner)
    for cmd in p.save_commands(settings):
        res = runner.run(cmd, check=False)
        if res.status != 0:
            tail = " | ".join(res.stderr.strip().splitlines()[-2:]) or "(no stderr)"
            raise ApplyError(f"{p.target}: persisting ({p.method}) failed at "
                             f"`{cmd[:80]}`: {tail}")
    saved = read_persistent(p)
    if saved != settings:
        diff = {k: (v, getattr(saved, k)) for k, v in settings.model_dump().items()
                if getattr(saved, k) != v}
        raise ApplyError(f"{p.target}: the saved configuration differs from what was "
                         f"persisted (wanted, saved): {diff}")
    return saved
