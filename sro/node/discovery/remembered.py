"""Parses of a node file remembered from one pass to the next, for as long as its content is the same.

Why: the daemon reads the kernel config, modules.builtin, os-release and the simulated driver's
device list on every pass, and they change only with the kernel, an upgrade or a driver install;
parsing them again (gzip, shlex, JSON) was most of a pass. The file is still read every pass — a
changed file is parsed again on the pass that reads it — only the parse is saved.

The content is compared with `==` against the last content of the same path, never hashed: a
fresh bytes or str object has no cached hash, so a dict or lru_cache lookup hashes all of it on
every pass, while comparing two equal buffers is one memcmp. Every caller gets the same value
object, so values must be immutable (frozenset, MappingProxyType, frozen records). A parse that
raises is not remembered: the next pass parses (and reports) again.

The same holds for what is derived from a source's features (its labels, checked: a pure function
of the features and the config), keyed by the source's name. `forget()` drops everything remembered
— what a freshly started daemon has — so the benchmark can also time a first pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

C = TypeVar("C")  # the file's content (bytes or str), or what a derivation is a function of
V = TypeVar("V")  # its parse (immutable)

_FORGET: list[Callable[[], None]] = []


def on_forget(clear: Callable[[], None]) -> None:
    """Have `forget()` also call `clear` (another memory of past passes: an lru_cache's cache_clear)."""
    _FORGET.append(clear)


def forget() -> None:
    """Drop everything every Remembered (and each `on_forget` memory) holds: the next pass is a first."""
    for clear in _FORGET:
        clear()


class Remembered(Generic[C, V]):
    """`parse(path, content)`, remembered per path (at most `size` paths) while the content is equal
    (the path is for the parse's messages)."""

    def __init__(self, parse: Callable[[str, C], V], size: int = 16) -> None:
        self._parse = parse
        self._size = size
        self._last: dict[str, tuple[C, V]] = {}
        on_forget(self.clear)

    def __call__(self, path: str, content: C) -> V:
        last = self._last.get(path)
        if last is not None and last[0] == content:
            return last[1]
        value = self._parse(path, content)
        if len(self._last) >= self._size and path not in self._last:
            self._last.clear()  # a node reads a handful of such files: more means churn, start over
        self._last[path] = (content, value)
        return value

    def clear(self) -> None:
        self._last.clear()
