"""The inventory: which hosts and switches the SSH backend touches, and how.

Part of an experiment file (``fabric: {backend: ssh, inventory: {...}}``) or a separate YAML file
(``inventory_file: path``). Every name that reaches a remote shell (interfaces, devices, ports,
paths, environment) is checked here against a strict pattern (``tuner.ssh.shell.PATTERNS``) and
checked again where commands are built. Errors name the inventory entry:
``hosts[2] (host2).netdev: 'eth0;rm' does not match ...``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from tuner.errors import ConfigError
from tuner.ssh.shell import PATTERNS

_STRICT = ConfigDict(frozen=True, extra="forbid")

# launcher.nccl_env: the variables the ranks may be given (docs/real-cluster.md). Anything else
# (LD_PRELOAD, PATH, BASH_ENV, PYTHONPATH ...) can make the launcher run code of the file's
# author's choosing.
ENV_PREFIXES = ("NCCL_", "UCX_", "OMPI_")
ENV_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",
                       "CUDA_DEVICE_MAX_CONNECTIONS", "HCOLL_ENABLE_MCAST_ALL",
                       "SHARP_COLL_ENABLE_SAT"})
# Variables within those prefixes that load a shared object of the file author's choosing into
# every rank (red team L1): refused unless launcher.trusted_env names them.
PLUGIN_ENV = frozenset({"NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN",
                        "NCCL_ENV_PLUGIN", "UCX_MODULE_DIR"})
LAUNCHERS = frozenset({"mpirun", "srun"})  # the first word of launcher.mpirun


def _template_env(words: list[str]) -> list[str]:
    """Environment names a launcher template passes to the ranks: ``-x NAME[=v]`` (mpirun),
    ``--export=NAME=v,...`` (srun), and any bare ``NAME=value`` word."""
    names: list[str] = []
    for prev, w in zip(["", *words], words, strict=False):
        if prev in ("-x", "--x"):
            names.append(w.split("=", 1)[0])
        elif w.startswith("--export="):
            names += [x.split("=", 1)[0] for x in w.removeprefix("--export=").split(",")
                      if x not in ("ALL", "NONE", "NIL")]
        elif "=" in w and not w.startswith("-"):
            names.append(w.split("=", 1)[0])
    return names


def _check_env_name(field: str, name: str, trusted: list[str]) -> None:
    if not name.startswith(ENV_PREFIXES) and name not in ENV_NAMES:
        raise ValueError(
            f"{field}: {name!r} is not an NCCL/UCX/Open MPI variable: only names starting with "
            f"{', '.join(ENV_PREFIXES)} or one of {', '.join(sorted(ENV_NAMES))} are "
            "passed to the ranks (LD_PRELOAD, PATH, BASH_ENV... would run code)")
    if name in PLUGIN_ENV and name not in trusted:
        raise ValueError(
            f"{field}: {name} loads a plugin library into every rank; refused unless "
            f"launcher.trusted_env lists it (trusted_env: [{name}]) and the path is one only "
            "root can write")


def _pattern(kind: str, value: str) -> str:
    if not PATTERNS[kind].fullmatch(value) or ".." in value.split("/"):
        raise ValueError(f"{value!r} does not match {PATTERNS[kind].pattern}")
    return value


class SshOptions(BaseModel):
    """How to connect: host-key policy, timeouts, and the handshake cap per fan-out."""

    model_config = _STRICT
    known_hosts: str = "~/.ssh/known_hosts"
    trust_on_first_use: bool = False
    connect_timeout_s: float = Field(default=10.0, gt=0, le=300)
    command_timeout_s: float = Field(default=120.0, gt=0, le=86_400)
    max_parallel: int = Field(default=8, ge=1, le=256)
    connect_retries: int = Field(default=3, ge=1, le=20)
    retry_backoff_s: float = Field(default=0.5, ge=0, le=60)
    fanout_workers: int = Field(default=32, ge=1, le=256)


class _Target(BaseModel):
    model_config = _STRICT
    name: str
    address: str
    port: int = Field(default=22, ge=1, le=65535)
    user: str = "root"
    key_file: str | None = None  # None => SSH agent
    key_passphrase: SecretStr | None = None
    password: SecretStr | None = None
    sudo: bool = False  # True => every command runs under `sudo -n`

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _pattern("rdma_device", v)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        return _pattern("host", v)

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        return _pattern("user", v)


class Rail(BaseModel):
    """One RoCE NIC port of a host with several (a GPU host's rails): its RDMA device, the
    netdev of that device, the rail's data address and (optionally; read from sysfs when
    absent) its PCI address."""

    model_config = _STRICT
    rdma_device: str
    netdev: str
    data_address: str
    pci: str | None = None
    # perftest -x for this rail; unset: the RoCE v2 GID of data_address, read from sysfs
    gid_index: int | None = Field(default=None, ge=0, le=255)
    # the leaf switch this rail's port connects to (rail-optimised fabrics: rail k on leaf k);
    # unset: the host's ``leaf``
    leaf: str | None = None

    @field_validator("leaf")
    @classmethod
    def _leaf(cls, v: str | None) -> str | None:
        return None if v is None else _pattern("rdma_device", v)

    @field_validator("rdma_device")
    @classmethod
    def _rdma(cls, v: str) -> str:
        return _pattern("rdma_device", v)

    @field_validator("netdev")
    @classmethod
    def _netdev(cls, v: str) -> str:
        return _pattern("netdev", v)

    @field_validator("data_address")
    @classmethod
    def _addr(cls, v: str) -> str:
        return _pattern("host", v)

    @field_validator("pci")
    @classmethod
    def _pci(cls, v: str | None) -> str | None:
        return None if v is None else _pattern("pci", v)


# The per-NIC fields a rail overrides; with ``rails`` they come from the first rail.
RAIL_FIELDS = ("rdma_device", "netdev", "data_address", "pci")


class HostEntry(_Target):
    """A canary host: one RoCE NIC port (mlx5) given inline, or several as ``rails``."""

    netdev: str
    rdma_device: str
    rdma_port: int = Field(default=1, ge=1, le=2)
    pci: str = ""  # "" only with rails whose first rail leaves it to sysfs
    rails: list[Rail] = Field(default_factory=list)
    roce_priority: int = Field(default=3, ge=0, le=7)
    nic_layout: Literal["auto", "sysfs", "debugfs"] = "auto"
    sysfs_root: str = "/"
    # perftest -x / NCCL_IB_GID_INDEX; unset: the RoCE v2 GID of the data address, from sysfs
    gid_index: int = Field(default=3, ge=0, le=255)
    data_address: str | None = None  # address perftest clients use (default: address)
    mpi_host: str | None = None  # name mpirun uses for this host (default: address)
    # The leaf switch the host's NIC ports connect to (a switch of this inventory, or one
    # outside the canary): pre-flight derives the congestion points the canary crosses from it.
    leaf: str | None = None
    # Line rate of the port (Gb/s): bounds the DCQCN rate knobs and normalises busbw. Required:
    # without it every rate check would be against 0.
    nic_gbps: float = Field(gt=0, le=1600)

    @field_validator("netdev")
    @classmethod
    def _netdev(cls, v: str) -> str:
        return _pattern("netdev", v)

    @field_validator("rdma_device")
    @classmethod
    def _rdma(cls, v: str) -> str:
        return _pattern("rdma_device", v)

    @field_validator("pci")
    @classmethod
    def _pci(cls, v: str) -> str:
        return v if v == "" else _pattern("pci", v)

    @model_validator(mode="before")
    @classmethod
    def _first_rail(cls, data: Any) -> Any:
        """With ``rails``, the host-level NIC fields are the first rail's (given or not)."""
        if not isinstance(data, dict) or not data.get("rails"):
            return data
        first = data["rails"][0]
        if not isinstance(first, dict):
            return data
        out = dict(data)
        for f in RAIL_FIELDS:
            if first.get(f) is not None:
                out.setdefault(f, first[f])
        return out

    @model_validator(mode="after")
    def _rails_agree(self) -> HostEntry:
        if not self.rails:
            if not self.pci:
                raise ValueError("pci: required for a host without rails")
            return self
        first = self.rails[0]
        for f in RAIL_FIELDS:
            mine, theirs = getattr(self, f), getattr(first, f)
            if theirs is not None and mine != theirs:
                raise ValueError(f"{f}: {mine!r} disagrees with rails[0].{f} {theirs!r} "
                                 "(with rails, leave the host-level NIC fields out)")
        for key in ("rdma_device", "netdev", "data_address"):
            seen = [getattr(r, key) for r in self.rails]
            dup = sorted({v for v in seen if seen.count(v) > 1})
            if dup:
                raise ValueError(f"rails: {key} {', '.join(dup)} listed twice")
        return self

    def rail_entries(self) -> list[HostEntry]:
        """One entry per NIC port: the host itself without rails, else a copy per rail with
        that rail's device, netdev, data address and PCI address (every driver, counter read
        and probe works on one of these)."""
        if not self.rails:
            return [self]
        out = []
        for r in self.rails:
            update: dict[str, Any] = {"rdma_device": r.rdma_device, "netdev": r.netdev,
                                      "data_address": r.data_address, "pci": r.pci or "",
                                      "leaf": r.leaf or self.leaf, "rails": []}
            if r.gid_index is not None:
                update["gid_index"] = r.gid_index
            out.append(self.model_copy(update=update))
        return out

    def gid_fixed(self) -> bool:
        """Whether the inventory gives the GID index (else it is read from sysfs)."""
        return "gid_index" in self.model_fields_set

    @field_validator("sysfs_root")
    @classmethod
    def _root(cls, v: str) -> str:
        return _pattern("path", os.path.expandvars(v))

    @field_validator("data_address", "mpi_host")
    @classmethod
    def _opt_host(cls, v: str | None) -> str | None:
        return None if v is None else _pattern("host", v)

    @field_validator("leaf")
    @classmethod
    def _leaf(cls, v: str | None) -> str | None:
        return None if v is None else _pattern("rdma_device", v)

    @property
    def nic(self) -> str:
        """The NIC target name used in Settings and Counters: ``host0/mlx5_0``."""
        return f"{self.name}/{self.rdma_device}"

    def sys_path(self, path: str) -> str:
        """``path`` (absolute, under /sys) below this host's ``sysfs_root``."""
        root = self.sysfs_root.rstrip("/")
        return f"{root}{path}" if root else path


