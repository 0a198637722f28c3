"""SONiC: ECN on a dedicated canary WRED profile bound only to the canary ports' lossless queue.

SONiC's ``qos_config.j2`` binds one WRED profile (``AZURE_LOSSLESS``) to the lossless queues of
every active port, so writing that profile changes uplinks and non-canary hosts too. The driver
therefore tunes its own profile (``canary_profile``, default ``ECNTUNE_CANARY``): the first
write clones the original profile (``wred_profile``) field for field, binds it to
``QUEUE|<canary port>|<lossless queue>`` only, then moves the thresholds; writing the original
profile's values back rebinds the original and deletes the clone. Nothing else is written.

Commands (sonic-utilities ``scripts/ecnconfig``, ``sonic-cfggen``, ``sonic-db-cli``;
shared/reference/INDEX.md section 3.2, sonic/wred-profile-config-db-schema.txt):
``ecnconfig -l`` and ``sonic-cfggen -d --var-json QUEUE`` to read; ``sonic-db-cli CONFIG_DB
HSET 'WRED_PROFILE|<canary>' <field> <value> ...`` to clone, ``HSET 'QUEUE|<port>|<q>'
wred_profile <name>`` to bind, ``DEL 'WRED_PROFILE|<canary>'`` to drop the clone;
``ecnconfig -p <canary> -gmax|-gmin|-gdrop <n>`` to write (one threshold per call, ordered by
``_ecn.ecn_write_order``); ``mmuconfig -l`` and CONFIG_DB ``BUFFER_PG``/``BUFFER_PROFILE``/
``BUFFER_POOL`` for the lossless PG's dynamic threshold and its pool (``pg_buffer``);
``counterpoll show`` for counter poll intervals; ``show pfc counters``, ``show queue counters``,
``show queue wredcounters`` and ``show pfcwd stats`` for counters (``show queue wredcounters``
exists from SONiC 202505 only: where it does not, ECN counters are absent, not zero; the facts
probe STATE_DB ``QUEUE_COUNTER_CAPABILITIES`` and the command). ``EcnSettings`` maps onto the
green fields: ``kmin_bytes`` = green_min_threshold, ``kmax_bytes`` = green_max_threshold,
``pmax_percent`` = green_drop_probability; ``enabled`` = the profile's ``ecn`` mode marks green.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import TYPE_CHECKING, Any

from tuner.drivers._ecn import ecn_write_order
from tuner.drivers.base import Driver, Runner, WriteError
from tuner.errors import ApplyError
from tuner.settings import EcnSettings
from tuner.ssh.shell import q

if TYPE_CHECKING:
    from tuner.inventory import SwitchEntry

FLAGS = {"kmin_bytes": "-gmin", "kmax_bytes": "-gmax", "pmax_percent": "-gdrop"}
FIELDS = {"kmin_bytes": "green_min_threshold", "kmax_bytes": "green_max_threshold",
          "pmax_percent": "green_drop_probability"}
GREEN_MODES = {"ecn_green", "ecn_green_yellow", "ecn_green_red", "ecn_all"}


def show(command: str) -> str:
    """``command`` (a sonic-utilities ``show``) in the default interface naming mode.

    With ``SONIC_CLI_IFACE_MODE=alias`` in the login's environment (``config
    interface_naming_mode alias`` writes that export into ``~/.bashrc``), sonic-utilities prints
    the vendor aliases (``etp1``, ...) instead of the SONiC port names the inventory and the
    CONFIG_DB use (``utilities_common/cli.py``: ``get_interface_naming_mode`` reads the
    variable, ``run_command_in_alias_mode`` rewrites the output). Every ``show`` ecntune runs
    names its mode, so the parsers always see SONiC names."""
    return f"SONIC_CLI_IFACE_MODE=default {command}"


SECTIONS = ("pfc", "queue", "wred", "pfcwd")
SHOW = {"pfc": show("show pfc counters"), "queue": show("show queue counters"),
        "wred": show("show queue wredcounters"), "pfcwd": show("show pfcwd stats")}
QUEUE_MARK = "==ecntune:queue-table=="
READ_QUEUES = "sonic-cfggen -d --var-json QUEUE"
DB = "sonic-db-cli CONFIG_DB"
# counterpoll groups (`counterpoll show` types) behind the counters the monitors read: PFC
# frames are port stats, drops queue stats, ECN marks the WRED/ECN queue group (off by default)
POLL_GROUPS = {"pfc": "PORT_STAT", "queue": "QUEUE_STAT", "wred": "WRED_ECN_QUEUE_STAT"}
# ECN-mark capability orchagent publishes (SONiC doc/qos/ECN_and_WRED_statistics_HLD.md,
# "Changes in STATE_DB"; absent before 202505), and the command that shows the counters
ECN_CAPABILITY = "QUEUE_COUNTER_CAPABILITIES|WRED_ECN_QUEUE_ECN_MARKED_PKT_COUNTER"
PROBE_WRED = f"{SHOW['wred']} --help >/dev/null 2>&1 && echo present || echo absent"
# click 7.0 (sonic-utilities pins it) on an unknown subcommand: 'Error: No such command "x".'
NO_SUCH_COMMAND = "No such command"
# peak occupancy per unicast queue since the last clear (watermarkstat -t q_shared_uni)
CNP_WATERMARK = show("show queue watermark unicast")


def stock_profile(settings: EcnSettings) -> dict[str, str]:
    """A WRED profile's fields as sonic-buildimage's qos_config.j2 makes AZURE_LOSSLESS
    (``ecn_all``, every colour alike) with ``settings``' thresholds."""
    prof = {"ecn": "ecn_all"}
    for colour in ("green", "yellow", "red"):
        prof |= {f"wred_{colour}_enable": "true",
                 f"{colour}_min_threshold": str(settings.kmin_bytes),
                 f"{colour}_max_threshold": str(settings.kmax_bytes),
                 f"{colour}_drop_probability": str(settings.pmax_percent)}
    return prof


