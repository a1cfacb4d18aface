"""sro.node.signals: handlers run in their own thread, so a signal never deadlocks the main thread.

The child below is the exporter's loop in small: a main thread waiting on an Event that the SIGUSR1
handler sets. With `signal.signal` handlers it hangs now and then (the handler runs in the main
thread while it holds the Event's lock; one run in three on this machine, 2,000 signals); routed, it
must answer every SIGTERM at once.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

CHILD = """
import signal, threading
from sro.node import signals

wake, stop, handled = threading.Event(), threading.Event(), []

def on_usr1():
    handled.append(1)
    wake.set()

signals.route({signal.SIGUSR1: on_usr1, signal.SIGTERM: lambda: (stop.set(), wake.set())})
worker_mask = []
t = threading.Thread(target=lambda: worker_mask.append(signal.pthread_sigmask(signal.SIG_BLOCK, [])))
t.start()
t.join()
print("ready", flush=True)
while not stop.is_set():
    wake.wait(0.001)
    wake.clear()
print(len(handled), signal.SIGUSR1 in worker_mask[0] and signal.SIGTERM in worker_mask[0], flush=True)
"""


def test_a_storm_of_signals_never_deadlocks_the_waiting_main_thread() -> None:
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, cwd=root)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        for _ in range(2000):
            child.send_signal(signal.SIGUSR1)
            time.sleep(0.0005)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=10) == 0, "the main thread stopped answering"
        handled, worker_blocks = child.stdout.read().split()
        # signals of one kind coalesce while pending, so fewer than were sent, but some
        assert 0 < int(handled) <= 2000
        assert worker_blocks == "True", "a thread started after route() must block the routed signals"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()
