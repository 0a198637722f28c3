"""docs/img/report.png: the report of a quick.yaml study as headless Chromium draws it.

    .venv/bin/python bench/report_image.py [--results DIR]

Without ``--results`` it runs ``ecntune run experiments/quick.yaml`` into a scratch folder
(the study the README describes; MLflow off), writes its report, and screenshots the top of
``report.html`` at 1280x1250, the part the README and docs/review.md show. Needs Debian's
chromium. Re-run it whenever a change moves the README's quick.yaml figures.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img" / "report.png"
ECNTUNE = [sys.executable, "-c", "from tuner.cli import main; main()"]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--hide-scrollbars", "--window-size=1280,1250"]


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd[-4:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", help="a results folder holding the study (default: run one)")
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        sys.exit("bench/report_image.py: no chromium on PATH (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="ecntune-report-") as tmp:
        results = args.results or str(Path(tmp) / "results")
        if args.results is None:
            run([*ECNTUNE, "run", "experiments/quick.yaml", "--results", results,
                 "--no-mlflow", "--quiet"])
        out = Path(tmp) / "report"
        run([*ECNTUNE, "report", "--results", results, "--out", str(out)])
        shot = Path(tmp) / "report.png"
        subprocess.run([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={Path(tmp) / 'profile'}",
                        f"--screenshot={shot}", (out / "report.html").as_uri()],
                       check=True, capture_output=True, timeout=120)
        shutil.copyfile(shot, OUT)
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
