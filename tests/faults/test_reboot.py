"""What a reboot does to each platform, and NVUE's own commit-confirm, on the emulated cluster.

The ``nv`` stand-in is held to what Cumulus Linux documents (NVUE command reference, "nv config
apply": ``--confirm [<time>]`` rolls back unless confirmed, ten minutes by default, a bare
number is minutes -- ``--confirm 60`` is one hour; ``--confirm-status``; auto-save on by
default since 5.9, so a plain apply is also the startup configuration) and to the NAPALM
Cumulus driver's use of it (``--confirm <n>s``, ``--confirm-yes``/``--confirm-no``, pending
revisions in state ``confirm`` in ``nv config revision -o json``). It refuses what NVUE has no
form for, e.g. ``nv config confirm``.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from safety.journal import Journal
from tests.emulated.helpers import run
from tests.faults.conftest import lost_trials, wait_until
from tests.faults.emu_helpers import off_baseline, read_canary
from tests.faults.test_ssh_study_faults import run_study
from tuner.emulated import EmulatedCluster
from tuner.emulated.hosts import knob_relpaths, read_knobs
from tuner.settings import Settings

pytestmark = [pytest.mark.ssh, pytest.mark.timeout(120)]
slow = pytest.mark.slow
NVUE = "leaf1"
SET = "nv set qos congestion-control default-global traffic-class 3 min-threshold {v}"


def ok(emu: EmulatedCluster, target: str, command: str) -> str:
    code, out, err = run(emu, target, command)
    assert code == 0, f"{command!r}: rc={code} {err!r}"
    return out


def refused(emu: EmulatedCluster, target: str, command: str) -> str:
    code, _, err = run(emu, target, command)
    assert code != 0, f"{command!r} was accepted"
    return err


def kmin(emu: EmulatedCluster, rev: str = "applied") -> int:
    tc = emu.state(NVUE)[rev]["qos"]["congestion-control"]["default-global"]["traffic-class"]
    return int(tc["3"]["min-threshold"])


@slow
def test_nv_commit_confirm_is_nvues_own(emulated_cluster: EmulatedCluster) -> None:
    emu = emulated_cluster
    # a plain apply with auto-save (the default): applied AND startup -- the reboot hazard
    ok(emu, NVUE, SET.format(v=100000) + " && nv config apply -y")
    assert kmin(emu) == kmin(emu, "startup") == 100000
    # an apply with --confirm: applied, not saved, waiting; no other apply meanwhile
    window = 5
    t0 = time.monotonic()
    out = ok(emu, NVUE, SET.format(v=120000) + f" && nv config apply --confirm {window}s -y "
             ">/dev/null && nv config revision -o json && nv config apply --confirm-status"
             " && { nv config apply -y 2>/dev/null; echo rc=$?; }")
    held = kmin(emu)
    assert time.monotonic() - t0 < window, "too slow to look inside the window"
    revs, status = out.split("}\n}\n", 1)
    assert [v["state"] for v in json.loads(revs + "}\n}").values()] == ["confirm"]
    assert "left before the automatic rollback" in status and status.endswith("rc=1\n")
    assert held == 120000 and kmin(emu, "startup") == 100000
    # ... and NVUE rolls it back by itself, with no session of ours alive
    assert wait_until(lambda: kmin(emu) == 100000, window + 5, 0.05)
    assert window - 1 < time.monotonic() - t0 < window + 4
    assert kmin(emu, "startup") == 100000
    # nothing pending any more; --confirm-yes keeps a revision and (auto-save) saves it
    out = ok(emu, NVUE, "nv config apply --confirm-status; { nv config apply --confirm-no "
             "2>/dev/null; echo rc=$?; } && " + SET.format(v=130000)
             + " && nv config apply --confirm 1m -y && nv config apply --confirm-yes")
    assert "no apply is waiting" in out and "rc=1" in out
    assert kmin(emu) == kmin(emu, "startup") == 130000
    # --confirm-no rolls back at once, and only the pending revision
    revs = ok(emu, NVUE, SET.format(v=140000) + " && nv config apply --confirm 10 -y "
              ">/dev/null && nv config revision -o json")
    rev = next(iter(json.loads(revs)))
    out = ok(emu, NVUE, f"nv config apply 1 --confirm-no 2>/dev/null; echo rc=$?; "
             f"nv config apply {rev} --confirm-no")
    assert out.startswith("rc=1") and kmin(emu) == kmin(emu, "pending") == 130000
    # what NVUE has no form for, each refused (one session: a status word per command)
    bad = ["nv config confirm", "nv config apply --confirm 0", "nv config apply --confirm 5x",
           "nv config apply --confirm-yes --confirm-no", "nv config apply 3 -y",
           "nv config apply --bogus"]
    out = ok(emu, NVUE, "; ".join(f"{c} 2>/dev/null; echo rc=$?" for c in bad))
    assert out.split() == ["rc=1"] * len(bad), dict(zip(bad, out.split(), strict=False))


def _trial(base: Settings) -> Settings:
    """Every canary target moved off ``base`` (switch Kmin, NIC rpg_time_reset)."""
    sw = {k: v.model_copy(update={"kmin_bytes": v.kmin_bytes // 2})
          for k, v in base.switches.items()}
    nics = {k: v.model_copy(update={"rpg_time_reset": v.rpg_time_reset + 7})
            for k, v in base.nics.items()}
    return Settings(switches=sw, nics=nics)


@slow
def test_a_reboot_brings_each_platform_back_to_what_it_boots_from(
        emulated_cluster: EmulatedCluster) -> None:
    """SONiC: the saved config_db.json; NVUE: the startup revision (a plain apply with auto-save
    wrote it, an unconfirmed one did not); mlx5: the firmware's DCQCN, then an enabled boot
    unit's values. With ``keep_settings`` (the worst case) every device keeps the trial."""
    from tuner.cluster.ssh import SshCluster
    from tuner.inventory import load_inventory
    from tuner.lifecycle.persist import BootUnit, persist

    emu = emulated_cluster
    sonic, host, unit_host = "leaf0", "host0/mlx5_0", "host1/mlx5_0"
    for h in emu.host_names:  # no boot unit of an earlier test
        shutil.rmtree(emu.target_dir(h) / "etc", ignore_errors=True)
    with SshCluster(load_inventory(emu.inventory_path)) as c:
        base = c.read_back()
        trial = _trial(base)
        boot_values = trial.nics[unit_host].model_copy(update={"rpg_time_reset": 42})
        persist(BootUnit(c.drivers()[unit_host]), boot_values)  # `promote --persist`
        c.drivers()[NVUE].confirm_s = 600  # the trial's NVUE apply waits for confirmation
        c.apply(trial)
        assert c.read_back() == trial
        for name in (sonic, NVUE, "host0", "host1"):
            emu.reboot(name)
        after = c.read_back()
        assert after.switches[sonic] == base.switches[sonic]  # ecnconfig is runtime-only
        assert after.switches[NVUE] == base.switches[NVUE]  # unconfirmed: never saved
        assert after.nics[host] == base.nics[host]  # the firmware's values (= baseline here)
        assert after.nics[unit_host] == boot_values  # the boot unit ran
        # a plain `nv config apply` (auto-save on): the trial IS the startup configuration
        drv = c.drivers()[NVUE]
        drv.confirm_s, drv.confirm_base = None, None
        c.apply(trial)
        emu.reboot(NVUE)
        assert c.read_back().switches[NVUE] == trial.switches[NVUE]
        # the worst case: everything comes back as it was
        c.apply(trial)
        for name in (sonic, "host0"):
            emu.reboot(name, keep_settings=True)
        kept = c.read_back()
        assert kept.switches[sonic] == trial.switches[sonic]
        assert kept.nics[host] == trial.nics[host]


