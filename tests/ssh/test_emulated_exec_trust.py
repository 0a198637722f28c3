"""Pre-flight refuses nccl-tests binaries another account could change (``tuner.ssh.exec_trust``):
asked over SSH on every emulated host with ``stat``, the rule OpenSSH applies to
``authorized_keys``; ``launcher.trusted_dirs`` vouches for the directory instead."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import Result

from tests.ssh.conftest import run_preflight
from tuner.emulated.cluster import EmulatedCluster

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120)]


def nccl_dir(emu: EmulatedCluster, tmp_path: Path) -> Path:
    """A private nccl-tests directory (the emulated mpirun runs any path's basename)."""
    d = tmp_path / "nccl-tests" / "build"
    d.mkdir(parents=True)
    for p in (tmp_path, tmp_path / "nccl-tests", d):
        p.chmod(0o755)
    shutil.copy2(emu.bin_dir / "all_reduce_perf", d / "all_reduce_perf")
    return d


def preflight(emu: EmulatedCluster, tmp_path: Path, **launcher: Any
              ) -> tuple[Result, list[dict[str, Any]]]:
    inv = yaml.safe_load(Path(emu.inventory_path).read_text())
    inv["launcher"].update(launcher)
    res, rows = run_preflight(emu, tmp_path, inv, "emu-exec")
    return res, [r for r in rows if r["check"] == "executables"]


def test_safe_binaries_pass_on_every_host(emulated_cluster: EmulatedCluster,
                                          tmp_path: Path) -> None:
    d = nccl_dir(emulated_cluster, tmp_path)
    res, rows = preflight(emulated_cluster, tmp_path, nccl_tests_dir=str(d))
    assert [(r["target"], r["status"]) for r in rows] == [
        (h, "pass") for h in emulated_cluster.host_names], res.output
    assert rows[0]["evidence"] == (
        f"{d}/all_reduce_perf, mpirun: owned by root or the login user, writable by no one "
        f"else, up to /; mpirun -> {emulated_cluster.bin_dir}/mpirun")


def test_a_program_from_path_another_account_could_change_is_refused(
        emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    """mpirun runs by name: where the login user's PATH finds it is judged like the nccl-tests
    binaries, and ``trusted_dirs`` (a vouch for the nccl-tests directory) does not cover it."""
    d = nccl_dir(emulated_cluster, tmp_path)
    bin_dir = emulated_cluster.bin_dir
    mode = bin_dir.stat().st_mode & 0o7777
    bin_dir.chmod(0o777)
    try:
        res, rows = preflight(emulated_cluster, tmp_path, nccl_tests_dir=str(d),
                              trusted_dirs=[str(d)])
    finally:
        bin_dir.chmod(mode)
    assert res.exit_code == 3, res.output
    assert [r["status"] for r in rows] == ["fail"] * len(emulated_cluster.host_names)
    assert rows[0]["evidence"].startswith(
        f"mpirun (on PATH: {bin_dir}/mpirun): {bin_dir} writable by group or others "
        "(mode 0777): another account could choose the code"), rows[0]["evidence"]


@pytest.mark.parametrize("change, why", [
    (lambda p: p.chmod(0o777), "all_reduce_perf writable by group or others (mode 0777)"),
    (lambda p: os.chown(p, 12345, -1), "all_reduce_perf owned by uid 12345"),
    (lambda p: p.parent.chmod(0o775), "build writable by group or others (mode 0775)"),
])
def test_binaries_others_could_change_are_refused_with_host_and_path(
        emulated_cluster: EmulatedCluster, tmp_path: Path, change: Any, why: str) -> None:
    d = nccl_dir(emulated_cluster, tmp_path)
    change(d / "all_reduce_perf")
    res, rows = preflight(emulated_cluster, tmp_path, nccl_tests_dir=str(d))
    assert res.exit_code == 3, res.output
    assert [(r["target"], r["status"]) for r in rows] == [
        (h, "fail") for h in emulated_cluster.host_names]
    assert all(f"{d}/all_reduce_perf: " in r["evidence"] and why in r["evidence"]
               for r in rows), rows
    assert f"executables host0: {d}/all_reduce_perf: " in res.output  # the exit-3 reason


def test_a_symlink_to_a_writable_binary_is_refused(emulated_cluster: EmulatedCluster,
                                                   tmp_path: Path) -> None:
    d = nccl_dir(emulated_cluster, tmp_path)
    other = tmp_path / "scratch"
    other.mkdir(mode=0o777)
    other.chmod(0o777)
    (d / "all_reduce_perf").rename(other / "all_reduce_perf")
    (d / "all_reduce_perf").symlink_to(other / "all_reduce_perf")
    res, rows = preflight(emulated_cluster, tmp_path, nccl_tests_dir=str(d))
    assert res.exit_code == 3, res.output
    assert f"(-> {other}/all_reduce_perf): {other} writable by group or others (mode 0777)" \
        in rows[0]["evidence"]


def test_a_missing_binary_is_refused(emulated_cluster: EmulatedCluster, tmp_path: Path) -> None:
    d = nccl_dir(emulated_cluster, tmp_path)
    (d / "all_reduce_perf").unlink()
    res, rows = preflight(emulated_cluster, tmp_path, nccl_tests_dir=str(d))
    assert res.exit_code == 3, res.output
    assert rows[0]["evidence"].startswith(f"{d}/all_reduce_perf: not found")


def test_a_directory_the_inventory_vouches_for_is_accepted(emulated_cluster: EmulatedCluster,
                                                          tmp_path: Path) -> None:
    d = nccl_dir(emulated_cluster, tmp_path)
    (d / "all_reduce_perf").chmod(0o777)
    res, rows = preflight(emulated_cluster, tmp_path, nccl_tests_dir=str(d),
                          trusted_dirs=[str(d)])
    assert res.exit_code == 0, res.output
    assert {r["status"] for r in rows} == {"warn"}
    assert "accepted: launcher.trusted_dirs" in rows[0]["evidence"]
