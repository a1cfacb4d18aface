"""Runs the benchmark modules (benchmarks/bench_*.py) and prints one table of figures vs baselines."""

from __future__ import annotations

import importlib
import pkgutil
import sys

from rich.console import Console
from rich.table import Table

import benchmarks
from benchmarks.harness import Figure


def main(names: list[str]) -> int:
    modules = sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("bench_"))
    if names:
        modules = [m for m in modules if any(n in m for n in names)]
    table = Table(title="sro benchmarks (ratio = value / baseline measured in the same run)")
    for col in ("benchmark", "value", "baseline", "ratio", "target"):
        table.add_column(col, justify="left" if col in ("benchmark", "baseline", "target") else "right")
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # logs and CI: one figure per line, no wrapping
    for name in modules:
        console.print(f"[bold]running {name}[/bold]")
        figures: list[Figure] = importlib.import_module(f"benchmarks.{name}").run()
        for f in figures:
            table.add_row(
                f.name,
                f"{f.value:.3f} {f.unit}",
                f"{f.baseline:.3f} {f.unit} ({f.baseline_name})",
                f"{f.ratio:.2f}x",
                f.target,
            )
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