class SwitchEntry(_Target):
    """A canary switch: its platform, the lossless queue and the ports that face hosts."""

    platform: Literal["sonic", "nvue"]
    lossless_queue: int = Field(default=3, ge=0, le=7)
    wred_profile: str = "AZURE_LOSSLESS"  # SONiC: the profile the canary ports use today
    # The object ecntune writes, bound to the canary ports only (SONiC WRED profile cloned from
    # wred_profile; NVUE congestion-control profile, Cumulus Linux >= 5.4).
    canary_profile: str = "ECNTUNE_CANARY"
    canary_ports: list[str] = Field(min_length=1)
    other_ports: list[str] = Field(default_factory=list)
    # Where the switch sits: a leaf (hosts below it; ``uplink_ports`` face the spines, any
    # other canary port faces hosts) or a spine (its canary ports face leaves). Pre-flight
    # tells from these which tuned ports the canary's traffic crosses (safety.coverage).
    role: Literal["leaf", "spine"] = "leaf"
    uplink_ports: list[str] = Field(default_factory=list)
    # ECN-before-PFC inputs when the switch's buffer configuration does not give them (NVUE;
    # SONiC's dynamic buffer model): the lossless PG's shared pool and its dynamic_th (alpha
    # = 2**dynamic_th), and the fewest ingress ports that congest one egress queue (2 with one
    # link speed, 1 where a faster uplink feeds a host port). See safety.limits.PfcThreshold.
    pfc_pool_bytes: int = Field(default=0, ge=0)
    pfc_dynamic_th: int = Field(default=0, ge=-8, le=8)
    incast_fan_in: int = Field(default=2, ge=1, le=1024)
    # `promote` changes this switch only while it is out of production (SONiC TSA, Cumulus
    # maintenance mode): tuner.lifecycle.maintenance.
    promote_in_maintenance: bool = False

    @model_validator(mode="before")
    @classmethod
    def _no_xoff(cls, data: Any) -> Any:
        # xoff_bytes (PG headroom) used to bound Kmax; it bounds no ECN threshold (issue #22)
        if isinstance(data, dict) and "xoff_bytes" in data:
            raise ValueError("xoff_bytes is no longer read (PG xoff is headroom, not the PFC "
                             "trigger): give pfc_pool_bytes and pfc_dynamic_th if the switch's "
                             "buffer configuration cannot be read, else drop it")
        return data

    @field_validator("wred_profile", "canary_profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        return _pattern("wred_profile", v)

    @field_validator("canary_ports", "other_ports", "uplink_ports")
    @classmethod
    def _ports(cls, v: list[str]) -> list[str]:
        return [_pattern("switch_port", p) for p in v]

    @model_validator(mode="after")
    def _spine_has_no_uplinks(self) -> SwitchEntry:
        if self.role == "spine" and self.uplink_ports:
            raise ValueError("uplink_ports: a spine's canary ports face the leaves; uplink_ports "
                             "are for a leaf")
        return self


class Launcher(BaseModel):
    """Where and how measurements start: the mpirun/srun template, binaries, NCCL environment."""

    model_config = _STRICT
    host: str
    nccl_tests_dir: str = "/opt/nccl-tests/build"
    mpirun: str = "mpirun --allow-run-as-root -np {np} -H {hostlist}"
    perftest_bin: str = "ib_write_lat"
    bw_bin: str = "ib_write_bw"  # perftest bandwidth tool for background parts
    nccl_env: dict[str, str] = Field(default_factory=dict)
    trusted_env: list[str] = Field(default_factory=list)  # PLUGIN_ENV names the site vouches for
    # nccl_tests_dir, listed here when the site vouches for binaries other accounts could
    # change (pre-flight refuses them otherwise: tuner.ssh.exec_trust)
    trusted_dirs: list[str] = Field(default_factory=list)
    gpus_per_host: int = Field(default=1, ge=1, le=64)
    warmup_iters: int = Field(default=2, ge=0, le=1000)
    latency_hosts: list[str] = Field(default_factory=list)  # probe pairs among these (default all)
    perftest_iterations: int = Field(default=5000, ge=10, le=10_000_000)  # samples per pair
    roce_tos: int = Field(default=106, ge=0, le=255)  # perftest --tclass (DSCP 26 + ECT0)
    # ToS of background parts with `priority: other`; unset, such parts are refused.
    other_tos: int | None = Field(default=None, ge=0, le=255)
    # nccl-tests -N: result rows (cycles) of the measured pass; the probe starts after the first.
    nccl_cycles: int = Field(default=8, ge=3, le=1000)
    # Share of probe samples that must fall while every collective ran, else failed:measurement.
    min_probe_overlap: float = Field(default=0.9, ge=0, le=1)
    # Extra seconds after the first result row before the probe starts.
    probe_delay_s: float = Field(default=0.0, ge=0, le=600)
    # Seconds the measured pass allows for starting the probe pairs: SSH, up to 3 s for the
    # servers to listen (perftest's banner rarely comes through a pipe before the end), QP
    # set-up. A site with fast logins may lower it; too low fails trials on probe overlap.
    probe_start_s: float = Field(default=5.0, ge=0.5, le=600)

    @field_validator("nccl_tests_dir")
    @classmethod
    def _dir(cls, v: str) -> str:
        return _pattern("path", os.path.expandvars(v))

    @field_validator("trusted_dirs")
    @classmethod
    def _trusted_dirs(cls, v: list[str]) -> list[str]:
        return [_pattern("path", os.path.expandvars(d)) for d in v]

    @field_validator("perftest_bin", "bw_bin")
    @classmethod
    def _bin(cls, v: str) -> str:
        return _pattern("binary", v)

    @field_validator("mpirun")
    @classmethod
    def _template(cls, v: str) -> str:
        import string

        fields = {f for _, f, _, _ in string.Formatter().parse(v) if f is not None}
        if fields - {"np", "hostlist"}:
            raise ValueError(f"only {{np}} and {{hostlist}} may appear, found {sorted(fields)}")
        words = v.replace("{np}", "1").replace("{hostlist}", "h").split()
        if not words or words[0] not in LAUNCHERS:
            raise ValueError(f"the launcher {words[0] if words else ''!r} is not one of "
                             f"{', '.join(sorted(LAUNCHERS))} (found on the launcher host's PATH)")
        for w in words:
            if not PATTERNS["env_value"].fullmatch(w) and not w.startswith("--"):
                raise ValueError(f"word {w!r} of the template is not a plain option or value")
            if w.startswith("--") and not PATTERNS["env_value"].fullmatch(w[2:]):
                raise ValueError(f"word {w!r} of the template is not a plain option")
        return v

    @field_validator("nccl_env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for k, val in v.items():
            _pattern("env_name", k)
            _check_env_name(k, k, list(PLUGIN_ENV))  # plugins: checked with trusted_env below
            _pattern("env_value", str(val))
        return {k: str(val) for k, val in v.items()}

    @field_validator("trusted_env")
    @classmethod
    def _trusted(cls, v: list[str]) -> list[str]:
        for k in v:
            if k not in PLUGIN_ENV:
                raise ValueError(f"{k!r} is not a plugin variable; trusted_env takes "
                                 f"{', '.join(sorted(PLUGIN_ENV))}")
        return v

    @model_validator(mode="after")
    def _no_untrusted_code(self) -> Launcher:
        """No variable of the template or nccl_env loads code the site did not vouch for."""
        for k in self.nccl_env:
            _check_env_name(f"launcher.nccl_env.{k}", k, self.trusted_env)
        words = self.mpirun.replace("{np}", "1").replace("{hostlist}", "h").split()
        for k in _template_env(words):
            _check_env_name("launcher.mpirun", k, self.trusted_env)
        for d in self.trusted_dirs:  # a vouch is for the value it names, not for any later one
            if d.rstrip("/") != self.nccl_tests_dir.rstrip("/"):
                raise ValueError(f"launcher.trusted_dirs: {d!r} is not launcher.nccl_tests_dir "
                                 f"({self.nccl_tests_dir!r}), the only directory whose "
                                 "binaries run by path")
        return self


class Inventory(BaseModel):
    """Everything the SSH backend needs to know about the canary."""

    model_config = _STRICT
    ssh: SshOptions = Field(default_factory=SshOptions)
    hosts: list[HostEntry] = Field(min_length=1)
    switches: list[SwitchEntry] = Field(default_factory=list)
    launcher: Launcher
    # Named sets of target names (hosts and switches) that promote/verify/watch address.
    groups: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> Inventory:
        names = [t.name for t in (*self.hosts, *self.switches)]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"duplicate target names: {dup}")
        hosts = {h.name for h in self.hosts}
        if self.launcher.host not in hosts:
            raise ValueError(f"launcher.host {self.launcher.host!r} is not one of the hosts")
        for h in self.launcher.latency_hosts:
            if h not in hosts:
                raise ValueError(f"launcher.latency_hosts: {h!r} is not one of the hosts")
        if self.launcher.latency_hosts and len(self.launcher.latency_hosts) != 2:
            raise ValueError("launcher.latency_hosts needs exactly two hosts")
        spines = {s.name for s in self.switches if s.role == "spine"}
        for entry in self.hosts:
            for leaf in {entry.leaf, *(r.leaf for r in entry.rails)} & spines:
                raise ValueError(f"host {entry.name}: leaf {leaf!r} is a switch with role spine")
        for group, members in self.groups.items():
            _pattern("rdma_device", group)
            unknown = sorted(set(members) - set(names))
            if unknown or not members:
                raise ValueError(f"groups.{group}: {unknown or 'no members'}: every member must "
                                 "be a host or switch name of this inventory")
        return self

    def target(self, name: str) -> HostEntry | SwitchEntry:
        targets: list[HostEntry | SwitchEntry] = [*self.hosts, *self.switches]
        for t in targets:
            if t.name == name:
                return t
        raise KeyError(name)


def _where(data: Any, loc: tuple[int | str, ...]) -> str:
    """``hosts[2] (host2).netdev`` from a pydantic error location."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node):
                node = node[item]
                if isinstance(node, dict) and "name" in node:
                    label += f" ({node['name']})"
            else:
                node = None
            parts.append(label)
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "inventory"


def parse_inventory(data: Any, source: str = "inventory") -> Inventory:
    """Validate a mapping; a bad value raises ``ConfigError`` naming the entry and field."""
    from tuner.input_checks import error_message, value_problems

    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the inventory must be a mapping, got {type(data).__name__}")
    problems = value_problems(data, Inventory)
    if problems:
        raise ConfigError("\n".join(f"{source}: {p}" for p in problems[:10]))
    try:
        return Inventory.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            lines.append(f"{source}: {_where(data, tuple(err['loc']))}: {error_message(err)}")
        raise ConfigError("\n".join(lines)) from None


def load_inventory(path: str | Path) -> Inventory:
    """Read and validate an inventory YAML file."""
    from tuner.input_checks import load_yaml, read_text_file

    p = Path(path)
    return parse_inventory(load_yaml(read_text_file(p, "inventory file"), str(p)), str(p))