def ecnconfig_calls(profile: str, current: EcnSettings, settings: EcnSettings) -> list[str]:
    """``ecnconfig -p <profile>`` calls taking ``current`` to ``settings``, never min > max.

    One call writes its fields one CONFIG_DB write at a time in a fixed order (gmax, gmin, ...,
    gdrop last; scripts/ecnconfig L372-388), so each threshold gets its own call in the order of
    ``ecn_write_order`` (a single call would write gmax before gmin, wrong when lowering) and
    ``-gdrop`` rides on the last call, where ecnconfig writes it after the threshold anyway.
    """
    calls: list[list[str]] = []
    for name, value in ecn_write_order(current, settings):
        flag = f"{FLAGS[name]} {q('value', value)}"
        if name == "pmax_percent" and calls:
            calls[-1].append(flag)
        else:
            calls.append([flag])
    return [f"ecnconfig -p {q('wred_profile', profile)} " + " ".join(c) for c in calls]


def _mark(section: str) -> str:
    return f"==ecntune:{section}=="


def _queue_ids(spec: str) -> list[int]:
    """``3`` / ``3-4`` / ``3,4`` (CONFIG_DB QUEUE key suffix) -> queue indices."""
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ApplyError(f"QUEUE key suffix {spec!r} is not a queue index or range")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def profile_name(ref: str) -> str:
    """``AZURE_LOSSLESS`` or the older reference form ``[WRED_PROFILE|AZURE_LOSSLESS]``."""
    m = re.fullmatch(r"\[WRED_PROFILE\|([^\]]+)\]", ref.strip())
    return m.group(1) if m else ref.strip()


def queue_bindings(table: dict[str, Any]) -> dict[tuple[str, int], tuple[str, str]]:
    """``sonic-cfggen -d --var-json QUEUE`` -> {(port, queue): (profile, CONFIG_DB key)}.

    Keys are ``<port>|<queue>``; older configurations list several ports and a range in one
    key (``Ethernet0,Ethernet4|3-4``), which binds them all at once."""
    out: dict[tuple[str, int], tuple[str, str]] = {}
    for key, fields in table.items():
        ports, sep, queues = key.rpartition("|")
        if not sep or not isinstance(fields, dict) or "wred_profile" not in fields:
            continue
        for port in ports.split(","):
            for queue in _queue_ids(queues):
                out[(port, queue)] = (profile_name(str(fields["wred_profile"])), key)
    return out


