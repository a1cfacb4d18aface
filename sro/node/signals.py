"""Signals for the node agents' long-running commands, taken by one thread that waits for them.

Why not `signal.signal` alone: Python runs a handler in the main thread, between two of its
bytecodes — possibly while that thread holds the very lock the handler needs. `Event.set()` in a
handler, with the main thread inside `Event.wait()` on the same event, deadlocks: CI caught the
exporter stuck that way, never to collect again on SIGUSR1. And the kernel may give a signal to
another thread, so that a main thread asleep in a long wait hears of it only when the wait ends.
So `route` blocks the signals — every thread started afterwards inherits the mask, hence "call it
before any thread starts" — and a daemon thread takes them with `sigwait` and calls their handlers
there, at once, whatever the other threads are doing.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Mapping


def route(handlers: Mapping[signal.Signals, Callable[[], None]]) -> None:
    """Call `handlers[sig]()` (in a thread of its own) whenever `sig` comes; call before starting threads."""
    signums = set(handlers)
    signal.pthread_sigmask(signal.SIG_BLOCK, signums)
    for signum in signums:
        # A handler, not the default, for a thread that unblocks them anyway (C code may): there a
        # SIGUSR1 or SIGHUP must not end the process.
        signal.signal(signum, lambda *_: None)

    def take() -> None:
        while True:
            handlers[signal.Signals(signal.sigwait(signums))]()

    threading.Thread(target=take, name="signals", daemon=True).start()
