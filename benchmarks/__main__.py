"""Runs the benchmark modules (benchmarks/bench_*.py): one table of figures vs baselines, and JSON.

`python -m benchmarks [NAME ...] [--json PATH]` runs the modules whose name contains a NAME (all
without one), prints one table — value, baseline, median ratio, spread of the per-pair ratios,
target, met — and writes the same with the machine's facts to benchmarks/results/latest.json (a
run of some writes `<names>.json` beside it, so it does not replace the whole report), so that
`python -m benchmarks compare A.json B.json` can tell two runs apart; `python -m benchmarks report
A.json B.json ... [--json OUT]` prints the one table of benchmarks run apart (the cluster ones run
one at a time), a later report's figure replacing an earlier one's. Unmet goals do not fail
the run (it is a report, with a summary line); a benchmark module that crashes does, after the rest
have run and the report is written.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import pkgutil
import platform
import subprocess
import sys
import traceback
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import benchmarks
from benchmarks import compare, reporting
from benchmarks.harness import PAIRS, Figure

ROOT = Path(__file__).resolve().parent.parent
LATEST = Path(__file__).resolve().parent / "results" / "latest.json"


def _git(*args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


def _facts(
    modules: list[str], load_start: tuple[float, float, float], started: datetime.datetime
) -> dict[str, Any]:
    return {
        "date": started.isoformat(timespec="seconds"),
        "finished": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "load_average_start": list(load_start),
        "load_average_end": list(os.getloadavg()),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "python": platform.python_version(),
        "pairs": PAIRS,
        "benchmarks": modules,
    }


def _table(figures: list[Figure]) -> Table:
    table = Table(
        title="sro benchmarks (ratio = median of per-pair ratios value/baseline, measured in the same run)"
    )
    for col in reporting.COLUMNS:
        table.add_column(
            col, justify="left" if col in ("benchmark", "baseline", "target", "met") else "right"
        )
    for f in figures:
        table.add_row(*reporting.row(f))
    return table


def run(names: list[str], json_path: Path | None) -> int:
    all_modules = sorted(
        m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_")
    )
    modules = [m for m in all_modules if not names or any(n in m for n in names)]
    if not modules:
        known = ", ".join(m.removeprefix("bench_") for m in all_modules)
        print(f"benchmarks: no benchmark matches {' '.join(names)} (known: {known})")
        return 2
    console = _console()
    started = datetime.datetime.now(datetime.UTC)
    load_start = os.getloadavg()
    figures: list[Figure] = []
    errors: dict[str, str] = {}
    for name in modules:
        console.print(f"[bold]running {name}[/bold]")
        try:
            figures += importlib.import_module(f"benchmarks.{name}").run()
        except Exception as e:  # one broken benchmark must not lose the others' figures
            traceback.print_exc()
            errors[name] = f"{type(e).__name__}: {e}"
    _show(console, figures, errors)
    doc = reporting.document(figures, _facts(modules, load_start, started), errors)
    if json_path is None:  # a run of some benchmarks does not replace the report of all of them
        json_path = (
            LATEST if modules == all_modules else LATEST.with_name(f"{'+'.join(_short(modules))}.json")
        )
    _write(console, doc, json_path)
    return 1 if errors else 0


def _short(modules: list[str]) -> list[str]:
    return [m.removeprefix("bench_") for m in modules]


def _show(console: Console, figures: list[Figure], errors: dict[str, str]) -> None:
    console.print(_table(figures))
    for line in reporting.explanations(figures):
        console.print(f"  explained — {line}", highlight=False)
    for name, err in errors.items():
        console.print(f"  FAILED {name}: {err}", highlight=False)
    console.print(reporting.summary(figures), highlight=False)


def _write(console: Console, doc: dict[str, Any], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")
    console.print(f"written to {path}", highlight=False)


def report(paths: list[str], json_path: Path | None) -> int:
    """`python -m benchmarks report A.json B.json ...`: the one table of reports run apart."""
    if not paths:
        print("usage: python -m benchmarks report REPORT.json ... [--json OUT]")
        return 2
    docs = []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text())
            compare.figures(doc)  # refuses what is not a report
        except (OSError, ValueError) as e:
            print(f"report: {p}: {getattr(e, 'strerror', None) or e}")
            return 2
        docs.append((p, doc))
    merged = reporting.merge(docs)
    console = _console()
    figures = [reporting.figure_from(r) for r in merged["figures"]]
    _show(console, figures, merged["errors"])
    if json_path is not None:
        _write(console, merged, json_path)
    return 0


def _console() -> Console:
    return Console() if Console().is_terminal else Console(width=300)  # logs and CI: no wrapping


def main(argv: list[str]) -> int:
    if argv[:1] == ["compare"]:
        return compare.main(argv[1:])
    if argv[:1] == ["chaos"]:  # the fault campaign: its own flags, never part of a plain run
        from benchmarks.chaos.__main__ import main as chaos

        return chaos(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("names", nargs="*", help="run only the benchmarks whose name contains one of these")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help=f"where to write the JSON report (default {LATEST} for all, <names>.json beside it for some)",
    )
    args = parser.parse_args(argv)
    if args.names[:1] == ["report"]:
        return report(args.names[1:], args.json)
    return run(args.names, args.json)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
