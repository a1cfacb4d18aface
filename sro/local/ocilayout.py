"""Write an OCI image-layout tar that `ctr image import` accepts (no Docker, no registry).

An image here is: uncompressed tar layers, a config (entrypoint, env, labels), a manifest and an
index whose `org.opencontainers.image.ref.name` annotation names the image. Layers stay uncompressed:
the archive only travels from this disk into containerd, so gzip would cost time and save nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LAYER = "application/vnd.oci.image.layer.v1.tar"
CONFIG = "application/vnd.oci.image.config.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


@dataclass(frozen=True)
class ImageConfig:
    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Sequence[str] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    workdir: str = "/"
    labels: Mapping[str, str] = field(default_factory=dict)


def _digest_file(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest(), path.stat().st_size


def write_archive(out: Path, ref: str, layers: Sequence[Path], config: ImageConfig) -> Path:
    """Write `out` (an OCI layout tar) from layer tars (bottom first)."""
    layer_descs = []
    for layer in layers:
        digest, size = _digest_file(layer)
        layer_descs.append({"mediaType": LAYER, "digest": digest, "size": size, "path": layer})
    cfg = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": list(config.entrypoint) or None,
            "Cmd": list(config.cmd) or None,
            "Env": list(config.env),
            "WorkingDir": config.workdir,
            "Labels": dict(config.labels),
        },
        "rootfs": {"type": "layers", "diff_ids": [d["digest"] for d in layer_descs]},
    }
    cfg_bytes = json.dumps(cfg, sort_keys=True).encode()
    cfg_digest = "sha256:" + hashlib.sha256(cfg_bytes).hexdigest()
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": cfg_digest, "size": len(cfg_bytes)},
        "layers": [{k: v for k, v in d.items() if k != "path"} for d in layer_descs],
    }
    man_bytes = json.dumps(manifest, sort_keys=True).encode()
    man_digest = "sha256:" + hashlib.sha256(man_bytes).hexdigest()
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MANIFEST,
                "digest": man_digest,
                "size": len(man_bytes),
                "annotations": {"org.opencontainers.image.ref.name": ref},
            }
        ],
    }

    def add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))

    tmp = out.with_suffix(".partial")
    with tarfile.open(tmp, "w") as tar:
        add_bytes(tar, "oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add_bytes(tar, "index.json", json.dumps(index).encode())
        add_bytes(tar, f"blobs/sha256/{cfg_digest[7:]}", cfg_bytes)
        add_bytes(tar, f"blobs/sha256/{man_digest[7:]}", man_bytes)
        for d in layer_descs:
            tar.add(str(d["path"]), arcname=f"blobs/sha256/{str(d['digest'])[7:]}")
    tmp.rename(out)
    return out


def layer_from_files(
    out: Path, files: Mapping[str, Path | bytes], links: Mapping[str, str] | None = None
) -> Path:
    """A layer tar from {path in image: host file or content} plus {symlink: target}; parents implied."""
    dirs: set[str] = set()
    links = links or {}
    for name in [*files, *links]:
        parts = name.strip("/").split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    with tarfile.open(out, "w") as tar:
        for d in sorted(dirs):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for name, src in sorted(files.items()):
            data = src if isinstance(src, bytes) else src.read_bytes()
            mode = 0o755 if isinstance(src, bytes) or src.stat().st_mode & 0o111 else 0o644
            info = tarfile.TarInfo(name.strip("/"))
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
        for name, target in sorted(links.items()):
            info = tarfile.TarInfo(name.strip("/"))
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out