def parse_queue_table(text: str) -> dict[str, Any]:
    try:
        table = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise ApplyError(f"`{READ_QUEUES}` printed no JSON: {exc}") from None
    if not isinstance(table, dict):
        raise ApplyError(f"`{READ_QUEUES}` printed {type(table).__name__}, not an object")
    return table


def parse_counterpoll(text: str) -> dict[str, tuple[float, bool]]:
    """``counterpoll show`` -> {type: (interval s, enabled)}; ``default (60000)`` counts."""
    out: dict[str, tuple[float, bool]] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"\s*([A-Z][A-Z0-9_]+)\s+(?:default\s*\()?(\d+)\)?\s+(enable|disable)\s*",
                         line)
        if m:
            out[m.group(1)] = (int(m.group(2)) / 1000.0, m.group(3) == "enable")
    return out


def parse_mmu(text: str) -> dict[str, dict[str, dict[str, str]]]:
    """``mmuconfig -l`` -> ``{"BUFFER_POOL": {pool: {field: value}}, "BUFFER_PROFILE": ...}``
    (sonic-utilities scripts/mmuconfig; ``Pool for namespace asic0: <name>`` on multi-ASIC)."""
    out: dict[str, dict[str, dict[str, str]]] = {"BUFFER_POOL": {}, "BUFFER_PROFILE": {}}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        s = line.strip()
        if m := re.fullmatch(r"(Pool|Profile)(?: for namespace \S+)?:\s*(\S+)", s):
            table = "BUFFER_POOL" if m.group(1) == "Pool" else "BUFFER_PROFILE"
            current = out[table].setdefault(m.group(2), {})
        elif current is not None and (m := re.fullmatch(r"([a-z_]+)\s+(\S+)", s)):
            current[m.group(1)] = m.group(2)
        elif not s:
            current = None
    return out


def ecn_counter_state(capability: str, command: str, poll: dict[str, tuple[float, bool]]
                      ) -> tuple[str, str]:
    """(``on``|``off``|``absent``, why) for the WRED/ECN queue counters: absent without the
    ``show queue wredcounters`` command (SONiC before 202505) or the STATE_DB capability; off
    when ``counterpoll show`` lists no enabled WRED_ECN_QUEUE_STAT row (a missing
    FLEX_COUNTER_TABLE row means off)."""
    if command.strip() != "present":
        return "absent", ("no `show queue wredcounters` on this switch (SONiC before 202505): "
                          "ECN marks are not counted per queue")
    if capability.strip().lower() != "true":
        return "absent", (f"STATE_DB {ECN_CAPABILITY} isSupported is "
                          f"{capability.strip() or 'missing'}: the platform does not count "
                          "ECN marks per queue")
    group = POLL_GROUPS["wred"]
    if group in poll and poll[group][1]:
        return "on", f"{group} polled every {poll[group][0]:g} s"
    return "off", f"{group} not polled" + ("" if group in poll else " (no FLEX_COUNTER row)")


def qos_path(db: dict[str, Any], port: str, dscp: int) -> dict[str, Any]:
    """Where DSCP ``dscp`` arriving on ``port`` goes, from CONFIG_DB: PORT_QOS_MAP (the
    port's row, else ``global``) dscp_to_tc_map -> DSCP_TO_TC_MAP -> tc_to_queue_map ->
    TC_TO_QUEUE_MAP -> the queue, its SCHEDULER, and the port's ``pfc_enable``. Missing links
    stay ``None`` (a port without a tc_to_queue_map sends TC n to queue n: the SAI default)."""
    maps = db.get("PORT_QOS_MAP") or {}
    row = maps.get(port) or {}
    dscp_map = _ref(row.get("dscp_to_tc_map") or (maps.get("global") or {}).get(
        "dscp_to_tc_map")) or None
    tc_raw = ((db.get("DSCP_TO_TC_MAP") or {}).get(dscp_map or "") or {}).get(str(dscp))
    tc = int(str(tc_raw)) if str(tc_raw).isdigit() else None
    tc_map = _ref(row.get("tc_to_queue_map")) or None
    q_raw = ((db.get("TC_TO_QUEUE_MAP") or {}).get(tc_map or "") or {}).get(str(tc)) \
        if tc_map else tc
    queue = int(str(q_raw)) if str(q_raw).isdigit() else None
    sched = _ref(((db.get("QUEUE") or {}).get(f"{port}|{queue}") or {}).get("scheduler"))
    kind = ((db.get("SCHEDULER") or {}).get(sched) or {}).get("type") if sched else None
    pfc = [int(p) for p in str(row.get("pfc_enable") or "").split(",") if p.strip().isdigit()]
    return {"port": port, "dscp": dscp, "dscp_map": dscp_map, "tc": tc, "tc_map": tc_map,
            "queue": queue, "scheduler": sched or None, "scheduler_type": kind,
            "pfc_enable": pfc}


