"""Contradictions between fields of a valid-looking experiment, and inventory inputs that only
the local machine can check (key files, known_hosts, secrets written into a file).

The pydantic models catch wrong types, unknown keys and out-of-range values field by field; this
module catches what needs two fields or the file system, before any backend is built, so the
CLI can answer with exit code 2 and a line naming the file, the field and the fix. Reachability
is checked later, by pre-flight (``tuner.cli.preflight.gate``), which maps a connection failure
to the inventory entry's ``address``.
"""

from __future__ import annotations

import difflib
import math
import os
import stat
import types
import typing
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import BaseModel

from safety.limits import RATE_KNOBS
from tuner.errors import ConfigError
from tuner.settings import KNOBS

if TYPE_CHECKING:
    from tuner.experiment import Experiment
    from tuner.inventory import Inventory

MAX_DEPTH = 32  # no experiment or inventory field nests deeper than a handful of levels
MAX_NODES = 200_000  # values after YAML aliases are expanded (a "billion laughs" file)
MAX_FILE_BYTES = 1_000_000  # an experiment or inventory is a few KB; the scrubs stay quick
LARGE_FILE_BYTES = 64_000_000  # ``ecntune --large``: a generated inventory of a big fleet
_limit = MAX_FILE_BYTES


_i_know = False


def set_i_know(on: bool) -> None:
    """``ecntune --i-know``: safety limits past their bounds (``safety.limits.SOFT_BOUNDS``) are
    accepted by ``parse_experiment`` until ``set_i_know(False)``."""
    global _i_know
    _i_know = on


def i_know() -> bool:
    return _i_know


def set_input_limit(large: bool) -> None:
    """``ecntune --large``: experiment and inventory files up to ``LARGE_FILE_BYTES`` until
    ``set_input_limit(False)``."""
    global _limit
    _limit = LARGE_FILE_BYTES if large else MAX_FILE_BYTES


# -- reading files -------------------------------------------------------------------------------

