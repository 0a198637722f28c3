"""``ecntune report [STUDY]``: one self-contained HTML page and a Markdown summary of a study."""

from __future__ import annotations

from pathlib import Path

import click

from tuner.cli import handle_errors


@click.command("report")
@click.argument("study", metavar="[STUDY|RESULTS_DIR]", required=False)
@click.option("--storage", help="Optuna storage URL (default sqlite:///<results>/optuna.db).")
@click.option("--results", help="results_dir of the study (default: results).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder (default: <results>/<study>/report).")
@handle_errors
def command(study: str | None, storage: str | None, results: str | None,
            out_dir: Path | None) -> None:
    """Write report.html (plots inlined, readable offline) and report.md for STUDY (a name
    or a results folder; default: the newest study): convergence, best vs baseline with the
    repeat spread, bandwidth/latency/PFC trade-off, knob importance, best trials, why trials
    were rolled back or rejected, and the recommended settings. MLflow need not be running."""
    from rich.console import Console

    from tuner.cli.resume import locate
    from tuner.report import load, write_report

    url, study = locate(study, storage, results)
    view = load(study, url)
    home = Path(results) if results else (
        Path(url.removeprefix("sqlite:///")).parent if url.startswith("sqlite:///")
        else Path("results"))
    target = out_dir or home / view.name / "report"
    files = write_report(view, target)
    console = Console()
    console.print(f"study {view.name}: {len(view.trials)} trials; "
                  f"{len(files.images)} plots")
    console.print(f"HTML     {files.html}")
    console.print(f"Markdown {files.markdown}")
