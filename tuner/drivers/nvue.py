"""Cumulus Linux NVUE: ECN on a per-interface congestion-control profile of the canary ports.

``default-global`` applies to every port without a profile of its own, so the driver never
writes it: it writes its own profile (``canary_profile``, default ``ECNTUNE_CANARY``) and binds it
to the canary ports only (``nv set interface <swp> qos congestion-control profile <name>``,
Cumulus Linux >= 5.4); writing default-global's values back unbinds the ports and removes the
profile, which carries every traffic class of default-global (TC 0, storage classes), so the
canary ports keep ECN where they had it. Exact values come from the applied configuration (``nv
config show -o json``), never from the rounded displays; the per-port operational view (``nv
show interface <swp> qos roce status``) shows what the ASIC runs, rounded up to its step (64
cells, ``ASIC_STEP``) and printed in human units (150000 B as ``153.00 KB``), and is checked
against them within that step and its display precision, so neither reads as a failed write.

Commands (shared/reference/cumulus-nvue/, INDEX.md section 3.3): ``nv set qos congestion-control
<profile> traffic-class <tc> min-threshold|max-threshold <bytes>``, ``... probability <0-100>``,
``... ecn enable|disable``, ``nv set|unset interface <swp> qos congestion-control [profile
<name>]``, ``nv unset qos congestion-control <profile>``, then ``nv config apply -y``; ``nv show
qos pfc default-global`` for the PFC XOFF threshold; counters from ``nv show interface <swp>
counters qos`` (Cumulus Linux >= 5.5).
"""

from __future__ import annotations

import json
import shlex
import time
from typing import TYPE_CHECKING, Any

from tuner.drivers.base import Driver, Runner, WriteError
from tuner.errors import ApplyError, ConfigError
from tuner.settings import EcnSettings
from tuner.ssh.shell import q

if TYPE_CHECKING:
    from tuner.inventory import SwitchEntry

NV_NAMES = {"kmin_bytes": "min-threshold", "kmax_bytes": "max-threshold",
            "pmax_percent": "probability"}
GLOBAL = "default-global"
# Values a traffic class holds when the applied config does not set them (CL 5.12 QoS docs).
DEFAULTS = {"ecn": "enable", "red": "disable", "min-threshold": 150000, "max-threshold": 1500000,
            "probability": 100}
# default-global enables ECN on traffic class 0 even when the applied config lists nothing
# (CL 5.12 QoS docs, "Congestion Control (ECN)"; reference/cumulus-nvue/nvue-ecn-pfc-...).
FACTORY_TCS = ("0",)
CLONED = ("ecn", "red", "min-threshold", "max-threshold", "probability")
# Spectrum programs ECN/WRED thresholds in buffer cells, in whole multiples of 64 cells (the CWTP
# register holds profile_min/max "in cells"; Linux mlxsw spectrum_qdisc.c writes
# roundup(min, MLXSW_REG_CWTP_MIN_VALUE), MLXSW_REG_CWTP_MIN_VALUE 64). With the 144-byte cell of
# Spectrum-2/3 the step is 9216 B, which reproduces NVIDIA's own sample exactly: min-threshold
# 150000 B runs as 17 x 9216 = 156672 B, shown "153.00 KB" by `nv show interface swp16 qos roce
# status` (reference/cumulus-nvue/nvue-roce-show-qos-roce-and-counters-cl512-doc.txt).
CELL_BYTES = 144
STEP_CELLS = 64
ASIC_STEP = CELL_BYTES * STEP_CELLS
CONFIG = "nv config show -o json"
# Commit-confirm. Documented (NVUE command reference, Config Commands, CL 5.0-5.12): ``nv config
# apply --confirm [<time>]`` rolls back unless confirmed, a bare <time> in minutes ("--confirm 60
# requires you to confirm within one hour"), and ``--confirm-status``. NOT documented, and
# verified on no release by this project: the keep/abort words ``--confirm-yes|--confirm-no``,
# the ``<n>s`` form (used only for windows that are not whole minutes) and the revision state
# ``confirm`` in ``nv config revision -o json`` (docs/real-cluster.md, "NVUE forms to verify").
CONFIRM_YES = "nv config apply --confirm-yes >&2"
CONFIRM_NO_RAW = "nv config apply --confirm-no >&2"
CONFIRM_NO = f"{{ {CONFIRM_NO_RAW} || true; }}"
REVISIONS = "nv config revision -o json"
PORT_MARK = "==ecntune:port:{}=="
ROCE_MARK, REV_MARK = "roce-maps", "revisions"  # facts sections (not port names: no "swp")
DSCP_SP = "RoCE PCP/DSCP->SP mapping configurations"
SP_TC = "RoCE SP->TC mapping and ETS configurations"


