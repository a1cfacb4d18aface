"""Progress for long CLI steps, shared by `sro local`, `sro install`/`uninstall` and `sro demo`.

Each step is printed with the time since the start and a spinner shows the current one; one of the
expected errors ends the command with a one-line `error:` and exit status 1 (no traceback).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

Progress = Callable[[str], None]


@contextmanager
def steps(console: Console, title: str, errors: tuple[type[Exception], ...]) -> Iterator[Progress]:
    t0 = time.monotonic()
    with console.status(title) as status:

        def progress(message: str) -> None:
            console.print(f"[dim]{time.monotonic() - t0:6.1f}s[/dim] {escape(message)}")
            status.update(f"{escape(message)} ...")

        try:
            yield progress
        except errors as e:
            console.print(f"[bold red]error:[/bold red] {escape(str(e))}")
            sys.exit(1)
