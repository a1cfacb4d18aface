"""What to do with data sro does not own and cannot read: say so once, then treat it as absent.

Why one place: node labels and annotations, NodeFeatures, ConfigMaps, pod termination messages and
the holder scan's output are written by others (anyone who may patch a node, a vendor's agent, a
SpecialResource author). A parser of such data must never let a failure out (an annotation of
`"[" * 5000` raised RecursionError through the whole pass), and the operator re-reads the same
garbage every pass, so the warning is given once per (what, where, value), from a bounded memory.
"""

from __future__ import annotations

import hashlib
import logging
from collections import OrderedDict

log = logging.getLogger("sro.operator.unreadable")

REMEMBERED = 1024  # distinct unreadable values warned about; the oldest are forgotten first
_seen: OrderedDict[tuple[str, str, str], None] = OrderedDict()


def unreadable(what: str, where: str, value: str, error: BaseException | str) -> None:
    """Log once that `what` on `where` could not be read (and is handled as absent)."""
    digest = hashlib.sha256(value.encode(errors="replace")).hexdigest()[:16]
    key = (what, where, digest)
    if key in _seen:
        _seen.move_to_end(key)
        return
    _seen[key] = None
    while len(_seen) > REMEMBERED:
        _seen.popitem(last=False)
    reason = error if isinstance(error, str) else f"{type(error).__name__}: {str(error)[:200]}"
    log.warning("%s on %s is unreadable (%s); handled as absent: %r", what, where, reason, value[:80])


def forget() -> None:
    """Forget what was warned about (tests)."""
    _seen.clear()
