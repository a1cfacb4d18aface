"""The campaign's command line: parses the flags, checks it can run at all (root, the local cluster
up) with one line when not, runs the campaign and prints the report; exit 1 on any violation."""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks.chaos.schedule import KINDS, parse_kinds

_T0 = time.monotonic()


def _progress(message: str) -> None:
    print(f"[chaos {time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks chaos",
        description="The seeded fault campaign on the local cluster (root; `sro local up` first): sro "
        "installed, a simulated-gpu SpecialResource with a workload holding devices, then faults for "
        "--minutes with invariants checked throughout; prints the table and the fault log and exits 1 "
        "on any violation. The same --seed (and --minutes, --faults) gives the same schedule.",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="the schedule's seed (default: from the clock)"
    )
    parser.add_argument("--minutes", type=float, default=10.0, help="how long faults are injected (10)")
    parser.add_argument(
        "--faults", default="", help=f"comma-separated fault kinds (default: all): {', '.join(KINDS)}"
    )
    args = parser.parse_args(argv)
    if not 0 < args.minutes <= 24 * 60:
        parser.error(f"--minutes must be in (0, 1440], not {args.minutes:g}")
    try:
        args.kinds = parse_kinds(args.faults)
    except ValueError as e:
        parser.error(str(e))
    if args.seed is None:
        args.seed = int(time.time()) % 100_000
    return args


def main(argv: list[str]) -> int:
    args = _args(argv)
    if os.geteuid() != 0:
        print("chaos: needs root (the local cluster's processes and device files)", file=sys.stderr)
        return 2
    from sro.local.cluster import LocalCluster

    if not LocalCluster.default().is_healthy():
        print("chaos: the local cluster is not up (sro local up)", file=sys.stderr)
        return 2
    from benchmarks.chaos.report import render
    from benchmarks.chaos.runner import campaign

    _progress(f"seed {args.seed}, {args.minutes:g} min, faults {','.join(args.kinds)}")
    outcome = campaign(args.seed, args.minutes, args.kinds, _progress)
    print(render(outcome), flush=True)
    return 1 if outcome.failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