def read_text_file(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of ``path``, a regular file of at most ``MAX_FILE_BYTES``
    (``LARGE_FILE_BYTES`` after ``set_input_limit(True)``); ``ConfigError`` naming the file
    and the fix otherwise (a FIFO would hang the read, ``/dev/zero`` never end it)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p}: is a directory, not a{'n' if what[0] in 'aeiou' else ''} "
                          f"{what} -- give the file inside it")
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read {what}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{p}: not a regular file (a device, FIFO or socket) -- give "
                              f"the {what} itself")
        try:
            raw = fh.read(_limit + 1)
        except OSError as exc:
            raise ConfigError(f"{p}: cannot read {what}: {exc.strerror}") from None
    if len(raw) > _limit:
        hint = ("" if _limit >= LARGE_FILE_BYTES else
                f" (`ecntune --large ...` reads up to {LARGE_FILE_BYTES // 1_000_000} MB)")
        raise ConfigError(f"{p}: larger than {_limit // 1_000_000} MB -- an {what} is a few "
                          f"kilobytes; is this the right file?{hint}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{p}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x}) -- save "
                          f"the {what} as UTF-8") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor`: merged keys may be overridden here, by YAML's rule
            key = self.construct_object(key_node, deep=True)  # type: ignore[no-untyped-call]
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                break
            line = key_node.start_mark.line + 1
            if first is not None:
                raise ConfigError(f"{self.name}:{line}: duplicate key {key!r} (first at line "
                                  f"{first}) -- keep one of them")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str, source: str) -> Any:
    """Parse YAML refusing duplicate keys, deep nesting and alias bombs; ``ConfigError`` with
    the file and line otherwise."""
    loader = None
    try:
        loader = _UniqueKeyLoader(text)  # its reader checks every character (a NUL byte)
        loader.name = source
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        # Where and what, never the text: a file that is not ours (a credentials file given as
        # the inventory) must not have its lines echoed into a terminal or a log.
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        if isinstance(exc, yaml.reader.ReaderError):  # a control character such as NUL
            line = f":{text[:exc.position].count(chr(10)) + 1}"
            problem = f"character #x{exc.character:04x} is not allowed ({exc.reason})"
        raise ConfigError(f"{source}{line}: not valid YAML: {problem}") from None
    except RecursionError:
        raise ConfigError(f"{source}: nested deeper than {MAX_DEPTH} levels -- no field of an "
                          "experiment or inventory needs that; flatten it") from None
    finally:
        if loader is not None:
            loader.dispose()
    _shape_limits(data, source)
    return data


def _shape_limits(data: Any, source: str) -> None:
    """Depth and expanded size, iteratively (a recursive walk is what deep input breaks)."""
    stack: list[tuple[Any, int, str]] = [(data, 0, "")]
    nodes = 0
    while stack:
        node, depth, where = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ConfigError(f"{source}: more than {MAX_NODES} values once YAML aliases are "
                              "expanded -- remove the alias chains")
        if depth > MAX_DEPTH:
            raise ConfigError(f"{source}: {where or '<top level>'}: nested deeper than "
                              f"{MAX_DEPTH} levels -- flatten it")
        if isinstance(node, bytes):  # !!binary would carry control characters past the checks
            raise ConfigError(f"{source}: {where or '<top level>'}: a binary value (!!binary) -- "
                              "write it as plain text")
        if isinstance(node, dict):
            stack.extend((v, depth + 1, f"{where}.{k}" if where else str(k))
                         for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(node))


# -- values the models would accept too kindly ---------------------------------------------

FREE_TEXT = {"description"}  # fields where a newline or tab is text, not an attack


def _non_ascii(key: str) -> str | None:
    """The first non-ASCII character of ``key``, named: ``'е' (U+0435 CYRILLIC SMALL LETTER IE)
    at character 5`` (a homoglyph looks like the field it is not)."""
    for i, ch in enumerate(key, 1):
        if ord(ch) > 0x7F:
            return (f"{ch!r} (U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')}) "
                    f"at character {i}")
    return None


def _control(text: str, multiline: bool) -> str | None:
    for ch in text:
        code = ord(ch)
        if (code < 0x20 or 0x7F <= code < 0xA0) and not (multiline and ch in "\n\t"):
            return repr(ch)
    return None


def error_message(err: Mapping[str, Any]) -> str:
    """pydantic's message for one validation error, for the user: a NaN compares with no bound,
    so pydantic's "should be less than or equal to 1000" is said to be about a NaN."""
    msg = str(err["msg"]).removeprefix("Value error, ")
    value = err.get("input")
    if isinstance(value, float) and math.isnan(value) and err.get("type") != "finite_number":
        msg = f"nan is not a number: give a finite number ({msg})"
    return msg


def value_problems(data: Any, model: type[BaseModel], root: str = "") -> list[str]:
    """``where: problem -- fix`` for control characters in any key or string (a newline in a
    name or a launcher template is how data turns into a shell command) and for booleans
    given where the model wants a number (``trials: true`` is not 1)."""
    out: list[str] = []

    def walk(node: Any, ann: Any, where: str) -> None:
        if isinstance(node, str):
            bad = _control(node, where.rsplit(".", 1)[-1] in FREE_TEXT)
            if bad:
                out.append(f"{where or '<top level>'}: control character {bad} in "
                           f"{node[:40]!r} -- remove it")
            return
        if isinstance(node, bool):
            if ann is not None and _wants_number(ann):
                out.append(f"{where}: value {node} is a boolean, not a number -- give a number")
            return
        if isinstance(node, dict):
            fields = _model_fields(ann)
            for k, v in node.items():
                key = str(k)
                bad = _control(key, False)
                if bad:
                    out.append(f"{where or '<top level>'}: control character {bad} in key "
                               f"{key[:40]!r} -- remove it")
                sub = f"{where}.{key}" if where else key
                odd = _non_ascii(key)
                if odd:  # every key is ASCII: a look-alike letter would read as "unknown field"
                    near = difflib.get_close_matches(key, list(fields or ()), n=1)
                    out.append(f"{sub}: {odd} is not ASCII -- "
                               + (f"did you mean {near[0]!r}? " if near else "")
                               + "retype the key in ASCII")
                    continue
                if fields is not None:
                    walk(v, fields.get(key), sub)
                else:
                    walk(v, _mapping_value(ann), sub)
        elif isinstance(node, list):
            item = _list_item(ann)
            for i, v in enumerate(node):
                walk(v, item, f"{where}[{i}]")

    walk(data, model, root)
    return out


def _unwrap(ann: Any) -> list[Any]:
    """The alternatives of an annotation (``X | None``, ``Annotated[X, ...]``)."""
    origin = typing.get_origin(ann)
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(ann)[0])
    if origin in (typing.Union, types.UnionType):
        return [a for arg in typing.get_args(ann) for a in _unwrap(arg)]
    return [ann]


def _wants_number(ann: Any) -> bool:
    alts = _unwrap(ann)
    return bool not in alts and any(a in (int, float) for a in alts)


def _model_fields(ann: Any) -> dict[str, Any] | None:
    for a in _unwrap(ann):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return {n: f.annotation for n, f in a.model_fields.items()}
    return None


def _mapping_value(ann: Any) -> Any:
    for a in _unwrap(ann):
        if typing.get_origin(a) is dict:
            return typing.get_args(a)[1]
    return None


def _list_item(ann: Any) -> Any:
    for a in _unwrap(ann):
        if typing.get_origin(a) is list:
            return typing.get_args(a)[0]
    return None


# -- sizes the machine cannot hold ---------------------------------------------------------

def machine_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def sim_bytes(exp: Experiment) -> tuple[float, str]:
    """A (generous) estimate of the simulation's memory, and the field that dominates it (a
    float: finite fields can still multiply past any integer, e.g. max_time_us 1e308)."""
    topo, wl, fab = exp.fabric.topology, exp.workload, exp.fabric
    leaves = {"leaf_spine": topo.leaves, "three_tier": topo.leaves * topo.pods}.get(topo.kind, 1)
    nics = topo.hosts_per_leaf * (1 if topo.rails else topo.nics_per_host) * leaves
    terms: dict[str, float] = {}
    from tuner.workload import CollectivePart, ProbePart

    for i, part in enumerate(wl.parts):
        if isinstance(part, CollectivePart):
            n = nics
            flows = (n * (n - 1) * part.qps_per_connection if part.op == "alltoall"
                     else n * part.channels * part.qps_per_connection)
            terms[f"workload.parts[{i}] ({part.op} over {n} NICs: {flows:.3g} flows)"] = \
                flows * 400.0
        elif isinstance(part, ProbePart):
            samples = part.pairs * (fab.max_time_us / part.interval_us + 2)
            terms[f"fabric.max_time_us / workload.parts[{i}].interval_us "
                  f"({samples:.3g} probe samples)"] = samples * 16.0
    links = nics + leaves * topo.spines * 2 + topo.super_spines * topo.pods * 2
    terms["fabric.topology"] = links * 64_000.0
    worst = max(terms, key=lambda k: terms[k])
    return sum(terms.values()), worst


def _size_problems(exp: Experiment) -> list[str]:
    if exp.fabric.backend != "sim":
        return []
    need, worst = sim_bytes(exp)
    have = machine_bytes()
    if need <= have // 2:
        return []
    size = f"~{_gib(need)}" if math.isfinite(need) else "more than 1e308 bytes"
    return [f"{worst}: the simulation would need {size} of memory, more than half of "
            f"this machine's {_gib(have)} -- lower fabric.max_time_us, raise the probe "
            "interval_us or shrink the topology / collective"]


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n < 2**40 else f"{n / 2**40:.3g} TiB"


def _url_problems(exp: Experiment) -> list[str]:
    from tuner.tracking import move_url_credentials

    try:
        move_url_credentials({"storage": exp.storage, "tracking.uri": exp.tracking.uri})
    except ConfigError as exc:
        return [str(exc)]
    return []


def _knob_problems(exp: Experiment) -> list[str]:
    out = []
    pinned = {**exp.current, **exp.search.fixed}
    searched = exp.search.knobs
    kmin, kmax = pinned.get("kmin_bytes"), pinned.get("kmax_bytes")
    if "kmin_bytes" not in searched:
        kmin_v = kmin if kmin is not None else KNOBS["kmin_bytes"].default
        kmax_v = kmax if kmax is not None else KNOBS["kmax_bytes"].default
        if kmin_v >= kmax_v:
            field = "search.fixed.kmin_bytes" if "kmin_bytes" in exp.search.fixed else (
                "current.kmin_bytes" if kmin is not None else "search.fixed.kmax_bytes")
            out.append(f"{field}: kmin_bytes {kmin_v} >= kmax_bytes {kmax_v} (Kmin must be "
                       "below Kmax) -- lower kmin_bytes or raise kmax_bytes")
    elif kmax is not None:
        low = searched["kmin_bytes"].low or KNOBS["kmin_bytes"].lo
        if low >= kmax:
            out.append(f"search.knobs.kmin_bytes.low: {low:g} >= the pinned kmax_bytes {kmax} "
                       "-- search kmax_ratio instead of pinning kmax_bytes, or lower the range")
    inv_file = exp.fabric.inventory_file
    if exp.fabric.backend == "ssh" and inv_file is not None:
        path = Path(os.path.expandvars(os.path.expanduser(inv_file)))
        if "$" not in str(path) and path.is_dir():
            out.append(f"fabric.inventory_file: {inv_file} is a directory, not an inventory "
                       "file -- give the YAML file inside it")
        elif "$" not in str(path) and not path.is_file():
            out.append(f"fabric.inventory_file: {inv_file} does not exist -- fix the path "
                       f"(relative paths start from {Path.cwd()})")
    if exp.fabric.backend == "sim":
        line = int(exp.fabric.topology.nic_gbps * 1000)
        for name in RATE_KNOBS:
            value = pinned.get(name)
            if value is not None and value > line:
                where = "search.fixed" if name in exp.search.fixed else "current"
                out.append(f"{where}.{name}: {value} Mbit/s above the NIC line rate {line} "
                           f"Mbit/s -- use at most {line} (0 = port speed for rpg_max_rate)")
            rng = searched.get(name)
            if rng is not None and rng.low is not None and rng.low > line:
                out.append(f"search.knobs.{name}.low: {rng.low:g} Mbit/s above the NIC line "
                           f"rate {line} Mbit/s -- lower the range")
    return out


def inventory_problems(inv: Inventory, source: str) -> list[str]:
    """Secrets written into the file, key files and known_hosts that cannot be read."""
    out = []
    for i, t in enumerate((*inv.hosts, *inv.switches)):
        kind = "hosts" if i < len(inv.hosts) else "switches"
        idx = i if i < len(inv.hosts) else i - len(inv.hosts)
        where = f"{kind}[{idx}] ({t.name})"
        for secret in ("password", "key_passphrase"):
            if getattr(t, secret) is not None:
                out.append(f"{source}: {where}.{secret}: secrets are never read from files -- "
                           "remove it and use the SSH agent or a key file (key_file)")
        if t.key_file is not None:
            path = Path(os.path.expanduser(t.key_file))
            why = _unlookable(path)
            if why:
                out.append(f"{source}: {where}.key_file: {why} -- fix the path, or drop "
                           "key_file to use the SSH agent")
            elif path.is_dir():
                out.append(f"{source}: {where}.key_file: {t.key_file} is a directory, not a "
                           "key file -- give the private key file inside it")
            elif not path.is_file():
                out.append(f"{source}: {where}.key_file: {t.key_file} does not exist -- fix "
                           "the path, or drop key_file to use the SSH agent")
            elif not os.access(path, os.R_OK):
                out.append(f"{source}: {where}.key_file: {t.key_file} is not readable -- fix "
                           "its permissions (chmod 600, owned by you)")
    kh = Path(os.path.expanduser(inv.ssh.known_hosts))
    why = _unlookable(kh)
    if why:
        out.append(f"{source}: ssh.known_hosts: {why} -- point it at an OpenSSH known_hosts "
                   "file")
    elif not inv.ssh.trust_on_first_use and not kh.exists():
        out.append(f"{source}: ssh.known_hosts: {inv.ssh.known_hosts} does not exist -- add "
                   "the hosts' keys with ssh-keyscan, or set ssh.trust_on_first_use: true")
    elif kh.exists() and str(kh) != os.devnull and not kh.is_file():
        # /dev/zero would be read without end; /dev/null (no host known) stays allowed
        out.append(f"{source}: ssh.known_hosts: {inv.ssh.known_hosts} is not a regular file -- "
                   "point it at an OpenSSH known_hosts file")
    return out


def _unlookable(path: Path) -> str:
    """Why ``path`` cannot even be looked up (a name too long for the file system, ...), or
    "" (Python 3.11's ``Path.exists`` raises for those instead of answering)."""
    try:
        path.exists()
    except OSError as exc:
        return f"cannot be looked up ({exc.strerror or type(exc).__name__})"
    return ""


def inventory_source(exp: Experiment, source: str) -> str:
    f = exp.fabric.inventory_file
    return os.path.expandvars(os.path.expanduser(f)) if f else f"{source}: fabric.inventory"


def _slice_problems(exp: Experiment) -> list[str]:
    """canary.slices names and counts, checked by every command, not only by ``worker``."""
    from tuner.slices import slices

    if exp.canary.slices is None:
        return []
    try:
        slices(exp)
    except ConfigError as exc:
        return [str(exc)]
    return []


def check_inputs(exp: Experiment, source: str, inventory: Any = None) -> None:
    """Raise ``ConfigError`` listing every contradiction (one line each) or do nothing."""
    lines = [f"{source}: {p}" for p in
             (*_knob_problems(exp), *_url_problems(exp), *_size_problems(exp),
              *_slice_problems(exp))]
    if inventory is not None:
        lines += inventory_problems(inventory, inventory_source(exp, source))
    if lines:
        raise ConfigError("\n".join(lines))


def check_twin(exp: Experiment, source: str) -> None:
    """The twin a run builds (for ``screen.mode: twin`` or ``sampler: twin``) can be built with
    its canary: checked before the run opens a study, so a twin that names a switch it does
    not have leaves nothing behind."""
    if exp.screen.mode != "twin" and exp.sampler.name != "twin":
        return
    from tuner import calibrate
    from tuner.cluster.sim import SimCluster

    try:
        switches, field = calibrate.twin_canary(exp)
        SimCluster(calibrate.twin_spec(exp), switches, field=field)
    except ConfigError as exc:
        raise with_source(exc, source) from None


def with_source(exc: ConfigError, source: str) -> ConfigError:
    """Prefix a backend's ``ConfigError`` with the file it came from (when it lacks one)."""
    text = str(exc)
    return exc if text.startswith(source) else ConfigError(f"{source}: {text}")