def nv_set_steps(profile: str, tc: int, current: EcnSettings, settings: EcnSettings
                 ) -> list[str]:
    """Every field of ``profile``'s traffic class ``tc`` as staged ``nv set`` lines, thresholds
    in the min < max-safe order (``nv config apply`` then applies them at once)."""
    prefix = f"nv set qos congestion-control {q('wred_profile', profile)} traffic-class {int(tc)}"
    order = (["kmax_bytes", "kmin_bytes"] if settings.kmax_bytes >= current.kmax_bytes
             else ["kmin_bytes", "kmax_bytes"]) + ["pmax_percent"]
    steps = [f"{prefix} {NV_NAMES[k]} {q('value', getattr(settings, k))}" for k in order]
    return [*steps, f"{prefix} ecn {'enable' if settings.enabled else 'disable'}"]


def _mark(port: str) -> str:
    return PORT_MARK.format(port)


def applied_tree(text: str) -> dict[str, Any]:
    """The ``set`` tree of ``nv config show -o json`` (a list: header, then set)."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApplyError(f"`{CONFIG}` printed no JSON: {exc}") from None
    items = doc if isinstance(doc, list) else [doc]
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("set"), dict):
            return dict(item["set"])
    if isinstance(doc, dict) and ({"qos", "interface"} & set(doc)):
        return dict(doc)  # the bare tree (as `nv config show -o json` prints some revisions)
    raise ApplyError(f"`{CONFIG}` has no 'set' section")


def port_profiles(tree: dict[str, Any]) -> dict[str, str]:
    """Interfaces with a congestion-control profile of their own: {port: profile}."""
    out = {}
    for port, body in (tree.get("interface") or {}).items():
        cc = ((body or {}).get("qos") or {}).get("congestion-control") or {}
        if isinstance(cc, dict) and cc.get("profile"):
            out[str(port)] = str(cc["profile"])
    return out


def tc_values(tree: dict[str, Any], profile: str, tc: int) -> dict[str, Any] | None:
    """A profile's traffic class with defaults filled in (None: the profile does not exist)."""
    profiles = ((tree.get("qos") or {}).get("congestion-control") or {})
    if profile not in profiles and profile != GLOBAL:
        return None
    row = (((profiles.get(profile) or {}).get("traffic-class") or {}).get(str(tc))) or {}
    return {**DEFAULTS, **row}