def _pg_profiles(db: dict[str, Any], port: str, pg: int) -> list[tuple[str, str]]:
    """(BUFFER_PG key, profile name) of ``port``'s priority group ``pg`` (``Ethernet0|3-4``)."""
    return [(key, _ref(row.get("profile"))) for key, row in (db.get("BUFFER_PG") or {}).items()
            if key.partition("|")[0] == port and isinstance(row, dict)
            and pg in _queue_ids(key.partition("|")[2])]


def _int(value: Any) -> int | None:
    return int(value) if re.fullmatch(r"-?\d+", str(value or "")) else None


def pg_buffer(db: dict[str, Any], mmu: dict[str, dict[str, dict[str, str]]],
              ports: list[str], pg: int) -> dict[str, Any] | None:
    """The lossless PG's PFC threshold inputs on ``ports`` (the lowest pool share wins):
    ``{pool, pool_bytes, dynamic_th | static_th_bytes, source}``; None when unknown.

    CONFIG_DB ``BUFFER_PG|<port>|<pgs>`` names the profile (buffermgrd writes
    ``pg_lossless_<speed>_<cable>_profile`` from pg_profile_lookup.ini, sonic-swss
    cfgmgr/buffermgr.cpp); with no usable row (the dynamic buffer model writes ``NULL``)
    the lossless PG profiles of ``mmuconfig -l`` count (those with an ``xoff`` headroom).
    The profile's ``pool`` names a BUFFER_POOL whose ``size`` is the shared pool; the dynamic
    model computes sizes at run time and CONFIG_DB has none: then this is None."""
    pools = {**mmu.get("BUFFER_POOL", {}), **(db.get("BUFFER_POOL") or {})}
    profiles = {**mmu.get("BUFFER_PROFILE", {}), **(db.get("BUFFER_PROFILE") or {})}
    named = [(f"CONFIG_DB BUFFER_PG|{key}", name) for port in ports
             for key, name in _pg_profiles(db, port, pg) if name in profiles]
    if not named:
        named = [("mmuconfig -l", name) for name, row in profiles.items() if "xoff" in row]
    found = []
    for where, name in named:
        prof = profiles[name]
        pool = _ref(prof.get("pool"))
        size = _int((pools.get(pool) or {}).get("size"))
        dyn, static = _int(prof.get("dynamic_th")), _int(prof.get("static_th"))
        if not size or (dyn is None and not static):
            continue
        share = min(static, size) if static else size * 2.0 ** min(dyn or 0, 7)
        found.append((share, {"pool": pool, "pool_bytes": size,
                              **({"static_th_bytes": static} if static else {"dynamic_th": dyn}),
                              "source": f"{where} -> {name}"}))
    return min(found, key=lambda f: f[0])[1] if found else None


