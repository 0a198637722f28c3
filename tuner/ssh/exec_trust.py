"""Who else could change what a measurement executes: the nccl-tests binaries it runs by path,
and the programs it runs by name from the login user's PATH (mpirun or srun, perftest's tools).

``launcher.nccl_tests_dir`` names binaries that every canary host runs as the login user (root
by default). Whoever can write one of them, or rename an entry of a directory above it, chooses
the code. Pre-flight applies OpenSSH's rule for ``authorized_keys`` (StrictModes,
``auth_secure_path``): the binary and every directory up to ``/`` are owned by root or the
login user and writable by neither group nor others; a sticky directory (``/tmp``) is accepted,
since nobody but an entry's owner may rename or remove it there. Symlinks are followed and the
target's directories are checked too. A directory the site vouches for
(``launcher.trusted_dirs``) is reported, not refused.

A program found on PATH is judged by the same rule where it was found, and so is every PATH
directory searched before that one, more strictly: a program planted there would run instead,
and a sticky bit does not stop anyone from creating one (a relative entry is refused outright).

Read-only: ``id -u``, ``command -v``, ``stat`` and ``readlink -e`` as the login user, never
under sudo.
"""

from __future__ import annotations

import re
import stat
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tuner.ssh.plan import binary_path, join

if TYPE_CHECKING:
    from safety.preflight import CheckResult
    from tuner.inventory import Inventory

STAT_FORMAT = "%u %f %n"  # owner uid, raw mode in hex (type and permission bits), name
_STAT = re.compile(r"^(\d+) ([0-9a-f]+) (/.*)$")
MISSING = "missing"  # what the probe prints for a binary readlink cannot resolve


def components(path: str) -> list[str]:
    """``/a/b/c`` -> ``['/a/b/c', '/a/b', '/a', '/']``."""
    parts = [p for p in path.split("/") if p]
    return ["/" + "/".join(parts[:i]) for i in range(len(parts), 0, -1)] + ["/"]


def _all_components(paths: list[str]) -> list[str]:
    return list(dict.fromkeys(c for p in paths for c in components(p)))


def probe_command(binaries: list[str]) -> str:
    """The login user's uid, ``stat`` of every binary and directory above it, and where each
    binary resolves to (``readlink -e``, one line per binary: ``missing`` when it does not)."""
    resolve = [f"{{ {join(['readlink', '-e', '--', b])} || echo {MISSING}; }}" for b in binaries]
    return "; ".join([join(["id", "-u"]),
                      join(["stat", "-c", STAT_FORMAT, "--", *_all_components(binaries)]),
                      *resolve])


def stat_command(paths: list[str]) -> str:
    """``stat`` of every component of ``paths`` (the symlink targets' directories)."""
    return join(["stat", "-c", STAT_FORMAT, "--", *_all_components(paths)])


@dataclass
class Probe:
    """What one host answered: the login uid, ``path -> (owner, mode)`` and resolved paths."""

    uid: int | None = None
    stats: dict[str, tuple[int, int]] = field(default_factory=dict)
    resolved: dict[str, str] = field(default_factory=dict)


def parse_probe(text: str, binaries: list[str], probe: Probe | None = None) -> Probe:
    """Fill ``probe`` from a ``probe_command`` (or ``stat_command``) answer."""
    out = probe or Probe()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if lines and out.uid is None and lines[0].isdigit():
        out.uid = int(lines.pop(0))
    found = []
    for ln in lines:
        if m := _STAT.match(ln):
            out.stats[m.group(3)] = (int(m.group(1)), int(m.group(2), 16))
        elif ln.startswith("/") or ln == MISSING:
            found.append(ln)
    for b, real in zip(binaries, found, strict=False):  # one line per binary, in order
        if real != MISSING:
            out.resolved[b] = real
    return out


def problems(probe: Probe, binaries: list[str]) -> list[str]:
    """One line per binary that someone other than root or the login user could change."""
    out = []
    for b in binaries:
        why = reasons(probe, b)
        if why:
            real = probe.resolved.get(b, b)
            out.append(f"{b}{f' (-> {real})' if real != b else ''}: " + "; ".join(why))
    return out


