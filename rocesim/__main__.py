"""``python -m rocesim SCENARIO.yaml|json [--counters] [--seed N]``: run and print JSON."""

from __future__ import annotations

import argparse
import json
import sys

from rocesim.engine import simulate
from rocesim.scenario import ScenarioError, load_scenario


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rocesim",
                                 description="Run a rocesim scenario and print its results "
                                             "as JSON.")
    ap.add_argument("scenario", help="YAML or JSON scenario file (see rocesim/scenarios/)")
    ap.add_argument("--seed", type=int, default=None, help="override the scenario seed")
    ap.add_argument("--counters", action="store_true",
                    help="include every port counter (default: only non-zero ones)")
    args = ap.parse_args(argv)
    try:
        fabric, workload, opts = load_scenario(args.scenario)
        if args.seed is not None:
            opts["seed"] = args.seed
        res = simulate(fabric, workload, **opts)
    except (ScenarioError, ValueError, KeyError) as e:
        print(f"rocesim: {e}", file=sys.stderr)
        return 2
    out = res.to_dict()
    if not args.counters:
        out["counters"] = {port: {k: v for k, v in c.items() if v}
                           for port, c in res.counters.items() if any(c.values())}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
