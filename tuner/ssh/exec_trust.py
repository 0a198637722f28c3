"""Who else could change what a measurement executes: the nccl-tests binaries it runs by path.

``launcher.nccl_tests_dir`` names binaries that every canary host runs as the login user (root
by default). Whoever can write one of them, or rename an entry of a directory above it, chooses
the code. Pre-flight applies OpenSSH's rule for ``authorized_keys`` (StrictModes,
``auth_secure_path``): the binary and every directory up to ``/`` are owned by root or the
login user and writable by neither group nor others; a sticky directory (``/tmp``) is accepted,
since nobody but an entry's owner may rename or remove it there. Symlinks are followed and the
target's directories are checked too. A directory the site vouches for
(``launcher.trusted_dirs``) is reported, not refused.

Read-only: ``id -u``, ``stat`` and ``readlink -e`` as the login user, never under sudo.
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
    owners = {0, probe.uid}
    for b in binaries:
        if b not in probe.stats or b not in probe.resolved:
            out.append(f"{b}: not found")
            continue
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
                why.append(f"{path} writable by group or others (mode "
                           f"{stat.S_IMODE(mode):04o})")
        if why:
            real = f" (-> {probe.resolved[b]})" if probe.resolved[b] != b else ""
            out.append(f"{b}{real}: " + "; ".join(why))
    return out


def workload_binaries(inv: Inventory, workload: Any) -> list[str]:
    """The nccl-tests binaries the workload's collective parts run, by the measurement's own
    builder (``tuner.ssh.plan.binary_path``)."""
    return list(dict.fromkeys(binary_path(inv, p.op) for p in workload.collectives))


def read_probe(conn: Any, binaries: list[str]) -> Probe:
    """Ask one host: one round trip, a second one only where a binary is a symlink."""
    res = conn.run(probe_command(binaries), check=False, sudo=False, timeout_s=30)
    probe = parse_probe(res.stdout, binaries)
    targets = [r for r in probe.resolved.values()
               if any(c not in probe.stats for c in components(r))]
    if targets:
        parse_probe(conn.run(stat_command(targets), check=False, sudo=False,
                             timeout_s=30).stdout, [], probe)
    return probe


def exec_checks(exp: object, cluster: object) -> list[CheckResult]:
    """Pre-flight lines (check ``executables``), one per canary host: the nccl-tests binaries
    are safe from other accounts, or the inventory vouches for their directory."""
    from safety.preflight import CheckResult

    inner: Any = getattr(cluster, "inner", cluster)
    inv = getattr(inner, "inventory", None)
    workload = getattr(exp, "workload", None)
    if inv is None or workload is None or not workload.collectives:
        return []
    bins = workload_binaries(inv, workload)
    hosts = [h.name for h in inv.hosts]
    answers = inner.pool.fan_out(lambda c: read_probe(c, bins), hosts)
    trusted = inv.launcher.nccl_tests_dir.rstrip("/") in {
        d.rstrip("/") for d in inv.launcher.trusted_dirs}
    out = []
    for name in hosts:
        o = answers[name]
        if o.error is not None:
            out.append(CheckResult(check="executables", target=name, status="fail",
                                   evidence=f"could not inspect {', '.join(bins)}: {o.error}"))
            continue
        found = problems(o.value, bins) if o.value.uid is not None else [
            "the login user's uid (id -u) was not readable"]
        if not found:
            out.append(CheckResult(check="executables", target=name, status="pass",
                                   evidence=f"{', '.join(bins)}: owned by root or the login "
                                            "user, writable by no one else, up to /"))
        elif trusted:
            out.append(CheckResult(check="executables", target=name, status="warn",
                                   evidence="; ".join(found) + " (accepted: launcher."
                                            "trusted_dirs lists launcher.nccl_tests_dir)"))
        else:
            out.append(CheckResult(
                check="executables", target=name, status="fail",
                evidence="; ".join(found) + ": another account could choose the code every "
                         "rank runs; make the binaries and their directories owned by root "
                         "and not group/world-writable, or vouch for the directory with "
                         f"launcher.trusted_dirs: [{inv.launcher.nccl_tests_dir}]"))
    return out