def reasons(probe: Probe, b: str) -> list[str]:
    """Why another account could change binary ``b`` (its path and target, up to /)."""
    if b not in probe.stats or b not in probe.resolved:
        return ["not found"]
    owners = {0, probe.uid}
    why = []
    for path in dict.fromkeys([*components(b), *components(probe.resolved[b])]):
        if path not in probe.stats:
            why.append(f"{path} not readable")
            continue
        uid, mode = probe.stats[path]
        if stat.S_ISLNK(mode):
            continue  # a link's own bits mean nothing; its directory and target count
        if uid not in owners:
            why.append(f"{path} owned by uid {uid}")
        sticky_dir = stat.S_ISDIR(mode) and mode & stat.S_ISVTX
        if mode & 0o022 and not sticky_dir:
            why.append(f"{path} writable by group or others (mode {stat.S_IMODE(mode):04o})")
    return why


def path_programs(inv: Inventory, workload: Any) -> list[str]:
    """What the workload runs by name from PATH (the measurement's own words: the launcher
    template's first word, ``perftest_bin`` for probes, ``bw_bin`` for background parts); a
    name with a slash is a path and is checked as one."""
    la = inv.launcher
    names = [la.mpirun.split()[0]] if workload.collectives else []
    names += [la.perftest_bin] if workload.probes else []
    names += [la.bw_bin] if workload.background else []
    return list(dict.fromkeys(names))


def resolve_command(names: list[str]) -> str:
    """The login user's PATH, then where each name resolves, one line each."""
    return "; ".join(['printf "%s\\n" "$PATH"',
                      *(f"{{ {join(['command', '-v', '--', n])} || echo {MISSING}; }}"
                        for n in names)])


@dataclass
class Resolved:
    """``resolve_command``'s answer: the PATH entries and ``name -> path`` of those found."""

    path: list[str] = field(default_factory=list)
    where: dict[str, str] = field(default_factory=dict)

    def searched_before(self, name: str) -> list[str]:
        """The PATH entries searched before the one ``name`` was found in."""
        folder = self.where[name].rsplit("/", 1)[0] or "/"
        out = []
        for d in self.path:
            if (d.rstrip("/") or "/") == folder:
                break
            out.append(d)
        return out


def parse_resolve(text: str, names: list[str]) -> Resolved:
    lines = text.splitlines()
    out = Resolved(path=lines[0].split(":") if lines else [])
    for n, real in zip(names, lines[1:], strict=False):
        if real.startswith("/"):  # not a builtin, function or MISSING
            out.where[n] = real.strip()
    return out


def shadow_problems(probe: Probe, name: str, folders: list[str]) -> list[str]:
    """Why a program named ``name`` could be planted in a PATH entry searched first: the entry
    is relative, or its deepest existing directory is writable by another account (a sticky
    bit no excuse: it only protects entries that exist), or its parents fail the usual rule."""
    out = []
    owners = {0, probe.uid}
    for d in folders:
        if not d.startswith("/"):
            out.append(f"PATH entry {d!r} (relative) is searched first")
            continue
        existing = [c for c in components(d) if c in probe.stats]
        for i, c in enumerate(existing):
            uid, mode = probe.stats[c]
            if uid not in owners:
                out.append(f"{c} (in PATH before it) owned by uid {uid}")
            sticky_dir = stat.S_ISDIR(mode) and mode & stat.S_ISVTX
            if mode & 0o022 and (i == 0 or not sticky_dir):
                out.append(f"{c} (in PATH before it) writable by group or others (mode "
                           f"{stat.S_IMODE(mode):04o}): a {name} created there would run")
    return out


def workload_binaries(inv: Inventory, workload: Any) -> list[str]:
    """The nccl-tests binaries the workload's collective parts run, by the measurement's own
    builder (``tuner.ssh.plan.binary_path``)."""
    return list(dict.fromkeys(binary_path(inv, p.op) for p in workload.collectives))