# -- a reboot in the middle of a study -------------------------------------------------------

def _unsaved_baseline(emu: EmulatedCluster, platform: str) -> str:
    """Give one target a running baseline that its boot source does not hold (an operator's
    change never saved), so the reboot alone cannot bring it back; returns its key."""
    if platform == "sonic":
        def change(s: dict) -> None:
            prof = s["config_db"]["WRED_PROFILE"]["AZURE_LOSSLESS"]
            for colour in ("green", "yellow", "red"):
                prof[f"{colour}_min_threshold"] = "800000"
        emu.edit_state("leaf0", change)
        return "leaf0"
    if platform == "nvue":
        def change_nv(s: dict) -> None:
            s["auto_save"] = False  # Cumulus Linux 5.8 and earlier: apply does not save
            for rev in ("applied", "pending"):
                cc = s[rev]["qos"]["congestion-control"]["default-global"]["traffic-class"]
                cc["3"]["min-threshold"] = 900000
        emu.edit_state(NVUE, change_nv)
        return NVUE
    state = emu.state("host1")
    rel = knob_relpaths(state)["rpg_time_reset"]
    (emu.target_dir("host1") / rel).write_text("250\n")  # runtime only, no boot unit
    return "host1/mlx5_0"


def _device(emu: EmulatedCluster, key: str) -> dict:
    """What the target's device holds, read from the emulated state itself (no SSH)."""
    from tuner.emulated.switches import applied_ecn

    name = key.split("/")[0]
    s = emu.state(name)
    if s["kind"] == "switch":
        return applied_ecn(s)
    return {"rpg_time_reset": read_knobs(emu.target_dir(name), s)["rpg_time_reset"]}


