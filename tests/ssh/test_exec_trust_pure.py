"""``tuner.ssh.exec_trust`` judged on ``stat``/``readlink`` answers: OpenSSH's rule, a sticky
directory accepted, a symlink's own bits ignored but its target checked."""

from __future__ import annotations

from tuner.ssh.exec_trust import components, parse_probe, probe_command, problems

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
