"""``tuner.ssh.exec_trust`` judged on ``stat``/``readlink`` answers: OpenSSH's rule, a sticky
directory accepted, a symlink's own bits ignored but its target checked."""

from __future__ import annotations

from tuner.ssh.exec_trust import (
    components,
    host_problems,
    parse_probe,
    parse_resolve,
    probe_command,
    problems,
)

BIN = "/opt/nccl/all_reduce_perf"
REG, DIR, LNK = 0o100000, 0o040000, 0o120000


def _answer(uid: int, stats: dict[str, tuple[int, int]], resolved: list[str]) -> str:
    return "\n".join([str(uid), *(f"{u} {m:x} {p}" for p, (u, m) in stats.items()),
                      *resolved])


def test_components_and_command_quote_every_path() -> None:
    assert components(BIN) == [BIN, "/opt/nccl", "/opt", "/"]
    assert probe_command(["/opt/a b"]).endswith("{ readlink -e -- '/opt/a b' || echo missing; }")


def test_sticky_directory_accepted_plain_world_writable_refused() -> None:
    stats = {BIN: (0, REG | 0o755), "/opt/nccl": (0, DIR | 0o755), "/opt": (0, DIR | 0o1777),
             "/": (0, DIR | 0o755)}
    assert problems(parse_probe(_answer(0, stats, [BIN]), [BIN]), [BIN]) == []
    stats["/opt"] = (0, DIR | 0o777)
    assert problems(parse_probe(_answer(0, stats, [BIN]), [BIN]), [BIN]) == [
        f"{BIN}: /opt writable by group or others (mode 0777)"]


def test_login_user_may_own_it_another_account_may_not() -> None:
    stats = {BIN: (1000, REG | 0o755), "/opt/nccl": (1000, DIR | 0o755),
             "/opt": (0, DIR | 0o755), "/": (0, DIR | 0o755)}
    assert problems(parse_probe(_answer(1000, stats, [BIN]), [BIN]), [BIN]) == []
    assert problems(parse_probe(_answer(0, stats, [BIN]), [BIN]), [BIN]) == [
        f"{BIN}: {BIN} owned by uid 1000; /opt/nccl owned by uid 1000"]


def test_a_symlink_is_judged_by_its_directory_and_target() -> None:
    real = "/srv/x/all_reduce_perf"
    stats = {BIN: (0, LNK | 0o777), "/opt/nccl": (0, DIR | 0o755), "/opt": (0, DIR | 0o755),
             "/": (0, DIR | 0o755), real: (0, REG | 0o755), "/srv/x": (0, DIR | 0o755),
             "/srv": (0, DIR | 0o755)}
    assert problems(parse_probe(_answer(0, stats, [real]), [BIN]), [BIN]) == []
    del stats["/srv"]
    assert problems(parse_probe(_answer(0, stats, [real]), [BIN]), [BIN]) == [
        f"{BIN} (-> {real}): /srv not readable"]


def test_a_missing_binary() -> None:
    stats = {"/opt/nccl": (0, DIR | 0o755), "/opt": (0, DIR | 0o755), "/": (0, DIR | 0o755)}
    text = _answer(0, stats, []) + "\nmissing"
    assert problems(parse_probe(text, [BIN]), [BIN]) == [f"{BIN}: not found"]


def _path_answer(path: str, where: str) -> str:
    return f"{path}\n{where}\n"


def test_path_entries_searched_first_must_be_closed_to_others() -> None:
    """mpirun found in /usr/bin: /usr/local/bin, searched first, is judged strictly (a sticky
    bit does not stop anyone creating a new mpirun there), /opt/late, searched after, not at
    all; a relative entry searched first is refused."""
    mpirun = "/usr/bin/mpirun"
    stats = {mpirun: (0, REG | 0o755), "/usr/bin": (0, DIR | 0o755), "/usr": (0, DIR | 0o755),
             "/": (0, DIR | 0o755), "/usr/local/bin": (0, DIR | 0o755),
             "/usr/local": (0, DIR | 0o755), "/opt/late": (0, DIR | 0o777),
             "/opt": (0, DIR | 0o755)}
    found = parse_resolve(_path_answer("/usr/local/bin:/usr/bin:/opt/late", mpirun), ["mpirun"])
    assert found.where == {"mpirun": mpirun} and found.searched_before("mpirun") == [
        "/usr/local/bin"]
    probe = parse_probe(_answer(0, stats, [mpirun]), [mpirun])
    assert host_problems(probe, found, [], ["mpirun"]) == ([], [])
    stats["/usr/local/bin"] = (0, DIR | 0o1777)
    probe = parse_probe(_answer(0, stats, [mpirun]), [mpirun])
    assert host_problems(probe, found, [], ["mpirun"])[1] == [
        f"mpirun (on PATH: {mpirun}): /usr/local/bin (in PATH before it) writable by group "
        "or others (mode 1777): a mpirun created there would run"]
    # a missing entry: its deepest existing directory decides, sticky or not
    found = parse_resolve(_path_answer("/tmp/bin:/usr/bin", mpirun), ["mpirun"])
    stats["/tmp"] = (0, DIR | 0o1777)
    probe = parse_probe(_answer(0, stats, [mpirun]), [mpirun])
    assert "/tmp (in PATH before it) writable by group or others (mode 1777)" in \
        host_problems(probe, found, [], ["mpirun"])[1][0]
    found = parse_resolve(_path_answer(".:/usr/bin", mpirun), ["mpirun"])
    assert host_problems(probe, found, [], ["mpirun"])[1] == [
        f"mpirun (on PATH: {mpirun}): PATH entry '.' (relative) is searched first"]


def test_a_program_not_on_path_or_not_a_file() -> None:
    found = parse_resolve("/usr/bin:/bin\nmissing\nib_write_bw\n", ["mpirun", "ib_write_bw"])
    assert found.where == {}  # `command -v` of a function or builtin prints its name: no file
    probe = parse_probe(_answer(0, {}, []), [])
    assert host_problems(probe, found, [], ["mpirun"])[1] == [
        "mpirun: not found on the login user's PATH (/usr/bin:/bin)"]
