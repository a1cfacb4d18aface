"""The OCI image-layout archive: digests and sizes that containerd will verify, a named index."""

from __future__ import annotations

import hashlib
import json
import tarfile
from pathlib import Path

from sro.local.ocilayout import ImageConfig, layer_from_files, write_archive


def test_archive_is_a_consistent_oci_layout(tmp_path: Path) -> None:
    exe = tmp_path / "tool"
    exe.write_text("#!/bin/sh\necho hi\n")
    exe.chmod(0o755)
    layer = layer_from_files(
        tmp_path / "l.tar", {"usr/bin/tool": exe, "etc/x.conf": b"k=v\n"}, {"bin/t": "/usr/bin/tool"}
    )
    out = write_archive(
        tmp_path / "img.tar", "localhost/x:1", [layer], ImageConfig(entrypoint=["/usr/bin/tool"])
    )
    with tarfile.open(out) as tar:
        names = tar.getnames()
        blob = lambda d: tar.extractfile(f"blobs/sha256/{d.split(':')[1]}").read()  # type: ignore[union-attr]  # noqa: E731
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr]
        desc = index["manifests"][0]
        assert desc["annotations"]["org.opencontainers.image.ref.name"] == "localhost/x:1"
        manifest_bytes = blob(desc["digest"])
        assert hashlib.sha256(manifest_bytes).hexdigest() == desc["digest"].split(":")[1]
        manifest = json.loads(manifest_bytes)
        config = json.loads(blob(manifest["config"]["digest"]))
        assert config["config"]["Entrypoint"] == ["/usr/bin/tool"]
        layer_desc = manifest["layers"][0]
        layer_bytes = blob(layer_desc["digest"])
        assert len(layer_bytes) == layer_desc["size"]
        assert config["rootfs"]["diff_ids"] == [layer_desc["digest"]]
    assert "oci-layout" in names
    with tarfile.open(layer) as lt:
        members = {m.name: m for m in lt.getmembers()}
    assert members["usr/bin/tool"].mode == 0o755
    assert members["bin/t"].issym() and members["bin/t"].linkname == "/usr/bin/tool"
    assert members["usr"].isdir() and members["etc"].isdir()