def _values(settings: Settings, key: str) -> dict:
    v = settings.switches.get(key) or settings.nics[key]
    return {k: getattr(v, k) for k in
            (("rpg_time_reset",) if key in settings.nics else
             ("kmin_bytes", "kmax_bytes", "pmax_percent", "enabled"))}


REBOOTS = {"sonic": "SONiC switch", "nvue": "Cumulus NVUE switch", "host": "mlx5 host",
           "nvue-worst": "Cumulus NVUE switch, worst case (came back with the trial)"}


@slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", list(REBOOTS))
def test_target_reboot_mid_trial(emu, tmp_path, reliability, case: str) -> None:
    """The tuner is alive; one canary target reboots while the first trial is measured. The
    target comes back with what it boots from -- here not the journalled baseline, which was
    never saved -- or, in the worst case, with the trial; the tuner restores it at once."""
    platform = case.split("-")[0]
    key = _unsaved_baseline(emu, platform)
    name = key.split("/")[0]
    seen: dict[str, dict] = {}
    t_fault: list[float] = []

    def reboot_during_first_trial(n: int) -> None:
        if n == 2:  # measurement 1 is the baseline (candidate_placements: 0)
            emu.inject(emu.host_names[0], hang={"mpirun": 60})

            def reboot() -> None:
                seen["trial"] = _device(emu, key)
                t_fault.append(time.time())
                emu.reboot(name, keep_settings=case.endswith("worst"))
                seen["after"] = _device(emu, key)
                emu.clear_faults(emu.host_names[0])
            threading.Timer(1.0, reboot).start()

    verdicts, error, exp_path, baseline = run_study(emu, tmp_path,
                                                    at_measure=reboot_during_first_trial)
    assert error is None, error
    assert t_fault
    assert verdicts.split(",")[1] == "failed:measurement", verdicts
    base = _values(baseline, key)
    assert seen["trial"] != base  # the trial was on the target when it rebooted
    if case.endswith("worst"):
        assert seen["after"] == seen["trial"]
        came_back = "the trial's values"
    else:
        assert seen["after"] not in (base, seen["trial"])  # its boot source, not the baseline
        came_back = {"sonic": "the saved `config_db.json` (the runtime `ecnconfig` write and "
                              "an unsaved baseline gone)",
                     "nvue": "the startup revision (the trial's unconfirmed `--confirm` apply "
                             "never saved; an unsaved baseline gone)",
                     "host": "the firmware's DCQCN values (runtime sysfs writes gone, no boot "
                             "unit)"}[platform]
    results = exp_path.parent / "results"
    import optuna

    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    detail = str(study.trials[1].user_attrs.get("detail", ""))
    # the next renewal answers `missing`, or the reboot cut the tuner's connection first
    assert f"dead-man timer gone on ['{key}']" in detail or "connection lost" in detail, detail
    journal = Journal(results / "journal.jsonl")
    ends = [e for e in journal.entries() if e.trial == 1]
    assert ends and ends[0].closed and journal.dirty() is None
    records = [json.loads(x) for x in (results / "journal.jsonl").read_text().splitlines()]
    restore_s = next(r["at"] for r in records if r.get("id") == ends[0].id
                     and r.get("outcome") == "restored") - t_fault[0]
    dirty = off_baseline(read_canary(emu), baseline)
    assert dirty == []
    lost = lost_trials(results)
    assert lost == 0
    reliability.record(f"a target rebooting mid-trial: {REBOOTS[case]} ({name}), tuner alive",
                       f"came back with {came_back}; the trial failed:measurement (timer "
                       "`missing` or connection lost), the journalled baseline was restored "
                       "and verified at once, study went on",
                       dirty_targets=len(dirty), trials_lost=lost, restore_s=restore_s,
                       backend="ssh (emulated)")


# -- NVUE's own dead-man, with the tuner gone -------------------------------------------------

