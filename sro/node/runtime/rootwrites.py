"""Writing and removing the runtime root's files: atomic writes, the root's lock, the manifest read
back, and one change of the root from the old manifest to a new one.

Why: the files are live (containerd runs the launcher, CRI-O the hooks.d entry), so every write is a
temporary file renamed over the old one and skipped where the bytes and mode are already right;
concurrent installers take turns through a lock on the root directory; only what a manifest lists
is ever removed.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Mapping

from sro.node.runtime.rootmanifest import MANIFEST, File, InstallError, Log, Manifest


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _same(path: str, f: File) -> bool:
    try:
        st = os.lstat(path)
        if not os.path.isfile(path) or os.path.islink(path) or (st.st_mode & 0o7777) != f.mode:
            return False
        with open(path, "rb") as fh:
            return fh.read(len(f.data) + 1) == f.data
    except OSError:
        return False


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str, f: File) -> bool:
    """Write `f` at `path` through a temporary file and a rename; False if it was already so."""
    if _same(path, f):
        return False
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(f.data)
            fh.flush()
            os.fchmod(fh.fileno(), f.mode)
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(os.path.dirname(path))
    return True


class RootLock:
    """An exclusive flock on the root directory itself (no lock file left behind)."""

    def __init__(self, root: str) -> None:
        os.makedirs(root, mode=0o755, exist_ok=True)
        self.fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def __enter__(self) -> RootLock:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def read_manifest(root: str) -> Manifest | None:
    path = os.path.join(root, MANIFEST)
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    try:
        return Manifest.from_json(text)
    except (ValueError, TypeError, KeyError) as e:
        raise InstallError(
            f"{path} is not a manifest sro can read ({e}); nothing was changed. Remove the files it "
            "lists by hand (or the whole directory, if nothing else lives there) and install again"
        ) from None


def _remove(root: str, rel: str, log: Log) -> None:
    path = os.path.join(root, rel)
    if os.path.islink(path) or not os.path.lexists(path):
        if os.path.islink(path):
            log(f"left {path}: a symlink now, not the file sro wrote")
        return
    if not os.path.isfile(path):
        log(f"left {path}: not a regular file any more")
        return
    os.unlink(path)
    log(f"removed {path}")
    parent = os.path.dirname(rel)
    while parent:  # directories we made (hooks.d, cdi), once empty
        try:
            os.rmdir(os.path.join(root, parent))
        except OSError:
            break
        parent = os.path.dirname(parent)


def _remove_external(path: str, meta: Mapping[str, str], log: Log) -> None:
    """Remove a live hooks.d entry we wrote (the same bytes); the directory is CRI-O's and stays."""
    try:
        if os.path.islink(path) or not os.path.isfile(path):
            if os.path.lexists(path):
                log(f"left {path}: not a regular file any more")
            return
        with open(path, "rb") as f:
            same = sha256(f.read()) == meta.get("sha256")
    except OSError as e:
        log(f"left {path}: {e.strerror}")
        return
    if not same:
        log(f"left {path}: changed since sro wrote it")
        return
    os.unlink(path)
    log(f"removed {path}")


def apply_files(
    root: str,
    old: Manifest | None,
    new: Manifest,
    files: Mapping[str, File | None],
    log: Log,
    external: Mapping[str, File] | None = None,
) -> Manifest:
    """Write `files` (None: keep the file as the old manifest has it), remove what the old manifest
    lists and `files` does not, then write (or, with no recipes left, remove) the manifest.

    The external (live) hooks.d entries go first and come last: one that is no longer wanted is
    removed before anything else, a new one written only after the archive it names."""
    external = external or {}
    old_external = old.external if old is not None else {}
    for path in sorted(set(old_external) - set(external)):
        _remove_external(path, old_external[path], log)
    listed: dict[str, Mapping[str, str]] = {}
    for rel, f in files.items():
        if f is None:
            if old is not None and rel in old.files:
                listed[rel] = old.files[rel]
            continue
        path = os.path.join(root, rel)
        log(f"{'wrote' if write_atomic(path, f) else 'unchanged'} {path}")
        listed[rel] = {"sha256": sha256(f.data), "mode": f"{f.mode:04o}"}
    external_listed: dict[str, Mapping[str, str]] = {}
    for path, f in sorted(external.items()):
        log(f"{'wrote' if write_atomic(path, f) else 'unchanged'} {path}")
        external_listed[path] = {"sha256": sha256(f.data), "mode": f"{f.mode:04o}"}
    for rel in sorted(set(old.files) - set(listed) if old is not None else ()):
        _remove(root, rel, log)
    result = Manifest(new.settings, new.recipes, listed, new.notes, new.owners, external_listed)
    if new.recipes:
        write_atomic(os.path.join(root, MANIFEST), File(result.to_json().encode()))
    elif os.path.lexists(os.path.join(root, MANIFEST)):
        _remove(root, MANIFEST, log)
    return result
