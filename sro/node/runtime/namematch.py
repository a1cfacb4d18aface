"""Shell-style name matching and a relative glob, without `re` (for the hook's start-up path).

Why: `fnmatch` and `glob` compile regular expressions, and importing `re` with them costs the hook
~2.5 ms on every container start, for patterns like `libcuda.so.*`. Patterns with only `*` and `?`
(every built-in recipe's) are matched here by a plain two-pointer matcher; a pattern with `[...]`
goes to `fnmatch` itself, so the semantics are fnmatch's in every case (`*` crosses nothing special,
matching is case-sensitive as on POSIX). `glob_in` follows `glob.glob(pattern, root_dir=root)`:
hidden names match only a pattern starting with `.`, directories are followed through symlinks.
`tests/unit/test_runtime_namematch.py` compares both with the standard library.
"""

from __future__ import annotations

import posix

from sro.node.runtime.leanpath import isdir, join, lexists

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable


def has_magic(pattern: str) -> bool:
    return "*" in pattern or "?" in pattern or "[" in pattern


def match(name: str, pattern: str) -> bool:
    """fnmatch.fnmatchcase(name, pattern)."""
    if "[" in pattern:
        import fnmatch  # character classes: rare in recipes, leave them to the real thing

        return fnmatch.fnmatchcase(name, pattern)
    n = p = 0
    star, mark = -1, 0
    while n < len(name):
        if p < len(pattern) and pattern[p] != "*" and (pattern[p] == "?" or pattern[p] == name[n]):
            n += 1
            p += 1
        elif p < len(pattern) and pattern[p] == "*":
            star, mark = p, n
            p += 1
        elif star != -1:
            p = star + 1
            mark += 1
            n = mark
        else:
            return False
    while p < len(pattern) and pattern[p] == "*":
        p += 1
    return p == len(pattern)


def literal_prefix(pattern: str) -> str:
    """What every name matching `pattern` starts with: its part before the first `*`, `?` or `[`."""
    for i, c in enumerate(pattern):
        if c in "*?[":
            return pattern[:i]
    return pattern


def filter_names(names: Iterable[str], pattern: str) -> list[str]:
    """fnmatch.filter(names, pattern) on POSIX. A name without the pattern's literal prefix is
    passed over by one `startswith` (C), not the character loop of `match`: a recipe's ~30 library
    globs over a distribution's lib folder (1,000+ names) took ~60 ms that way."""
    prefix = literal_prefix(pattern)
    return [n for n in names if n.startswith(prefix) and match(n, pattern)]


def _listdir(path: str, dirs_only: bool) -> list[str]:
    try:
        names = posix.listdir(path)
    except OSError:
        return []
    if dirs_only:
        names = [n for n in names if isdir(join(path, n))]
    return names


def glob_in(root: str, pattern: str) -> list[str]:
    """glob.glob(pattern, root_dir=root) (not recursive): matches relative to `root`, unsorted."""
    parts = [p for p in pattern.split("/") if p]
    if not parts:
        return []
    found = ["/"] if pattern.startswith("/") else [""]
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        step: list[str] = []
        for base in found:
            here = join(root, base) if base else root
            if has_magic(part):
                names = _listdir(here, dirs_only=not last)
                if not part.startswith("."):
                    names = [n for n in names if not n.startswith(".")]
                step += [join(base, n) for n in filter_names(names, part)]
            else:
                path = join(here, part)
                if lexists(path) if last else isdir(path):
                    step.append(join(base, part))
        found = step
    if pattern.endswith("/"):
        found = [f + "/" for f in found if isdir(join(root, f))]
    return found