@slow
@pytest.mark.timeout(300)
def test_nvue_confirm_rolls_back_after_tuner_sigkill_then_reboots_and_recover(
        emu, tmp_path, reliability) -> None:
    """ecntune's shell timers are set too slow to matter (600 s): after a SIGKILL only NVUE's
    own ``--confirm`` window heals the switch. Then two other targets reboot while the tuner
    is still gone, and ``ecntune recover`` restores whatever is off the journalled baseline."""
    from tests.faults.emu_helpers import experiment, run_holding_first_trial, sigkill_when

    window = 8
    exp = experiment(emu, tmp_path, trials=5, deadman=600)
    exp.write_text(exp.read_text().replace("deadman_timeout_s: 600,",
                                           f"deadman_timeout_s: 600, nvue_confirm_s: {window},"))
    results = tmp_path / "results"
    journal = Journal(results / "journal.jsonl")
    unsaved = _unsaved_baseline(emu, "host")  # host1's baseline is not what it boots from
    proc, entry = run_holding_first_trial(emu, exp, journal)
    want = _values(entry.settings, NVUE)
    t_kill = sigkill_when(proc, lambda: _device(emu, NVUE) == want)
    base = _values(entry.baseline, NVUE)
    assert emu.state(NVUE).get("confirm"), "the trial's NVUE apply should wait for confirmation"
    assert wait_until(lambda: _device(emu, NVUE) == base, window + 5, 0.1)
    nvue_s = time.monotonic() - t_kill
    assert nvue_s < window + 3
    # NVUE did it: ecntune's timers (600 s) have not fired, the hosts still hold the trial
    assert _device(emu, unsaved) == _values(entry.settings, unsaved)
    startup = emu.state(NVUE)["startup"]["qos"]["congestion-control"]["default-global"]
    assert int(startup["traffic-class"]["3"]["min-threshold"]) == base["kmin_bytes"]
    reliability.record("tuner SIGKILLed mid-trial, ecntune's own timers too slow to matter "
                       "(600 s): NVUE's commit-confirm alone",
                       f"NVUE's `nv config apply --confirm {window}s` (the trial's apply) "
                       "rolled the NVUE switch back to the baseline by itself; its startup "
                       "configuration never held the trial; the other targets were left to "
                       "`recover` (next row)",
                       dirty_targets=0 if _device(emu, NVUE) == base else 1,
                       trials_lost=lost_trials(results), restore_s=nvue_s,
                       backend="ssh (emulated)")
    # the tuner is still gone; two targets reboot
    t_reboot = time.monotonic()
    for name in ("host1", "leaf0"):
        emu.reboot(name)
    assert _device(emu, unsaved) not in (_values(entry.baseline, unsaved),
                                         _values(entry.settings, unsaved))
    dirty_before = off_baseline(read_canary(emu), entry.baseline)
    assert unsaved in dirty_before
    stdout, dirty, lost, restore_s = _recover_clean(emu, exp, journal, entry, t_reboot)
    assert "verified by read-back" in stdout and unsaved in stdout, stdout
    reliability.record("targets rebooting while the tuner is dead (after the SIGKILL above: "
                       "host1 with an unsaved baseline, leaf0)",
                       f"they came back with what they boot from; `ecntune recover` found "
                       f"{len(dirty_before)} target(s) off the journalled baseline "
                       f"({', '.join(dirty_before)}), restored and verified them",
                       dirty_targets=len(dirty), trials_lost=lost, restore_s=restore_s,
                       backend="ssh (emulated)")


@slow
@pytest.mark.timeout(300)
def test_recover_at_once_rolls_back_a_dead_tuners_pending_nvue_confirm(
        emu, tmp_path, reliability) -> None:
    """The tuner is SIGKILLed while its NVUE apply waits for confirmation (both timers far
    off); ``ecntune recover`` runs at once: it takes over the dead tuner's locks, rolls its
    NVUE apply back (NVUE takes no other apply while one waits) and restores the rest."""
    from tests.faults.emu_helpers import experiment, run_holding_first_trial, sigkill_when

    exp = experiment(emu, tmp_path, trials=5, deadman=600)
    results = tmp_path / "results"
    journal = Journal(results / "journal.jsonl")
    proc, entry = run_holding_first_trial(emu, exp, journal)
    t_kill = sigkill_when(proc, lambda: not settled_diff(emu, entry.settings))
    assert emu.state(NVUE).get("confirm")  # NVUE's 600 s window is still open
    stdout, dirty, lost, restore_s = _recover_clean(emu, exp, journal, entry, t_kill)
    assert "took over the lock" in stdout and "verified by read-back" in stdout
    assert not emu.state(NVUE).get("confirm")
    reliability.record("tuner SIGKILLed mid-trial, `ecntune recover` at once (NVUE's apply "
                       "still waiting for confirmation, timers far off)",
                       "`recover` took over the dead tuner's target locks, rolled its NVUE "
                       "apply back (`nv config apply --confirm-no`), restored and verified "
                       "the journalled baseline on every target",
                       dirty_targets=len(dirty), trials_lost=lost, restore_s=restore_s,
                       backend="ssh (emulated)")