class SonicDriver(Driver[EcnSettings]):
    platform = "sonic"

    def __init__(self, runner: Runner, switch: SwitchEntry) -> None:
        super().__init__(runner, switch.name)
        self.switch = switch
        self.profiles: dict[str, dict[str, Any]] | None = None  # from the last read
        self.queue_table: dict[str, Any] | None = None
        self.on_canary = False  # the canary ports used the clone at the last read
        self.ecn_absent = False  # `show queue wredcounters` is no command here (before 202505)

    @property
    def canary(self) -> str:
        return self.switch.canary_profile

    @property
    def original(self) -> str:
        return self.switch.wred_profile

    # -- commands (pure) ---------------------------------------------------------------
    def read_command(self) -> str:
        return f"ecnconfig -l && echo {shlex.quote(QUEUE_MARK)} && {READ_QUEUES}"

    def _queue_key(self, port: str) -> str:
        return f"QUEUE|{port}|{int(self.switch.lossless_queue)}"

    def _bind(self, profile: str) -> list[str]:
        return [f"{DB} HSET {q('db_key', self._queue_key(p))} wred_profile "
                f"{q('wred_profile', profile)}" for p in self.switch.canary_ports]

    def _clone_fields(self, current: EcnSettings) -> dict[str, str]:
        """Every field of the original profile (as last read), so the clone marks yellow and
        red traffic like the original does."""
        prof = (self.profiles or {}).get(self.original)
        if prof is None:  # never read (only the command catalog does this): a stock profile
            return stock_profile(current)
        return {str(k): str(v) for k, v in prof.items()}

    def write_steps(self, current: EcnSettings, settings: EcnSettings) -> list[str]:
        """Back to the original values: rebind the original, drop the clone. Otherwise clone
        the original unless the canary ports already use the clone (then it holds ``current``),
        bind it, and move the thresholds with ``ecnconfig_calls`` (min < max at every step).
        """
        if settings.enabled != current.enabled:
            raise WriteError(f"{self.target}: switching ECN marking on/off is not done by this "
                             "driver (`ecnconfig -q` changes every port); set the profile's "
                             "ecn mode by hand", None)
        canary = q("wred_profile", self.canary)
        if settings == self.original_settings():
            return [*self._bind(self.original),
                    f"{DB} DEL {q('db_key', 'WRED_PROFILE|' + self.canary)}"]
        first = self._queue_key(self.switch.canary_ports[0])
        pairs = " ".join(f"{q('db_field', k)} {q('db_value', v)}"
                         for k, v in self._clone_fields(current).items())
        # Once bound (the steady state of a study) a write is the ecnconfig calls alone: every
        # sonic-db-cli call is a Python start on the switch CPU. A half-done bind is refused by
        # the read-back (``parse``), so checking the first canary port suffices here.
        setup = " && ".join([f"{DB} HSET {q('db_key', 'WRED_PROFILE|' + self.canary)} {pairs}",
                             *self._bind(self.canary)])
        steps = [f'{{ [ "$({DB} HGET {q("db_key", first)} wred_profile)" = {canary} ] || '
                 f"{{ {setup}; }}; }}"]
        return steps + ecnconfig_calls(self.canary, current, settings)

    def needs_write(self, current: EcnSettings, settings: EcnSettings) -> bool:
        """Also when the clone holds the original's values: restoring means rebinding."""
        return current != settings or (self.on_canary and self.canary != self.original
                                       and settings == self.original_settings())

    def original_settings(self) -> EcnSettings | None:
        """The original profile's values as last read (``None`` before any read)."""
        prof = (self.profiles or {}).get(self.original)
        return None if prof is None else _settings(self.target, self.original, prof)

    def counters_command(self) -> str:
        """The counter commands as one line (``counters`` runs them as parallel channels)."""
        return " && ".join(f"echo {shlex.quote(_mark(s))} && {SHOW[s]}" for s in SECTIONS)

    def counters_commands(self) -> list[str]:
        return [SHOW[s] for s in SECTIONS]

    def commands(self) -> list[str]:
        lower = EcnSettings(kmin_bytes=100_000, kmax_bytes=400_000, pmax_percent=10)
        return [self.read_command(), self.write_command(EcnSettings(), lower),
                self.write_command(lower, EcnSettings()), self.counters_command()]

    # -- parsing (pure) ----------------------------------------------------------------
    def parse(self, text: str) -> EcnSettings:
        """The values of the profile the canary ports' lossless queue uses (the clone or the
        original); anything else bound there, or a mix, is refused."""
        from objectives.parsers import parse_ecnconfig

        ecn, sep, queues = text.partition(f"{QUEUE_MARK}\n")
        if not sep:
            raise ApplyError(f"{self.target}: `{READ_QUEUES}` did not run")
        profiles: dict[str, dict[str, Any]] = parse_ecnconfig(ecn).profiles
        if self.original not in profiles:
            raise ApplyError(f"{self.target}: WRED profile {self.original!r} does not exist on "
                             f"the switch (has {sorted(profiles)}); refusing to create one")
        table = parse_queue_table(queues)
        self.profiles, self.queue_table = profiles, table
        used = self.bound_profiles(table)
        names = set(used.values())
        if names == {self.canary} and self.canary in profiles:
            name, self.on_canary = self.canary, True
        elif names == {self.original}:
            name, self.on_canary = self.original, False
        else:
            raise ApplyError(f"{self.target}: lossless queue {self.switch.lossless_queue} of the "
                             f"canary ports uses {used}; expected all {self.original!r} or all "
                             f"{self.canary!r} (existing: {sorted(profiles)})")
        return _settings(self.target, name, profiles[name])

    def bound_profiles(self, table: dict[str, Any]) -> dict[str, str | None]:
        """Profile on each canary port's lossless queue; refuses shared multi-port keys."""
        binds = queue_bindings(table)
        queue = int(self.switch.lossless_queue)
        out: dict[str, str | None] = {}
        for port in self.switch.canary_ports:
            name, key = binds.get((port, queue), (None, ""))
            if name is not None and key != f"{port}|{queue}":
                raise ApplyError(f"{self.target}: QUEUE|{key} binds {port} queue {queue} together "
                                 "with other ports; split it into one key per port first")
            out[port] = name
        return out

    def reach(self, table: dict[str, Any]) -> list[tuple[str, int]]:
        """Every (port, queue) a write reaches: the canary ports' lossless queue plus whatever
        the switch's own QUEUE table already binds to the written (canary) profile."""
        queue = int(self.switch.lossless_queue)
        out = {(p, queue) for p in self.switch.canary_ports}
        out |= {pq for pq, (name, _) in queue_bindings(table).items() if name == self.canary}
        return sorted(out)

    # -- facts (read-only) -------------------------------------------------------------
    def facts_command(self) -> str:
        """Buffer pools and profiles (PFC threshold), counter poll intervals, the ECN counter
        capability and command, all of CONFIG_DB."""
        return (f"mmuconfig -l; echo {shlex.quote(_mark('poll'))}; counterpoll show; "
                f"echo {shlex.quote(_mark('ecncap'))}; sonic-db-cli STATE_DB HGET "
                f"{shlex.quote(ECN_CAPABILITY)} isSupported; "
                f"echo {shlex.quote(_mark('ecncmd'))}; {PROBE_WRED}; "
                f"echo {shlex.quote(QUEUE_MARK)}; sonic-cfggen -d --print-data")

    def facts_from(self, text: str) -> dict[str, Any]:
        mmu, _, rest = text.partition(f"{_mark('poll')}\n")
        poll_text, _, rest = rest.partition(f"{_mark('ecncap')}\n")
        cap, _, rest = rest.partition(f"{_mark('ecncmd')}\n")
        cmd, _, config = rest.partition(f"{QUEUE_MARK}\n")
        db = parse_queue_table(config)
        poll = parse_counterpoll(poll_text)
        ecn = ecn_counter_state(cap, cmd, poll)
        self.ecn_absent = ecn[0] == "absent"
        return {"pg_buffer": pg_buffer(db, parse_mmu(mmu), list(self.switch.canary_ports),
                                       int(self.switch.lossless_queue)),
                "counterpoll": poll, "ecn_counters": ecn,
                "queue_table": dict(db.get("QUEUE") or {}), "config_db": db}

    def cnp_schedulers(self, db: dict[str, Any], cnp_dscp: int) -> dict[str, str]:
        """Per canary port, the scheduler type of the queue CNPs (DSCP ``cnp_dscp``) leave by
        (``STRICT``, ``DWRR``, ``WRR``; ``?`` where a link is missing), with the path."""
        out: dict[str, str] = {}
        for port in self.switch.canary_ports:
            p = qos_path(db, port, cnp_dscp)
            out[port] = (f"{p['scheduler_type'] or '?'} (DSCP {cnp_dscp} -> TC {p['tc']} -> "
                         f"queue {p['queue']})")
        return out

    def qos_paths(self, db: dict[str, Any], dscp: int) -> dict[str, dict[str, Any]]:
        """``qos_path`` of DSCP ``dscp`` on every canary port."""
        return {port: qos_path(db, port, dscp) for port in self.switch.canary_ports}

    def facts(self) -> dict[str, Any]:
        return self.facts_from(self.runner.run(self.facts_command(), check=False).stdout)

    def enable_counters_command(self) -> str:
        """Operator-consented: poll the WRED/ECN queue counters (disabled by default)."""
        return "counterpoll wredqueue enable"

    def counters_from(self, text: str) -> dict[str, dict[str, int]]:
        """Merge the four ``show`` tables into ``{"leaf0/Ethernet0": {...}}`` for our ports."""
        from objectives.parsers import (
            parse_pfcstat,
            parse_pfcwd_stats,
            parse_queue_counters,
            parse_wredcounters,
        )

        parts = _split(text)
        ports = [*self.switch.canary_ports, *self.switch.other_ports]
        out: dict[str, dict[str, int]] = {p: {} for p in ports}
        tables = (parse_pfcstat(parts["pfc"]).to_counters(),
                  parse_queue_counters(parts["queue"]).to_counters(),
                  {} if self.ecn_absent else parse_wredcounters(parts["wred"]).to_counters(),
                  parse_pfcwd_stats(parts["pfcwd"]).to_counters() if parts["pfcwd"].strip()
                  else {})
        for table in tables:
            for port, row in table.items():
                if port in out:
                    out[port].update(row)
        return {f"{self.target}/{port}": row for port, row in out.items()}

    # -- Driver ------------------------------------------------------------------------
    def counters(self) -> dict[str, dict[str, int]]:
        """The four ``show`` commands at once, one SSH channel each (each is a slow Python
        start on a switch CPU), reassembled in ``counters_command`` form for parsing."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(SECTIONS)) as pool:
            outs = dict(zip(SECTIONS, pool.map(self._show, SECTIONS), strict=True))
        return self.counters_from("".join(f"{_mark(sec)}\n{outs[sec]}" for sec in SECTIONS))

    def _show(self, section: str) -> str:
        """One ``show`` table; ``""`` for the WRED/ECN table where the release has no such
        command (click's 'No such command', exit 2): those counters are absent, not zero."""
        if section == "wred" and self.ecn_absent:
            return ""
        res = self.runner.run(SHOW[section], check=section != "wred")
        if res.status == 0:
            return res.stdout
        if NO_SUCH_COMMAND in res.stderr + res.stdout:
            self.ecn_absent = True
            return ""
        from tuner.ssh.transport import CommandError

        raise CommandError(self.target, SHOW[section], res.status, res.stderr,
                           f"exit status {res.status}")


def _ref(value: Any) -> str:
    """``[SCHEDULER|scheduler.0]`` (older reference form) or ``scheduler.0`` -> the name."""
    text = str(value or "")
    m = re.fullmatch(r"\[[A-Z_]+\|([^\]]+)\]", text)
    return m.group(1) if m else text


def _settings(target: str, name: str, prof: dict[str, Any]) -> EcnSettings:
    try:
        return EcnSettings(
            kmin_bytes=int(prof[FIELDS["kmin_bytes"]]),
            kmax_bytes=int(prof[FIELDS["kmax_bytes"]]),
            pmax_percent=int(prof[FIELDS["pmax_percent"]]),
            enabled=str(prof.get("ecn", "ecn_none")) in GREEN_MODES)
    except KeyError as exc:
        raise ApplyError(f"{target}: profile {name} lacks {exc.args[0]}") from None
    except ValueError as exc:
        raise ApplyError(f"{target}: profile {name} holds invalid values: {exc}") from None


def _split(text: str) -> dict[str, str]:
    parts = {s: "" for s in SECTIONS}
    current: str | None = None
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        hit = next((s for s in SECTIONS if stripped == _mark(s)), None)
        if hit:
            current = hit
        elif current:
            parts[current] += line
    return parts
