"""Run the tests that cover each red-team finding of issue #25 and write docs/reliability.md's
"Red-team findings (issue #25)" section: one row per finding (H2 per fix bullet, M4 per leak,
L3 per bullet) with the attack as the red team ran it, what must happen instead, this run's
verdict and time of the covering tests, and what happened when the fix was taken out.

    .venv/bin/python bench/redteam.py                    # about 70 s on 2 cores
    .venv/bin/python bench/redteam.py --junit J.xml      # re-render from an earlier run

The *observed* column is measured: every covering test runs now (``pytest -m 'not browser'``,
so slow and SSH ones too; junit XML gives each verdict and time), and a row whose tests did not
all pass says FAILED. The *with the fix removed* column is not: it was recorded by hand on
2026-12-06, each mechanism disabled by the smallest edit (named in the cell), the covering
tests run, the file restored with ``git checkout``. The fix code mutated was that of
6470de7 (this branch's head when the work began; the commits made before a mutation changed
tests only), except where the cell names a later commit: the tests and mends added during the
work (5b5cd9a, 831fee4, f3bf773, cc56090, e5ec79e, 128d4e1, aa649c0). A finding the red team
reported that has no fix here says NOT FIXED, with what was reproduced; it has no test to run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from doc_sections import write_section  # noqa: E402
from reliability import verdicts  # noqa: E402

DOC = ROOT / "docs" / "reliability.md"
START, END = "<!-- redteam:start -->", "<!-- redteam:end -->"
MARKER = "not browser"  # slow and SSH tests included

HOSTILE = ("tests/inputs/test_hostile_inputs.py::"
           "test_malformed_file_exits_2_naming_file_field_and_fix")


def hostile(*stems: str) -> list[str]:
    """The node ids of hostile input files, each through ``run`` and ``preflight``."""
    return [f"{HOSTILE}[{s}-{c}]" for s in stems for c in ("run", "preflight")]


@dataclass(frozen=True)
class Finding:
    id: str
    attack: str  # as the red team ran it
    expected: str
    tests: list[str]
    removed: str  # the mutation and the test that failed (recorded by hand, see above)
    gap: str = ""  # part of the finding still open, stated in the observed column
    not_fixed: str = ""  # no fix at all: what was reproduced instead of a test


FINDINGS = [
    Finding(
        "H1",
        "A SIGKILLed `ecntune worker --slice sim0` left an open change in "
        "`<results>/slices/sim0/journal.jsonl`; `ecntune recover` (no argument), `recover "
        "pod.yaml` and `recover --results results/pod` said there was no open change.",
        "Every form of `recover` scans every slice journal under the results it covers, and "
        "never says \"no open change\" for a folder it did not fully scan.",
        ["tests/scaleout/test_recover_slice.py::"
         "test_every_form_of_recover_finds_a_dead_workers_slice",
         "tests/scaleout/test_recover_slice.py::"
         "test_recover_without_arguments_finds_a_slice_of_a_study_folder"],
        "`study_journals` without the slices: `recover EXPERIMENT` printed only \"journal "
        ".../res/journal.jsonl does not exist\" (first test). `find_journals` without the "
        "`results/*/slices/*` glob: **not caught** at 6470de7 (all H1 tests passed); the second "
        "test (f3bf773) fails: bare `recover` printed \"results/other/journal.jsonl: no open "
        "change\", exit 0.",
    ),
    Finding(
        "H2 folder",
        "Run as root on a results folder another account can write, where that account had "
        "planted files.",
        "A results folder (or a parent up to one this account owns) writable by another "
        "account is refused, as OpenSSH does for `~/.ssh`; so is a file in it another account "
        "owns.",
        ["tests/safety/test_results_folder_trust.py::"
         "test_a_folder_others_can_write_is_refused_naming_it",
         "tests/safety/test_results_folder_trust.py::"
         "test_a_file_another_account_left_in_the_folder_is_refused"],
        "`check_private` not called by `hold`: DID NOT RAISE ConfigError (first test). Its "
        "file check (aa649c0) disabled: DID NOT RAISE (second test); before aa649c0 a journal "
        "owned by `nobody`, planted while the folder was 0777 and kept after the `chmod go-w` "
        "the refusal asks for, was restored by `recover` (\"baseline restored and verified\").",
    ),
    Finding(
        "H2 O_NOFOLLOW",
        "A symlink planted as `ecntune.lock` truncated and overwrote a root-owned file; one "
        "planted as `journal.jsonl` had 13 KB of records appended to another.",
        "`O_NOFOLLOW` on the files opened in place (lock, journal): a planted symlink is "
        "refused; every file written whole (state, `diagnosis.json`, report, change request, "
        "traffic profile, Prometheus textfile) goes to a new file renamed over the path "
        "(`safety.files.write_file`), which replaces a planted symlink instead of following it.",
        ["tests/safety/test_results_folder_trust.py::"
         "test_a_planted_lock_or_journal_symlink_is_not_followed",
         "tests/safety/test_results_folder_trust.py::"
         "test_what_diagnose_export_and_watch_write_replaces_a_planted_symlink",
         "tests/review/test_plots_report.py::test_report_of_a_real_study"],
        "`O_NOFOLLOW` dropped from the lock's `os.open`: DID NOT RAISE TunerError (\"cannot "
        "create the lock file\"); dropped from the journal's: DID NOT RAISE (\"cannot write\"). "
        "Until `write_file` (2026-12-06, after this table was first written) `ecntune "
        "diagnose` wrote `diagnosis.json` through a symlink `nobody` planted in a 0777 "
        "results folder; with `write_file` writing in place again, the second test fails "
        "(the victim overwritten).",
    ),
    Finding(
        "H2 temp names",
        "The sim state's temporary file had a predictable name (`.sim-state.json.<pid>.tmp`): "
        "a symlink planted under it is written through.",
        "Unpredictable temporary names, created exclusively.",
        ["tests/safety/test_results_folder_trust.py::"
         "test_the_state_files_temporary_name_is_unpredictable"],
        "`mkstemp` replaced by the pid-named temporary: the victim file held "
        "`{\"switches\":{},\"nics\":{}}` instead of \"precious\".",
    ),
    Finding(
        "H2 forged baseline",
        "A begin record with a valid CRC and a baseline of the attacker's choosing was applied "
        "by `recover`, which reported \"baseline restored and verified\".",
        "`recover` checks an open record's baseline against the study's recorded snapshot and "
        "refuses a mismatch (exit 4, nothing applied, the record left open); a record whose "
        "study no store holds is refused too, unless `--trust-journal` (never past a "
        "mismatch).",
        ["tests/tuner/test_recover_forged.py::"
         "test_a_forged_baseline_is_refused_and_nothing_applied",
         "tests/tuner/test_cli.py::test_run_refuses_while_the_journal_is_dirty"],
        "the check's call removed: exit 1 after the restore tried the forged (partial) "
        "baseline (first test); the comparison removed: the same; `--trust-journal` made the "
        "default: both tests fail (the unknown study's record applied); the snapshot not "
        "recorded by `run`: the first test fails at its first assertion (no snapshot). "
        "Reproduced 2026-12-06 before the fix: `recover e.yaml` exit 0, \"baseline restored "
        "and verified\", the canary on the forged values.",
    ),
    Finding(
        "H3",
        "`storm_window_s: .inf`, `max_pause_frames_per_s: .inf`, `max_lossless_drops: 1e21` "
        "passed preflight and trials ran at 57 % PFC pause with no rollback; "
        "`poll_interval_s: .inf` never polled the monitor.",
        "Finite upper bounds on every safety field; exit 2 naming the field and its bound. "
        "`ecntune --i-know` lifts the judgment bounds (`safety.limits.SOFT_BOUNDS`), never "
        "finiteness, for that command only; each override is printed and tagged on the MLflow "
        "parent run (`ecntune.i_know`); `recover` never needs it.",
        [*hostile("safety_storm_window_infinite", "safety_pause_frames_infinite",
                  "safety_lossless_drops_absurd", "safety_poll_interval_infinite",
                  "safety_pause_fraction_nan"),
         "tests/tuner/test_i_know.py::test_a_limit_past_its_bound_needs_i_know_and_is_logged",
         "tests/tuner/test_i_know.py::test_i_know_never_accepts_an_infinite_limit"],
        "the `le=` bounds of storm_window_s, max_pause_frames_per_s, max_lossless_drops and "
        "poll_interval_s removed (before `SOFT_BOUNDS`): 8 of the 10 cases failed (the four "
        "files, run and preflight), e.g. `safety_lossless_drops_absurd` run exit 0 after the "
        "study ran; the `SOFT_BOUNDS` check removed: `safety_lossless_drops_absurd` fails "
        "(run, preflight). `--i-know`'s context dropped in `parse_experiment`, its MLflow tag, "
        "its console line, its reset after the command, or `recover`'s own override: each "
        "fails the first `test_i_know` test; the finiteness check removed: the second.",
    ),
    Finding(
        "H4",
        "`recover` while the tuner lived in another PID namespace (same hostname, pid not "
        "visible) judged it dead and claimed its timers; the live tuner logged a warning and "
        "scored the trial `ok` on baseline settings.",
        "A lock holder carries host, boot id, PID namespace and start time, so \"dead\" is "
        "proved; a timer claimed or a lock changing hands mid-trial fails the trial "
        "`failed:protection_lost`, never scored.",
        ["tests/faults/test_deadman_cluster.py::"
         "test_recover_never_judges_a_live_tuner_dead_and_a_claimed_timer_fails_the_trial",
         "tests/faults/test_deadman_cluster.py::"
         "test_a_lock_taken_by_another_token_mid_trial_fails_the_trial",
         "tests/tuner/test_optuna_io.py::"
         "test_an_owner_in_another_pid_namespace_is_never_judged_gone",
         "tests/tuner/test_loop.py::test_protection_lost_mid_trial_fails_the_trial_unscored"],
        "`_dead_here` without the PID-namespace comparison: `recover` took the live tuner's "
        "locks (DID NOT RAISE RollbackError). The renewal not noting `disarmed`/`stolen`: both "
        "dead-man tests DID NOT RAISE ProtectionLost. The trial's `ProtectionLost` clause "
        "removed: verdict `failed:measurement`; its `ms.clear()` removed: score 0.941 where "
        "None is required.",
    ),
    Finding(
        "M1",
        "A torn journal line after a `kept` change: `recover` reverted the kept winner to the "
        "entry's baseline.",
        "The last known state of a kept entry is its settings: `recover` restores those.",
        ["tests/tuner/test_recover_kept.py::"
         "test_a_torn_line_after_a_kept_change_keeps_the_kept_settings"],
        "`want = entry.baseline` for every entry: the simulated devices held the baseline, not "
        "the kept settings.",
    ),
    Finding(
        "M2",
        "`resume` on a shared PostgreSQL study closed a live run's RUNNING trial as "
        "\"interrupted\"; the live run died with `UpdateFinishedTrialError`.",
        "Trials carry their owner; only a provably gone owner's RUNNING trial is failed.",
        ["tests/tuner/test_optuna_io.py::test_fail_stale_leaves_a_live_owners_trial_alone",
         "tests/tuner/test_optuna_io.py::test_fail_stale_closes_running_trials_as_interrupted"],
        "`fail_stale` without the `owner_gone` test: closed [0, 1, 2, 3] where [2, 3] (the gone "
        "and the reused pid); `ask` not recording the owner: closed [0, 2, 3].",
    ),
    Finding(
        "M3",
        "`run --trials N` then `resume`: the file's `budget.trials` was used, 35 more trials "
        "on the canary.",
        "The effective budget is stored with the study; `resume` continues to it unless "
        "`--trials` gives a new total.",
        ["tests/tuner/test_cli.py::test_resume_keeps_the_budget_the_run_was_started_with"],
        "`resume` ignoring the stored `trials_budget`: 7 trials after `resume` where 3.",
    ),
    Finding(
        "M4 URL",
        "`storage: postgresql://admin:Hunter2Secret@[::1/optuna` (unparsable): `has_secret` "
        "said False and the URL was printed in full.",
        "An unparsable URL counts as secret: refused as not a valid URL, never repeated.",
        # both parameters (an unclosed IPv6 bracket, a port out of range): a node id with its
        # parameter cannot be given, pytest splits "[::1" at its "::"
        ["tests/inputs/test_secrets_in_errors.py::test_an_unparsable_storage_url_is_not_echoed"],
        "`has_secret` returning False when `urlsplit` raises: \"Hunter2Secret\" in the "
        "message.",
    ),
    Finding(
        "M4 token",
        "`https://ghp_TOKEN@host` as a URL: neither refused nor redacted; it reached Optuna's "
        "`experiment_yaml` and MLflow's artifact.",
        "Any user info on http(s) is a credential: refused naming the field, hidden as "
        "`***:***`.",
        ["tests/inputs/test_secrets_in_errors.py::"
         "test_a_token_as_the_user_name_of_an_http_tracking_uri_is_refused"],
        "`_user_is_secret` returning False: `preflight` exit 0 with the token URL.",
    ),
    Finding(
        "M4 file",
        "`inventory_file` pointing at an AWS credentials file: the YAML error echoed "
        "`aws_access_key_id = ...`.",
        "Never echo a line of a file that failed to parse as ours: file, line and problem "
        "only.",
        ["tests/inputs/test_secrets_in_errors.py::"
         "test_a_credentials_file_given_as_the_inventory_is_not_echoed"],
        "the YAML error formatted with the exception's text again: the key id and the secret "
        "key in the message.",
    ),
    Finding(
        "M5",
        "`tracking.scrub` took 3.9 s on 40 KB; a valid 50 MB experiment held the results lock "
        "past 400 s.",
        "A linear scrub, and input files of at most 1 MB unless `ecntune --large` (64 MB, "
        "for that command only).",
        ["tests/tuner/test_tracking.py::"
         "test_scrub_finds_the_urls_the_scheme_regex_finds_in_linear_time",
         "tests/tuner/test_tracking.py::test_input_files_are_regular_and_bounded",
         "tests/tuner/test_tracking.py::test_a_large_experiment_needs_large"],
        "`scrub` back to the `scheme://rest` regex: the first test hit a 60 s timeout (the "
        "regex needs ~15 min for 1 MB); the 1 MB check removed: DID NOT RAISE \"larger than "
        "1 MB\". `--large` (2026-12-06, after this table was first written) left on after its "
        "command: the third test fails (the next read accepts 2 MB).",
    ),
    Finding(
        "L1",
        "`mpirun -x LD_PRELOAD=...` in the template, `NCCL_NET_PLUGIN`/`NCCL_TUNER_PLUGIN`/"
        "`UCX_MODULE_DIR` paths, a launcher other than mpirun/srun and `nccl_tests_dir` "
        "anywhere all passed.",
        "Launchers allowlisted, plugin variables refused unless `trusted_env`, binaries others "
        "could change refused, and preflight printing every command that will execute.",
        [*hostile("inventory_launcher_not_mpirun_or_srun", "inventory_mpirun_passes_ld_preload",
                  "inventory_nccl_net_plugin_not_trusted", "inventory_nccl_env_ld_preload"),
         "tests/ssh/test_exec_trust_pure.py::"
         "test_sticky_directory_accepted_plain_world_writable_refused",
         "tests/faults/test_exec_l1.py::test_run_refuses_a_binary_another_account_could_change",
         "tests/faults/test_exec_l1.py::test_preflight_lists_what_the_measurement_then_runs"],
        "each removed alone: the launcher allowlist, the template's `-x` check, the plugin "
        "refusal: its hostile file's run no longer named `launcher.*` (went on to SSH); the "
        "mode check of `exec_trust.reasons`: [] where \"/opt writable ... (mode 0777)\", and "
        "`ecntune run` exit 0 where 3; preflight without the measurement's lines: none printed.",
    ),
    Finding(
        "L2",
        "On systemd hosts logind removes `/run/user/<uid>` (`$XDG_RUNTIME_DIR`) when the "
        "tuner's last SSH session ends, under the armed dead-man timer; "
        "`deadman_timeout_s: 0` also dropped the target locks and the moved-canary check.",
        "The timer directory is outside logind's (`/run/ecntune` or `~/.ecntune-deadman`, per "
        "boot) and survives logout; timeout 0 keeps the locks and the moved-canary check.",
        ["tests/safety/test_deadman.py::"
         "test_timer_survives_logind_removing_the_runtime_dir_at_logout",
         "tests/safety/test_deadman.py::test_timer_puts_back_a_removed_directory_and_still_fires",
         "tests/faults/test_deadman_cluster.py::"
         "test_timeout_zero_keeps_the_locks_and_the_moved_canary_check"],
        "the non-root directory back under `$XDG_RUNTIME_DIR`: knob left at 17 where 300 (since "
        "5b5cd9a; before it the stand-in's parent was the user's, the timer recreated the "
        "directory and only the `.fired` path differed). Timeout 0 without `refuse_if_held`: "
        "DID NOT RAISE DeadmanRefused (locked); without `_refuse_if_moved`: DID NOT RAISE "
        "(changed since the baseline).",
    ),
    Finding(
        "L3 Tracebacks",
        "`.inf`/`.nan` in a search range, an objective weight or `max_time_us`; a NUL byte; "
        "`/dev/zero` as the experiment file.",
        "Exit 2 naming the file and field, no traceback.",
        [*hostile("nul_byte_in_value", "fabric_max_time_infinite",
                  "search_kmax_ratio_infinite", "collective_weight_infinite",
                  "guardrail_pfc_pause_infinite", "guardrail_p99_target_infinite",
                  "objective_weight_infinite"),
         "tests/tuner/test_experiment.py::test_every_number_of_an_experiment_is_finite",
         "tests/tuner/test_tracking.py::test_input_files_are_regular_and_bounded"],
        "the YAML loader built outside the `try`: NUL byte run exit 1 (ReaderError); "
        "`max_time_us` without `allow_inf_nan=False`: run exit 1 (OverflowError). Not fixed at "
        "6470de7: `.inf` in kmax_ratio's range, a collective's weight, the PFC guardrail, "
        "scalar `busbw_weight` (run exit 1, traceback) and `p99_target_us` (exit 0, guardrail "
        "off); mended in e5ec79e, whose change removed makes the 10 new cases and the "
        "every-float test fail (13 open-ended fields).",
    ),
    Finding(
        "L3 Hangs",
        "A FIFO as the experiment file hung the read; `/dev/zero` was read without bound.",
        "Input files must be regular, opened non-blocking, read to at most 1 MB.",
        ["tests/tuner/test_tracking.py::test_input_files_are_regular_and_bounded"],
        "the `S_ISREG` check removed: DID NOT RAISE \"not a regular file\" (the FIFO).",
    ),
    Finding(
        "L3 Wrong codes",
        "`known_hosts: /dev/zero` exited 3 with an empty reason; a `results_dir` that is a "
        "file exited 3 \"CanaryBusy\".",
        "Exit 2 with a message naming the field.",
        [*hostile("inventory_known_hosts_dev_zero"),
         "tests/tuner/test_cli.py::test_names_and_folders_that_would_escape_or_mislead"],
        "the known_hosts regular-file check removed: the test process was killed (exit 137) "
        "after 3 min, memory exhausted reading /dev/zero; the results_dir-is-a-file check "
        "removed: exit 3 where 2.",
    ),
    Finding(
        "L3 Silent acceptance",
        "`size_bytes: 1e40`, `startup_trials: 1e35`, `step_us: 1e-300` were accepted.",
        "Exit 2 naming the field and its bound.",
        hostile("collective_size_absurd", "sampler_startup_absurd", "fabric_step_us_denormal"),
        "each bound removed alone (`le=2**36`, `le=10_000`, `ge=1`): its file's run exit 0, "
        "a study run.",
    ),
    Finding(
        "L3 Slices",
        "Slice names and counts were checked only by `worker`, and the name pattern accepted "
        "`..`.",
        "Every command checks `canary.slices`; a name starts with a letter or digit.",
        ["tests/tuner/test_cli.py::test_names_and_folders_that_would_escape_or_mislead"],
        "the old pattern `[A-Za-z0-9_.-]{1,64}`: `preflight` exit 0 for a slice `..`; the "
        "slice check dropped from `check_inputs`: the same.",
    ),
    Finding(
        "L3 !!binary",
        "`results_dir: !!binary cmVzdWx0cwpldmls` smuggled a newline past the control-"
        "character check.",
        "A binary value is refused, naming the field.",
        ["tests/tuner/test_experiment.py::"
         "test_yaml_merge_keys_work_and_binary_values_are_refused"],
        "the `bytes` refusal in `_shape_limits` removed: DID NOT RAISE ConfigError.",
    ),
    Finding(
        "L3 Paths",
        "`results_dir`/`--study` with `..` escaped the results folder.",
        "A study name is 1-64 letters, digits, `_-.` starting with a letter or digit, in "
        "every command that takes one; a file's `results_dir` with a `..` part is refused "
        "(exit 2 naming the field).",
        ["tests/tuner/test_cli.py::test_names_and_folders_that_would_escape_or_mislead",
         "tests/tuner/test_cli.py::test_a_worker_refuses_a_study_name_that_would_escape",
         "tests/inputs/test_hostile_inputs.py::"
         "test_malformed_file_exits_2_naming_file_field_and_fix[results_dir_climbs_out-run]"],
        "`run`'s `check_name` removed: exit 0 for `--study ../../escape`. `worker`'s removed: "
        "**not caught** at 6470de7; the second test (831fee4) fails: exit 0, trial files "
        "written to `<tmp>/escape`. `results_dir: results/../../escaped` was accepted until "
        "the `results_dir` check (2026-12-06, after this table was first written); with it "
        "removed the hostile file's run and preflight both fail (exit 0 / 1, not 2).",
    ),
    Finding(
        "L3 Merge keys",
        "Every legitimate YAML merge key (`<<: *anchor`) was refused as a duplicate.",
        "Merge keys work, merged keys may be overridden.",
        ["tests/tuner/test_experiment.py::"
         "test_yaml_merge_keys_work_and_binary_values_are_refused"],
        "the merge-tag skip in `construct_mapping` removed: \"could not determine a "
        "constructor for the tag ...merge\".",
    ),
    Finding(
        "L3 Messages",
        "A homoglyph key's message did not point at the look-alike character; Kmin > Kmax in "
        "`current` printed pydantic's raw dump.",
        "Exit 2 naming the look-alike character; one plain line for Kmin > Kmax.",
        [*hostile("key_with_cyrillic_lookalike"),
         "tests/tuner/test_cli.py::test_kmin_above_kmax_in_current_is_one_plain_line"],
        "the `ValidationError` clause in the sim cluster removed: \"1 validation error\" "
        "printed. The homoglyph: not fixed at 6470de7 (`budgеt:` gave \"unknown field; "
        "allowed: ..., budget, ...\"); mended in 128d4e1, whose check disabled makes its file "
        "fail (the character not named).",
    ),
    Finding(
        "L3 Runs left RUNNING",
        "2 of 11 SIGKILLs left an MLflow nested run RUNNING that `resume` never closed.",
        "The back-fill completes a run whose writer is gone in place (one run per trial); "
        "one beside a finished run of the same trial is closed (KILLED, tagged).",
        ["tests/tuner/test_loop.py::"
         "test_a_run_left_running_by_a_killed_process_is_completed_in_place",
         "tests/tuner/test_loop.py::test_a_lost_run_beside_a_finished_one_is_closed",
         "tests/tuner/test_loop.py::"
         "test_a_run_whose_writer_is_gone_is_completed_without_waiting"],
        "the orphan rule removed: (1, RUNNING) left (first test). At 6470de7 only runs older "
        "than 300 s were closed: a `resume` at once left the run RUNNING (reproduced with the "
        "CLI); mended in cc56090, whose `writer_gone` removed fails the third test, and "
        "without the writer tag: KeyError. Until then the back-fill logged the trial in a "
        "second run beside the KILLED one, and CI's SIGKILLed-server test counted trial 3 "
        "twice (stop 30); completing in place (`into=None` fails the first and third tests; "
        "the close branch removed fails the second).",
    ),
    Finding(
        "L3 Lease",
        "A second worker that failed to take a slice deleted the lease, stopping the healthy "
        "first worker.",
        "A refused worker exits 3 naming the holder and leaves the live lease alone.",
        ["tests/scaleout/test_lease.py::"
         "test_a_refused_worker_leaves_the_live_holders_lease_alone[sqlite]",
         "tests/scaleout/test_lease.py::"
         "test_a_refused_worker_leaves_the_live_holders_lease_alone[postgresql]"],
        "not reproducible on this branch (a regression guard); the acquire's `WHERE expires_at "
        "< now OR holder = excluded.holder` removed: the second worker took the lease over, "
        "exit 0 where 3.",
    ),
]


def run_tests(junit: Path, tests: list[str]) -> int:
    cmd = [sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider",
           "-m", MARKER, f"--junitxml={junit}"]
    print("+", " ".join(cmd[:4]), f"... ({len(tests)} tests)", flush=True)
    return subprocess.run(cmd, cwd=ROOT).returncode


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def states(test: str, results: dict[str, tuple[str, float]]) -> list[tuple[str, float]]:
    """The verdicts of ``test``: a node id, or a function whose parameters all run."""
    found = [v for k, v in results.items() if k == test or k.startswith(test + "[")]
    return found or [("not run", 0.0)]


def passed(test: str, results: dict[str, tuple[str, float]]) -> bool:
    return all(s == "passed" for s, _ in states(test, results))


def observed(f: Finding, results: dict[str, tuple[str, float]]) -> str:
    if f.not_fixed:
        return f"**NOT FIXED**: {f.not_fixed}"
    runs = [v for t in f.tests for v in states(t, results)]
    ok = sum(1 for s, _ in runs if s == "passed")
    secs = sum(t for _, t in runs)
    if ok == len(runs):
        out = f"passed ({ok} of {ok}, {secs:.2f} s)" if secs < 1 else \
            f"passed ({ok} of {ok}, {secs:.1f} s)"
    else:
        bad = [f"`{t.split('::', 1)[1]}`" for t in f.tests if not passed(t, results)]
        out = f"**FAILED** ({ok} of {len(runs)} passed; not passing: " + ", ".join(bad) + ")"
    return out + (f"; still open: {f.gap}" if f.gap else "")


def _tests_cell(f: Finding) -> str:
    if not f.tests:
        return "none"
    names: list[str] = []
    for t in f.tests:  # the hostile files once each, not per command
        if t.startswith(HOSTILE):
            stem = t.split("[", 1)[1].rsplit("-", 1)[0]
            name = f"`{HOSTILE.split('::', 1)[0]}` `{stem}` (run, preflight)"
        else:
            name = f"`{t}`"
        if name not in names:
            names.append(name)
    return "<br>".join(names)


def section(results: dict[str, tuple[str, float]], command: str, commit: str) -> str:
    lines = [
        "## Red-team findings (issue #25)",
        "",
        "Produced by `bench/redteam.py`; do not edit by hand. Generated "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} at commit {commit} with "
        f"`{command}`.",
        "",
        "One row per finding of the red team (issue #25; H2 per fix bullet, M4 per leak, L3 "
        "per bullet). *Observed* is this run of the covering tests (`pytest -m 'not browser'`: "
        "slow and SSH tests included), their verdict and summed time. *With the fix removed* "
        "was recorded by hand on 2026-12-06: the smallest edit that takes the mechanism out, "
        "the covering tests run, the file restored (see the script's docstring for the "
        "commits). **not caught** marks a mechanism no test noticed before a test was added; "
        "**NOT FIXED** a finding with no fix, as reproduced.",
        "",
        "| finding | attack | expected | observed | test | with the fix removed |",
        "|---|---|---|---|---|---|",
    ]
    for f in FINDINGS:
        lines.append("| " + " | ".join(_cell(c) for c in (
            f.id, f.attack, f.expected, observed(f, results), _tests_cell(f), f.removed))
            + " |")
    run = [t for f in FINDINGS for t in f.tests]
    failing = sorted({t for t in run if not passed(t, results)})
    rows_bad = [f.id for f in FINDINGS if f.tests and any(t in failing for t in f.tests)]
    open_ = [f.id for f in FINDINGS if f.not_fixed] + [f.id for f in FINDINGS if f.gap]
    lines += [
        "",
        f"Rows: {len(FINDINGS)}; covering tests run: {len(set(run))}, not passing: "
        f"{len(failing)}{' (' + ', '.join(rows_bad) + ')' if rows_bad else ''}. Not fixed, "
        f"or fixed in part: {', '.join(open_) if open_ else 'none'}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--junit", type=Path, help="junit XML of an earlier run (skip the tests)")
    ap.add_argument("--out", type=Path, default=DOC)
    args = ap.parse_args(argv)
    tests = list(dict.fromkeys(t for f in FINDINGS for t in f.tests))
    if args.junit:
        junit, rc, command = args.junit, 0, "python bench/redteam.py --junit ..."
    else:
        junit = Path(tempfile.mkdtemp(prefix="ecntune-redteam-")) / "junit.xml"
        rc = run_tests(junit, tests)
        command = "python bench/redteam.py"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip() or "unknown"
    results = verdicts(junit)
    write_section(args.out, START, END, section(results, command, commit))
    bad = sum(1 for t in tests if not passed(t, results))
    print(f"wrote {args.out}: {len(FINDINGS)} findings, {len(tests)} tests, {bad} not passing; "
          f"pytest exit code {rc}")
    return rc or (1 if bad else 0)


if __name__ == "__main__":
    sys.exit(main())
