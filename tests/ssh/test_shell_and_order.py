"""Pure parts: quoting, the remote timeout wrapper, and the min < max-safe ECN write order."""

from __future__ import annotations

import random
import shlex
import subprocess

import pytest

from tuner.drivers._ecn import ecn_write_order, states_along
from tuner.settings import EcnSettings
from tuner.ssh.shell import UnsafeValue, check, q, wrap


def test_values_are_checked_and_quoted() -> None:
    assert q("netdev", "ens1f0np0") == "ens1f0np0"
    assert q("path", "/sys/kernel/debug/mlx5/0000:3b:00.0/cc_params") == \
        "/sys/kernel/debug/mlx5/0000:3b:00.0/cc_params"
    assert q("value", 300) == "300"
    for kind, bad in [("netdev", "eth0;id"), ("netdev", "a" * 16), ("path", "/a/../b"),
                      ("path", "/a b"), ("switch_port", "swp1 swp2"), ("env_value", "$(id)")]:
        with pytest.raises(UnsafeValue):
            check(kind, bad)
    with pytest.raises(UnsafeValue):
        q("value", True)


def test_wrap_kills_remotely_and_runs_the_exact_command() -> None:
    line = wrap("echo 'a b' | tr a-z A-Z", 7)
    assert line.startswith("timeout --kill-after=5 7 bash -c ")
    assert shlex.split(line)[-1] == "echo 'a b' | tr a-z A-Z"
    assert wrap("true", 3, sudo=True).startswith("sudo -n timeout --kill-after=5 3 bash -c ")
    assert wrap("true", 3, pid=True).startswith("echo $$; exec timeout")
    # The wrapper really runs here (GNU timeout + bash), and really times out.
    out = subprocess.run(["bash", "-c", line], capture_output=True, text=True, check=True)
    assert out.stdout == "A B\n"
    slow = subprocess.run(["bash", "-c", wrap("sleep 5", 1)], capture_output=True, check=False)
    assert slow.returncode == 124


def _ok(kmin: int, kmax: int) -> bool:
    return kmin < kmax


def test_raising_writes_max_first_and_lowering_writes_min_first() -> None:
    cur = EcnSettings(kmin_bytes=100_000, kmax_bytes=200_000, pmax_percent=5)
    up = EcnSettings(kmin_bytes=1_000_000, kmax_bytes=2_000_000, pmax_percent=20)
    down = EcnSettings(kmin_bytes=10_000, kmax_bytes=50_000, pmax_percent=5)
    assert ecn_write_order(cur, up) == [("kmax_bytes", 2_000_000), ("kmin_bytes", 1_000_000),
                                        ("pmax_percent", 20)]
    assert ecn_write_order(cur, down) == [("kmin_bytes", 10_000), ("kmax_bytes", 50_000)]
    assert ecn_write_order(cur, cur) == []
    # The naive order (gmax then gmin, as one ecnconfig call writes) breaks when lowering:
    assert not _ok(cur.kmin_bytes, down.kmax_bytes)


def test_every_intermediate_state_keeps_min_below_max() -> None:
    rng = random.Random(4)
    for _ in range(5000):
        a, b = sorted(rng.sample(range(1_000, 5_000_000, 1_000), 2))
        c, d = sorted(rng.sample(range(1_000, 5_000_000, 1_000), 2))
        cur = EcnSettings(kmin_bytes=a, kmax_bytes=b)
        new = EcnSettings(kmin_bytes=c, kmax_bytes=d, pmax_percent=rng.randint(0, 100))
        steps = ecn_write_order(cur, new)
        states = states_along(cur, steps)
        assert all(_ok(lo, hi) for lo, hi in states), (cur, new, steps)
        final = states[-1] if states else (a, b)
        assert final == (c, d)