def _recover_clean(emu: EmulatedCluster, exp: Path, journal: Journal, entry: Any,
                   t0: float) -> tuple[str, list[str], int, float]:
    """Run ``ecntune recover`` and check it left every target on the journalled baseline,
    nothing dirty in the journal and no trial lost. Returns (stdout, dirty targets, lost
    trials, seconds since ``t0``)."""
    import subprocess

    from tests.faults.conftest import ECNTUNE

    out = subprocess.run([*ECNTUNE, "recover", str(exp)], capture_output=True, text=True,
                         timeout=120)
    restore_s = time.monotonic() - t0
    assert out.returncode == 0, out.stderr
    dirty = off_baseline(read_canary(emu), entry.baseline)
    assert dirty == [] and journal.dirty() is None
    lost = lost_trials(exp.parent / "results")
    assert lost == 0
    return out.stdout, dirty, lost, restore_s


def settled_diff(emu: EmulatedCluster, want: Settings) -> dict:
    """Where the canary's read-back differs from ``want`` (everything while a switch is half
    way through a change)."""
    from tuner.errors import ApplyError

    try:
        return read_canary(emu).diff(want)
    except ApplyError:
        return {"unsettled": True}


@slow
@pytest.mark.timeout(300)
def test_nvue_window_shorter_than_the_trial_fails_the_trial(emu, tmp_path, reliability) -> None:
    """NVUE's window is not renewable: one that runs out mid-trial (6 s here, the trial's
    measurement held for 15 s) rolls the switch back under the measurement, which then is not
    of the trial's settings -- the trial fails instead of being scored; the study goes on."""
    window = 6

    def hold_first_trial(n: int) -> None:
        if n == 2:  # measurement 1 is the baseline (candidate_placements: 0)
            emu.inject(emu.host_names[0], hang={"mpirun": 15})
            threading.Timer(15.0, emu.clear_faults, [emu.host_names[0]]).start()

    verdicts, error, exp_path, baseline = run_study(emu, tmp_path, at_measure=hold_first_trial,
                                                    nvue_confirm_s=window)
    assert error is None, error
    import optuna

    results = exp_path.parent / "results"
    study = optuna.load_study(study_name="faults", storage=f"sqlite:///{results / 'optuna.db'}")
    first = study.trials[1].user_attrs
    assert first.get("verdict") == "failed:measurement", first
    assert f"dead-man timer fired on ['{NVUE}']" in str(first.get("detail")), first
    dirty = off_baseline(read_canary(emu), baseline)
    assert dirty == []
    lost = lost_trials(results)
    assert lost == 0
    reliability.record(f"NVUE's confirm window shorter than a trial (`nvue_confirm_s: {window}`, "
                       "measurement held 15 s)",
                       "NVUE rolled the switch back mid-measurement; the check after the "
                       "measurement (`nv config revision -o json`: nothing in state `confirm`) "
                       "failed the trial instead of scoring it, baseline verified, study went "
                       "on",
                       dirty_targets=len(dirty), trials_lost=lost, restore_s=None,
                       backend="ssh (emulated)")


@slow
def test_a_kept_state_is_confirmed_on_nvue(emulated_cluster: EmulatedCluster) -> None:
    """A change the tuner ends on (a kept winner) is confirmed on NVUE (``--confirm-yes``):
    nothing waits for a rollback any more and, with auto-save, it is the startup revision."""
    from tuner.cluster.deadman import DeadmanCluster
    from tuner.cluster.ssh import SshCluster
    from tuner.inventory import load_inventory

    emu = emulated_cluster
    inner = SshCluster(load_inventory(emu.inventory_path))
    cluster = DeadmanCluster(inner, 30, nvue_confirm_s=600)
    try:
        base = cluster.snapshot()
        trial = _trial(base)
        cluster.apply(trial)
        assert emu.state(NVUE).get("confirm")  # waiting, not saved
        assert kmin(emu, "startup") == base.switches["leaf1"].kmin_bytes
    finally:
        cluster.close()  # ends on the verified trial: keep it
    assert not emu.state(NVUE).get("confirm")
    cc = emu.state(NVUE)["startup"]["qos"]["congestion-control"]
    assert int(cc["ECNTUNE_CANARY"]["traffic-class"]["3"]["min-threshold"]) == \
        trial.switches["leaf1"].kmin_bytes
