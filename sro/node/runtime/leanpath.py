"""The os.path functions the hook and the runc wrapper use, on `posix` alone (POSIX semantics).

Why: both run on every container start that asks for devices, and `import os` (os.path and the
_collections_abc it pulls in) is ~1.3 ms of that start, more than finding the driver's files. What
the active path needs from `os` itself is in `posix` (the C module `os` re-exports); what it needs
from os.path is here. Each function answers as its os.path namesake does (paths are `str`);
tests/unit/test_runtime_leanpath.py compares them on plain paths, `..`, symlink chains, loops and
missing components.
"""

from __future__ import annotations

import posix
from stat import S_ISDIR, S_ISLNK, S_ISREG

from sro.node.runtime.leanjson import path_isabs as isabs
from sro.node.runtime.leanjson import path_join

__all__ = ["abspath", "basename", "dirname", "fsencode", "isabs", "isdir", "isfile", "join", "lexists",
           "normpath", "realpath", "relpath"]  # fmt: skip


def join(a: str, *parts: str) -> str:
    """os.path.join."""
    for b in parts:
        a = path_join(a, b)
    return a


def basename(path: str) -> str:
    """os.path.basename."""
    return path[path.rfind("/") + 1 :]


def dirname(path: str) -> str:
    """os.path.dirname: the head, its trailing slashes dropped unless it is all slashes."""
    head = path[: path.rfind("/") + 1]
    stripped = head.rstrip("/")
    return stripped if stripped else head


def normpath(path: str) -> str:
    """os.path.normpath: `.`, `..` and repeated slashes folded without touching the disk."""
    if not path:
        return "."
    # POSIX keeps exactly two leading slashes (implementation-defined), folds three or more to one
    lead = (
        "//" if path.startswith("//") and not path.startswith("///") else "/" if path.startswith("/") else ""
    )
    out: list[str] = []
    for comp in path.split("/"):
        if comp in ("", "."):
            continue
        if comp != ".." or (not lead and not out) or (out and out[-1] == ".."):
            out.append(comp)
        elif out:
            out.pop()
    return lead + "/".join(out) or "."


def abspath(path: str) -> str:
    """os.path.abspath."""
    return normpath(path if path.startswith("/") else join(posix.getcwd(), path))


def relpath(path: str, start: str = ".") -> str:
    """os.path.relpath."""
    if not path:
        raise ValueError("no path specified")
    here = [c for c in abspath(start).split("/") if c]
    there = [c for c in abspath(path).split("/") if c]
    common = 0
    for a, b in zip(here, there, strict=False):
        if a != b:
            break
        common += 1
    rel = [".."] * (len(here) - common) + there[common:]
    return "/".join(rel) if rel else "."


def realpath(path: str) -> str:
    """os.path.realpath (not strict): every symlink followed; a missing component is kept as written
    (a later `..` still drops it); at a symlink met again while its own target is being walked (a
    loop), the walk stops: that link's path with every component still to walk, normalised."""
    if not path.startswith("/"):
        path = join(posix.getcwd(), path)  # getcwd is itself resolved
    pending: list[str | None] = list(reversed(path.split("/")))  # the next component last
    walking: list[str] = []  # links whose targets are being walked; a None in pending ends one
    done = ""  # the resolved path so far; "" is the root
    while pending:
        name = pending.pop()
        if name is None:
            walking.pop()
            continue
        if name in ("", "."):
            continue
        if name == "..":
            done = done[: done.rfind("/")]
            continue
        here = done + "/" + name
        try:
            is_link = S_ISLNK(posix.lstat(here).st_mode)
        except OSError:
            is_link = False
        if not is_link:
            done = here
            continue
        if here in walking:
            return normpath(join(here, *[p for p in reversed(pending) if p]))
        target = posix.readlink(here)
        if target.startswith("/"):
            done = ""
        walking.append(here)
        pending.append(None)
        pending.extend(reversed(target.split("/")))
    return done or "/"


def _mode(path: str, follow: bool = True) -> int | None:
    try:
        return (posix.stat(path) if follow else posix.lstat(path)).st_mode
    except (OSError, ValueError):
        return None


def isfile(path: str) -> bool:
    """os.path.isfile."""
    mode = _mode(path)
    return mode is not None and S_ISREG(mode)


def isdir(path: str) -> bool:
    """os.path.isdir."""
    mode = _mode(path)
    return mode is not None and S_ISDIR(mode)


def lexists(path: str) -> bool:
    """os.path.lexists."""
    return _mode(path, follow=False) is not None


def fsencode(path: str) -> bytes:
    """os.fsencode on Linux (UTF-8, undecodable bytes kept through surrogateescape)."""
    return path.encode("utf-8", "surrogateescape")
