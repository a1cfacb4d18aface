"""The hook's overlapped read of runc's state (statewait): the steps run only while the pipe is
empty, the bytes read are exactly what was written (a first chunk read non-blocking, the rest after),
stdin is left blocking, and a failing step neither stops the read nor escapes it."""

from __future__ import annotations

import contextlib
import io
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sro.node.runtime import hook, statewait


@pytest.fixture
def pipe() -> Iterator[tuple[io.BufferedReader, int]]:
    r, w = os.pipe()
    reader = os.fdopen(r, "rb")
    try:
        yield reader, w
    finally:
        reader.close()
        with contextlib.suppress(OSError):
            os.close(w)


def test_steps_run_while_nothing_has_come_and_the_state_is_read_whole(
    pipe: tuple[io.BufferedReader, int],
) -> None:
    reader, w = pipe
    ran: list[str] = []
    doc = b'{"bundle": "/b", "pid": 7, "pad": "' + b"x" * 200_000 + b'"}'  # more than one pipe buffer

    def writer() -> None:
        os.write(w, doc[:10])
        time.sleep(0.05)
        os.write(w, doc[10:])
        os.close(w)

    def slow(name: str) -> None:
        ran.append(name)
        if name == "first":
            threading.Thread(target=writer).start()
            time.sleep(0.02)

    steps = [lambda: slow("first"), lambda: slow("second"), lambda: slow("third")]
    assert statewait.read_overlapped(reader, 1 << 20, steps) == doc
    assert ran == ["first"]  # the state had started to come after the first step: no more steps
    assert os.get_blocking(reader.fileno())


def test_a_state_already_there_runs_no_step(pipe: tuple[io.BufferedReader, int]) -> None:
    reader, w = pipe
    os.write(w, b'{"bundle": "/b"}')
    os.close(w)
    ran: list[int] = []
    assert statewait.read_overlapped(reader, 100, [lambda: ran.append(1)]) == b'{"bundle": "/b"}'
    assert ran == []


def test_a_failing_step_is_swallowed_and_the_next_runs(pipe: tuple[io.BufferedReader, int]) -> None:
    reader, w = pipe
    ran: list[str] = []

    def boom() -> None:
        ran.append("boom")
        raise hook.HookError("unknown recipe")

    def last() -> None:
        ran.append("last")
        os.write(w, b"{}")
        os.close(w)

    assert statewait.read_overlapped(reader, 100, [boom, last, boom]) == b"{}"
    assert ran == ["boom", "last"]


def test_the_size_limit_holds_across_the_two_reads(pipe: tuple[io.BufferedReader, int]) -> None:
    reader, w = pipe
    os.write(w, b"a" * 50)

    def rest() -> None:
        time.sleep(0.02)
        os.write(w, b"b" * 100)
        os.close(w)

    threading.Thread(target=rest).start()
    got = statewait.read_overlapped(reader, 120, [lambda: None])
    assert len(got) == 120 and got.startswith(b"a" * 50)


def test_a_stream_that_is_no_pipe_is_read_plainly() -> None:
    ran: list[int] = []
    assert statewait.read_overlapped(io.BytesIO(b"{}"), 10, [lambda: ran.append(1)]) == b"{}"
    assert ran == []


def test_read_state_runs_the_hooks_steps_only_while_waiting(pipe: tuple[io.BufferedReader, int]) -> None:
    reader, w = pipe
    args = hook.parse_args(["prestart", "--recipe", "simulated-gpu", "--driver-root", "/nonexistent"])
    steps = args.prepare()
    assert len(steps) == 4

    def arrive() -> None:
        steps[0]()
        os.write(w, b'{"bundle": "/b", "pid": 3}')
        os.close(w)

    state = hook.read_state(reader, (arrive, *steps[1:]))
    assert state == {"bundle": "/b", "pid": 3}
    assert [r.name for r in args.recipes] == ["simulated-gpu"]
    assert args._devices == {} and args._found == {}  # the listing step never ran: the state came first


def test_the_steps_list_device_nodes_but_never_glob_a_drivers_files(tmp_path: Path) -> None:
    """A full discovery of a driver rooted at `/` globs its libraries over the host's lib folders
    (tens of ms): never speculatively, only for a recipe a container asks for."""
    (tmp_path / "sro-simgpu0").write_text("")
    args = hook.parse_args(["prestart", "--driver-root", str(tmp_path), "--dev-root", str(tmp_path)])
    for step in args.prepare():
        step()
    assert set(args._devices) == {r.name for r in args.recipes} and args._found == {}


def test_only_the_active_stages_and_update_ldcache_prepare_anything() -> None:
    assert hook.parse_args(["poststop"]).prepare() == ()
    assert len(hook.parse_args(["update-ldcache"]).prepare()) == 1
    assert len(hook.parse_args(["createContainer"]).prepare()) == 4
