"""Read the hook's state JSON from runc, doing the hook's own preparation while it is in flight.

Why: runc starts a hook and only then writes the state to its stdin, from a goroutine that the Go
scheduler runs when it gets to it: measured here, the first byte arrives 3-6 ms after the hook's
`import` is done, for every hook, active or not. The hook used to sit in read() for that time and
only then import activation, driverfiles, inject... (about as long again). Here those steps run
while nothing is there to read: each is done only when a non-blocking read finds the pipe still
empty, so a state that is already there is read at once, and at most one step (a fraction of a ms)
overshoots the state's arrival. A step changes nothing outside the process: imports and reading
this host's driver files, never the container (which the state names).

Only a pipe (or FIFO) on stdin is read this way (O_NONBLOCK is set on it for one read, then cleared);
anything else (a file, a test's BytesIO) is read as before.
"""

from __future__ import annotations

import posix

TYPE_CHECKING = False  # no typing at run time (see hook)
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import IO

_S_IFMT, _S_IFIFO = 0o170000, 0o010000  # stat's, without importing `stat`


def pipe_fd(stream: IO[bytes]) -> int | None:
    """The descriptor behind `stream` when it is a pipe, else None."""
    try:
        fd = stream.fileno()
        return fd if posix.fstat(fd).st_mode & _S_IFMT == _S_IFIFO else None
    except (AttributeError, OSError, ValueError):
        return None


def try_read(fd: int, limit: int) -> bytes | None:
    """What is there on `fd` now (b"" at end of file), or None when nothing has come yet."""
    posix.set_blocking(fd, False)
    try:
        return posix.read(fd, limit)
    except BlockingIOError:
        return None
    finally:
        posix.set_blocking(fd, True)


def read_overlapped(stream: IO[bytes], limit: int, steps: Iterable[Callable[[], object]] = ()) -> bytes:
    """Up to `limit` bytes of `stream` to its end; each of `steps` runs, in order, only while the
    stream (a pipe) has nothing to read yet. A step's exception is the step's own business: it is
    swallowed here, and the hook meets it again where it does that work for real."""
    head = b""
    fd = pipe_fd(stream) if steps else None
    if fd is not None:
        for step in steps:
            got = try_read(fd, limit)
            if got is not None:
                head = got
                break
            try:
                step()
            except Exception:  # redone, and reported, where the hook does that work for real
                continue
    return head + stream.read(limit - len(head)) if len(head) < limit else head