def read_probe(conn: Any, binaries: list[str], names: list[str] | None = None
               ) -> tuple[Probe, Resolved]:
    """Ask one host: where ``names`` resolve on PATH, then one ``stat`` round trip over the
    binaries, those programs and the PATH entries searched before them, and a third only
    where a binary is a symlink."""
    found = Resolved()
    if names:
        found = parse_resolve(conn.run(resolve_command(names), check=False, sudo=False,
                                       timeout_s=30).stdout, names)
    paths = [*binaries, *(p for p in found.where.values() if p not in binaries)]
    first = [d for n in found.where for d in found.searched_before(n) if d.startswith("/")]
    command = probe_command(paths) + ("; " + stat_command(first) if first else "")
    probe = parse_probe(conn.run(command, check=False, sudo=False, timeout_s=30).stdout, paths)
    targets = [r for r in probe.resolved.values()
               if any(c not in probe.stats for c in components(r))]
    if targets:
        parse_probe(conn.run(stat_command(targets), check=False, sudo=False,
                             timeout_s=30).stdout, [], probe)
    return probe, found


def host_problems(probe: Probe, found: Resolved, binaries: list[str],
                  names: list[str]) -> tuple[list[str], list[str]]:
    """(the binaries' problems, the PATH programs' problems) on one host, a line each."""
    if probe.uid is None:
        return ["the login user's uid (id -u) was not readable"], []
    on_path = []
    for n in names:
        if n not in found.where:
            on_path.append(f"{n}: not found on the login user's PATH ({':'.join(found.path)})")
            continue
        p = found.where[n]
        why = reasons(probe, p) + shadow_problems(probe, n, found.searched_before(n))
        if why:
            on_path.append(f"{n} (on PATH: {p}): " + "; ".join(why))
    return problems(probe, binaries), on_path


def exec_checks(exp: object, cluster: object) -> list[CheckResult]:
    """Pre-flight lines (check ``executables``), one per canary host: the nccl-tests binaries
    and the programs run from PATH are safe from other accounts (the inventory may vouch for
    the nccl-tests directory)."""
    from safety.preflight import CheckResult

    inner: Any = getattr(cluster, "inner", cluster)
    inv = getattr(inner, "inventory", None)
    workload = getattr(exp, "workload", None)
    if inv is None or workload is None:
        return []
    bins = workload_binaries(inv, workload) if workload.collectives else []
    names = path_programs(inv, workload)
    absolute = [n for n in names if "/" in n]
    bins += [n for n in absolute if n not in bins]
    names = [n for n in names if "/" not in n]
    if not bins and not names:
        return []
    hosts = [h.name for h in inv.hosts]
    answers = inner.pool.fan_out(lambda c: read_probe(c, bins, names), hosts)
    trusted = inv.launcher.nccl_tests_dir.rstrip("/") in {
        d.rstrip("/") for d in inv.launcher.trusted_dirs}
    what = ", ".join([*bins, *names])
    out = []
    for name in hosts:
        o = answers[name]
        if o.error is not None:
            out.append(CheckResult(check="executables", target=name, status="fail",
                                   evidence=f"could not inspect {what}: {o.error}"))
            continue
        probe, found = o.value
        in_dir, on_path = host_problems(probe, found, bins, names)
        vouched = trusted and all(b.startswith(inv.launcher.nccl_tests_dir.rstrip("/") + "/")
                                  for b in bins)
        if not in_dir and not on_path:
            where = "".join(f"; {n} -> {found.where[n]}" for n in names)
            out.append(CheckResult(check="executables", target=name, status="pass",
                                   evidence=f"{what}: owned by root or the login user, "
                                            f"writable by no one else, up to /{where}"))
        elif vouched and not on_path:
            out.append(CheckResult(check="executables", target=name, status="warn",
                                   evidence="; ".join(in_dir) + " (accepted: launcher."
                                            "trusted_dirs lists launcher.nccl_tests_dir)"))
        else:
            out.append(CheckResult(
                check="executables", target=name, status="fail",
                evidence="; ".join([*in_dir, *on_path]) + ": another account could choose "
                         "the code a measurement runs; make the programs and their "
                         "directories owned by root and not group/world-writable"
                         + ("" if trusted or not in_dir else
                            ", or vouch for the nccl-tests directory with launcher."
                            f"trusted_dirs: [{inv.launcher.nccl_tests_dir}]")))
    return out