def asic_runs(exact: int) -> int:
    """``exact`` bytes rounded up to the ASIC's step (mlxsw: ``roundup``; NVIDIA's sample)."""
    return -(-exact // ASIC_STEP) * ASIC_STEP


def runs_as(exact: int, shown: str) -> bool:
    """Whether an operational display (``"153.00 KB"``) is ``exact`` bytes as the ASIC runs
    them, rounded up to its step (or not rounded), at the display's precision."""
    from objectives.parsers._nvue import within_display

    return within_display(exact, shown) or within_display(asic_runs(exact), shown)


def clone_rows(target: str, tree: dict[str, Any], source: str, skip: int
               ) -> dict[str, dict[str, Any]]:
    """Every traffic class of ``source`` but ``skip`` (the tuned one), defaults filled in, as
    the canary profile must hold them so the canary ports keep ECN on their other classes.
    Raises ``ConfigError`` naming the class and field a valid profile cannot hold."""
    profiles = (tree.get("qos") or {}).get("congestion-control") or {}
    body = profiles.get(source) or {}
    tcs = body.get("traffic-class") if isinstance(body, dict) else None
    if tcs is not None and not isinstance(tcs, dict):
        raise ConfigError(f"{target}: cannot clone congestion-control {source}: "
                          f"traffic-class is {tcs!r}, not a table")
    names = set(tcs or {}) | (set(FACTORY_TCS) if source == GLOBAL else set())
    out = {}
    for tc in sorted(names - {str(skip)}, key=lambda t: (not t.isdigit(), t)):
        row = (tcs or {}).get(tc) or {}
        where = f"{target}: cannot clone congestion-control {source} traffic-class {tc}"
        if not (tc.isdigit() and 0 <= int(tc) <= 7) or not isinstance(row, dict):
            raise ConfigError(f"{where}: not a traffic class 0-7 with fields")
        full = {**DEFAULTS, **{k: row[k] for k in CLONED if k in row}}
        for key in ("ecn", "red"):
            if str(full[key]) not in ("enable", "disable"):
                raise ConfigError(f"{where}: {key} {full[key]!r} is not enable|disable")
        for key, top in (("min-threshold", None), ("max-threshold", None), ("probability", 100)):
            v = full[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < 0 or (top and v > top):
                raise ConfigError(f"{where}: {key} {v!r} is not "
                                  + ("a percentage 0-100" if top else "a byte count"))
        if full["min-threshold"] >= full["max-threshold"]:
            raise ConfigError(f"{where}: min-threshold {full['min-threshold']} is not below "
                              f"max-threshold {full['max-threshold']}")
        out[tc] = full
    return out


def clone_steps(profile: str, rows: dict[str, dict[str, Any]]) -> list[str]:
    """``nv set`` lines that give ``profile`` the traffic classes ``rows``."""
    prefix = f"nv set qos congestion-control {q('wred_profile', profile)} traffic-class"
    return [f"{prefix} {int(tc)} {key} {q('db_value', row[key])}"  # checked by clone_rows
            for tc, row in rows.items() for key in CLONED]


def confirm_time(seconds: int) -> str:
    """``--confirm`` argument: whole minutes as documented (a bare number), else ``<n>s``."""
    s = int(seconds)
    return str(s // 60) if s >= 60 and s % 60 == 0 else f"{s}s"


def pending_confirm(text: str) -> list[str] | None:
    """Revisions waiting for confirmation in ``nv config revision -o json`` (state
    ``confirm``); None when the output is not that table."""
    try:
        revs = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(revs, dict):
        return None
    return [str(r) for r, v in revs.items() if isinstance(v, dict) and v.get("state") == "confirm"]


def roce_path(text: str, dscp: int) -> dict[str, Any]:
    """Where DSCP ``dscp`` goes by ``nv show qos roce``: its switch priority (``RoCE PCP/DSCP->SP
    mapping``), that priority's traffic class (``RoCE SP->TC mapping``), the PFC priorities and
    the RoCE mode (reference/cumulus-nvue/nvue-roce-show-qos-roce-and-counters-cl512-doc.txt).
    ``None`` where the output does not say."""
    from objectives.parsers import parse_nvue

    show = parse_nvue(text)
    sp = next((int(r["switch-prio"]) for r in show.tables.get(DSCP_SP, [])
               if str(dscp) in r.get("dscp", "").replace(" ", "").split(",")
               and r.get("switch-prio", "").isdigit()), None)
    tc = next((int(r["traffic-class"]) for r in show.tables.get(SP_TC, [])
               if sp is not None and r.get("switch-prio") == str(sp)
               and r.get("traffic-class", "").isdigit()), None)
    pfc = show.values.get("pfc.pfc-priority")
    mode = show.values.get("mode")
    return {"dscp": dscp, "switch_prio": sp, "tc": tc, "maps": DSCP_SP in show.tables,
            "pfc": [int(p) for p in ((pfc.value if pfc else None) or "").split(",")
                    if p.strip().isdigit()],
            "mode": mode.value if mode else None}


def settings_of(target: str, row: dict[str, Any]) -> EcnSettings:
    try:
        return EcnSettings(kmin_bytes=int(row["min-threshold"]),
                           kmax_bytes=int(row["max-threshold"]),
                           pmax_percent=int(row["probability"]),
                           enabled=str(row["ecn"]).lower() in ("enable", "enabled", "on", "true"))
    except (ValueError, TypeError) as exc:
        raise ApplyError(f"{target}: invalid ECN values in the applied config: {exc}") from None


class OperationalMismatch(ApplyError):
    """A port runs other thresholds than the applied config says (``_check_operational``)."""


REREADS, REREAD_S = 3, 1.0  # reads before a config/operational disagreement is reported


class NvueDriver(Driver[EcnSettings]):
    platform = "nvue"

    def __init__(self, runner: Runner, switch: SwitchEntry) -> None:
        super().__init__(runner, switch.name)
        self.switch = switch
        self.tree: dict[str, Any] | None = None  # applied config of the last read
        self.on_canary = False  # the canary ports used the canary profile at the last read
        # Commit-confirm (``tuner.cluster.deadman``): the next write applies with
        # ``--confirm <confirm_s>s``; ``confirm_base`` is what NVUE rolls back to meanwhile.
        self.confirm_s: int | None = None
        self.confirm_base: EcnSettings | None = None

    @property
    def canary(self) -> str:
        return self.switch.canary_profile

    @property
    def tc(self) -> int:
        return int(self.switch.lossless_queue)

    # -- commands (pure) ---------------------------------------------------------------
    def read_command(self) -> str:
        ports = " && ".join(f"echo {shlex.quote(_mark(p))} && nv show interface "
                            f"{q('switch_port', p)} qos roce status"
                            for p in self.switch.canary_ports)
        return f"{CONFIG} && {ports}"

    def write_steps(self, current: EcnSettings, settings: EcnSettings) -> list[str]:
        """Staged ``nv set``/``unset``, then one ``nv config apply`` (atomic on the switch).

        Back to default-global's values: unbind the canary ports, remove the profile. Otherwise
        set every field of the canary profile (thresholds in the min < max-safe order), bind the
        canary ports to it, apply."""
        base = self.confirm_base
        if base is not None and settings == base:
            # Back from an unconfirmed apply of ours: NVUE's own rollback (``--confirm-no``)
            # restores the revision before it. Only if nothing waits for confirmation (a
            # reboot, or NVUE's timer, got there first) are the values written again.
            plain = self._steps(current, settings, confirm=False)
            return [f"{{ {CONFIRM_NO_RAW} || {{ {' && '.join(plain)}; }}; }}"]
        if base is not None:  # NVUE takes no other apply while one waits: roll back first
            return [CONFIRM_NO, *self._steps(base, settings, confirm=bool(self.confirm_s))]
        return self._steps(current, settings, confirm=bool(self.confirm_s))

    def _steps(self, current: EcnSettings, settings: EcnSettings, confirm: bool) -> list[str]:
        canary = q("wred_profile", self.canary)
        ports = [q("switch_port", p) for p in self.switch.canary_ports]
        if settings == self.original_settings():
            steps = [f"nv unset interface {p} qos congestion-control" for p in ports]
            steps.append(f"nv unset qos congestion-control {canary}")
        else:
            # The canary profile replaces default-global on the canary ports: it carries all
            # of default-global's classes (TC 0, storage classes...), not only the tuned one.
            rows = clone_rows(self.target, self.tree or {}, GLOBAL, self.tc)
            steps = clone_steps(self.canary, rows)
            steps += nv_set_steps(self.canary, self.tc, current, settings)
            steps += [f"nv set interface {p} qos congestion-control profile {canary}"
                      for p in ports]
        # apply prints "applied [rev_id: N]": keep it out of the read-back on stdout
        apply = (f"nv config apply --confirm {confirm_time(self.confirm_s or 0)} -y >&2"
                 if confirm else "nv config apply -y >&2")
        return [*steps, apply]

    def write(self, settings: EcnSettings) -> EcnSettings:
        """As ``Driver.write``; an apply with ``--confirm`` leaves ``confirm_base`` (what NVUE
        rolls back to) until ``confirm`` or a later write rolls it back."""
        base = self.confirm_base
        try:
            before = super().write(settings)
        except WriteError as exc:
            if self.confirm_s and base is None and isinstance(exc.before, EcnSettings):
                self.confirm_base = exc.before  # the apply may be pending
            raise
        origin = before if base is None else base
        self.confirm_base = origin if self.confirm_s and settings != origin else None
        return before

    def confirm(self) -> None:
        """Keep the unconfirmed apply (``--confirm-yes``): NVUE stops its rollback timer and,
        with auto-save on, saves the revision as the startup configuration."""
        if self.confirm_base is None:
            return
        self.runner.run(CONFIRM_YES)
        self.confirm_base = None

    def confirm_pending(self) -> bool:
        """Whether an apply still waits for confirmation (``nv config revision -o json``: a
        revision in state ``confirm``); False means NVUE rolled it back by itself."""
        pending = pending_confirm(self.runner.run(REVISIONS).stdout)
        if pending is None:
            raise ApplyError(f"{self.target}: `{REVISIONS}` printed no revision table")
        return bool(pending)

    def needs_write(self, current: EcnSettings, settings: EcnSettings) -> bool:
        """Also when the canary profile holds default-global's values: restoring unbinds."""
        return current != settings or (self.on_canary and settings == self.original_settings())

    def original_settings(self) -> EcnSettings | None:
        """default-global's values for the RoCE traffic class, as last read."""
        if self.tree is None:
            return None
        row = tc_values(self.tree, GLOBAL, self.tc)
        return None if row is None else settings_of(self.target, row)

    def counters_command(self) -> str:
        ports = [*self.switch.canary_ports, *self.switch.other_ports]
        return " && ".join(f"echo {shlex.quote(_mark(p))} && nv show interface "
                           f"{q('switch_port', p)} counters qos" for p in ports)

    def facts_command(self) -> str:
        """Applied config (blast radius), PFC XOFF, one canary port's RoCE status (CNP queue);
        each on its own: the global RoCE maps (``nv show qos roce``), the revisions (a
        pending confirm)."""
        port = self.switch.canary_ports[0]
        return (f"{CONFIG} && echo {shlex.quote(_mark('pfc'))} && nv show qos pfc default-global"
                f" && echo {shlex.quote(_mark(port))} && nv show interface "
                f"{q('switch_port', port)} qos roce status"
                f"; echo {shlex.quote(_mark(ROCE_MARK))}; nv show qos roce"
                f"; echo {shlex.quote(_mark(REV_MARK))}; {REVISIONS}")

    def commands(self) -> list[str]:
        lower = EcnSettings(kmin_bytes=100_000, kmax_bytes=400_000, pmax_percent=10)
        return [self.read_command(), self.write_command(EcnSettings(), lower),
                self.counters_command()]

    # -- parsing (pure) ----------------------------------------------------------------
    def read(self) -> EcnSettings:
        """As ``Driver.read``, reading again when the ports' operational view disagrees with
        the applied config: they are two commands, and a change landing between them (NVUE's
        own timer rolling an unconfirmed apply back, another session's apply) is not a
        mismatch of the switch. Only a disagreement that persists over ``REREADS`` is one."""
        for attempt in range(REREADS):
            try:
                return super().read()
            except OperationalMismatch:
                if attempt == REREADS - 1:
                    raise
                time.sleep(REREAD_S)
        raise AssertionError("unreachable")

    def parse(self, text: str) -> EcnSettings:
        """Exact values from the applied config of the profile the canary ports use; each
        port's operational view must agree within its display precision."""
        head, _, rest = text.partition(f"{_mark(self.switch.canary_ports[0])}\n")
        tree = applied_tree(head)
        self.tree = tree
        bound = port_profiles(tree)
        used = {p: bound.get(p, GLOBAL) for p in self.switch.canary_ports}
        names = set(used.values())
        if names not in ({GLOBAL}, {self.canary}):
            raise ApplyError(f"{self.target}: canary ports use congestion-control profiles "
                             f"{used}; expected all {GLOBAL} or all {self.canary}")
        used_name = names.pop()
        self.on_canary = used_name == self.canary != GLOBAL
        row = tc_values(tree, used_name, self.tc)
        if row is None:
            raise ApplyError(f"{self.target}: profile {self.canary} is bound but not defined")
        settings = settings_of(self.target, row)
        self._check_operational(f"{_mark(self.switch.canary_ports[0])}\n{rest}", settings)
        return settings

    def _check_operational(self, text: str, want: EcnSettings) -> None:
        """The applied config is exact; the port's operational view shows what the ASIC runs,
        a multiple of ``ASIC_STEP`` next to it, in display units."""
        from objectives.parsers import parse_nvue

        for port, chunk in _chunks(text).items():
            show = parse_nvue(chunk)
            for key, value in (("max-threshold", want.kmax_bytes),
                               ("min-threshold", want.kmin_bytes)):
                shown = show.values.get(f"congestion-control.{key}")
                if shown is not None and shown.value and not runs_as(value, shown.value):
                    raise OperationalMismatch(
                        f"{self.target}: {port} runs {key} {shown.value}, but the applied "
                        f"config says {value} B, which the ASIC runs as {asic_runs(value)} B "
                        f"(rounded up to {ASIC_STEP} B steps: {STEP_CELLS} cells of "
                        f"{CELL_BYTES} B)")

    def reach(self, tree: dict[str, Any]) -> list[str]:
        """Every port a write reaches: the canary ports, any other port already bound to the
        canary profile and, for default-global, every port of the switch."""
        if self.canary == GLOBAL:
            return ["every port without its own congestion-control profile"]
        bound = port_profiles(tree)
        return sorted({*self.switch.canary_ports,
                       *(p for p, prof in bound.items() if prof == self.canary)})

    def facts_from(self, text: str) -> dict[str, Any]:
        from objectives.parsers import parse_nvue

        text, _, revs = text.partition(f"{_mark(REV_MARK)}\n")
        text, _, roce = text.partition(f"{_mark(ROCE_MARK)}\n")
        head, _, rest = text.partition(f"{_mark('pfc')}\n")
        pfc, _, status = rest.partition(f"{_mark(self.switch.canary_ports[0])}\n")
        tree = applied_tree(head)
        xoff = None
        if pfc.strip():
            v = parse_nvue(pfc).values.get("xoff-threshold")
            xoff = v.as_int() if v is not None else None
        cnp: dict[str, str] = {}
        if status.strip():
            rows = parse_nvue(status).tables.get("RoCE SP->TC mapping and ETS configurations", [])
            for row in rows:
                if next(iter(row.values()), "") == "cnp":
                    cnp[self.switch.canary_ports[0]] = (
                        f"{row.get('scheduler-weight', '?')} (CNP switch-prio "
                        f"{row.get('switch-prio', '?')} -> TC {row.get('traffic-class', '?')})")
        return {"tree": tree, "xoff_bytes": xoff, "cnp": cnp,
                "xoff_source": "nv show qos pfc default-global" if xoff else None,
                "roce": roce if roce.strip() else None, "pending": pending_confirm(revs)}

    def facts(self) -> dict[str, Any]:
        return self.facts_from(self.runner.run(self.facts_command(), check=False).stdout)

    def counters_from(self, text: str) -> dict[str, dict[str, int]]:
        """One ``nv show interface <swp> counters qos`` per port, between markers."""
        from objectives.parsers import parse_nvue

        return {f"{self.target}/{port}": parse_nvue(chunk).to_counters()
                for port, chunk in _chunks(text).items()}

    # -- Driver ------------------------------------------------------------------------
    def counters(self) -> dict[str, dict[str, int]]:
        return self.counters_from(self.runner.run(self.counters_command()).stdout)


def _chunks(text: str) -> dict[str, str]:
    chunks: dict[str, list[str]] = {}
    port: str | None = None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("==ecntune:port:") and stripped.endswith("=="):
            port = stripped[len("==ecntune:port:"):-2]
            chunks[port] = []
        elif port is not None:
            chunks[port].append(line)
    return {p: "\n".join(lines) + "\n" for p, lines in chunks.items()}
