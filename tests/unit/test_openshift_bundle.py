"""`sro bundle generate`: the OLM bundle against the bundle format, against golden files, and its refusals.

The format checks are those operator-registry and OLM make when a bundle is loaded and installed:
the annotations (media type, directories, package, channels), exactly one ClusterServiceVersion,
only kinds OLM accepts in manifests/, the CSV's required fields and install strategy, every owned
CRD present in the bundle and agreeing with the CSV (name, version, kind, descriptor paths that
exist in its schema), alm-examples that are valid objects of owned kinds, and every image the CSV
names listed in relatedImages, pinned by a tag or digest.

`SRO_UPDATE_GOLDEN=1 pytest tests/unit/test_openshift_bundle.py` rewrites tests/golden/bundle/.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from sro.cli import cli
from sro.install.objects import objects
from sro.openshift import bundle as b
from tests.golden_files import update_goldens

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "bundle"
VERSION = "0.1.0"
IMAGE = "registry.example/sro:0.1.0"


def _generate(out: Path, *extra: str) -> str:
    res = CliRunner().invoke(
        cli, ["bundle", "generate", "--version", VERSION, "--image", IMAGE, "-o", str(out), *extra]
    )
    assert res.exit_code == 0, res.output
    return res.output


def _read(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): p.read_text() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def bundle_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("bundle")
    _generate(out)
    return out


def _docs(d: Path) -> dict[str, dict[str, Any]]:
    out = {}
    for p in sorted((d / "manifests").iterdir()):
        docs = [x for x in yaml.safe_load_all(p.read_text()) if x]
        assert len(docs) == 1, f"{p.name}: one object per file"
        out[p.name] = docs[0]
    return out


def test_golden(bundle_dir: Path) -> None:
    got = _read(bundle_dir)
    if update_goldens():
        if GOLDEN.exists():
            for p in GOLDEN.rglob("*.yaml"):
                p.unlink()
        for rel, text in got.items():
            (GOLDEN / rel).parent.mkdir(parents=True, exist_ok=True)
            (GOLDEN / rel).write_text(text)
    assert got == _read(GOLDEN), "the bundle changed: SRO_UPDATE_GOLDEN=1 rewrites tests/golden/bundle/"


def test_annotations(bundle_dir: Path) -> None:
    ann = yaml.safe_load((bundle_dir / "metadata" / "annotations.yaml").read_text())["annotations"]
    prefix = "operators.operatorframework.io.bundle."
    assert ann[prefix + "mediatype.v1"] == "registry+v1"
    assert ann[prefix + "manifests.v1"] == "manifests/" and ann[prefix + "metadata.v1"] == "metadata/"
    assert ann[prefix + "package.v1"] == "sro"
    channels = ann[prefix + "channels.v1"].split(",")
    assert channels == ["alpha"] and ann[prefix + "channel.default.v1"] in channels
    assert sorted(p.name for p in bundle_dir.iterdir()) == ["manifests", "metadata"]


def test_manifests_are_one_csv_and_kinds_olm_accepts(bundle_dir: Path) -> None:
    docs = _docs(bundle_dir)
    csvs = [n for n, d in docs.items() if d["kind"] == "ClusterServiceVersion"]
    assert csvs == ["sro.clusterserviceversion.yaml"]
    for name, d in docs.items():
        assert d["kind"] in b.SUPPORTED_KINDS, f"{name}: OLM does not accept a {d['kind']} in a bundle"
        assert d.get("apiVersion") and d["metadata"].get("name")
        assert "namespace" not in d["metadata"] or d["kind"] == "ClusterServiceVersion"


def _csv(d: Path) -> dict[str, Any]:
    return _docs(d)["sro.clusterserviceversion.yaml"]


def test_csv_required_fields_and_install_strategy(bundle_dir: Path) -> None:
    csv = _csv(bundle_dir)
    spec = csv["spec"]
    assert csv["apiVersion"] == "operators.coreos.com/v1alpha1"
    assert csv["metadata"]["name"] == f"sro.v{VERSION}" and spec["version"] == VERSION
    assert spec["displayName"] and spec["description"] and spec["provider"]["name"]
    assert spec["minKubeVersion"] == "1.20.0"
    modes = {m["type"]: m["supported"] for m in spec["installModes"]}
    assert modes == {
        "OwnNamespace": True,
        "SingleNamespace": False,
        "MultiNamespace": False,
        "AllNamespaces": False,
    }
    (icon,) = spec["icon"]
    assert icon["mediatype"] == "image/svg+xml" and base64.b64decode(icon["base64data"]).startswith(b"<svg")
    install = spec["install"]
    assert install["strategy"] == "deployment"
    (dep,) = install["spec"]["deployments"]
    assert dep["name"] == "sro-operator"
    tmpl = dep["spec"]["template"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= tmpl["metadata"]["labels"].items()
    # the same Deployment as deploy/ (and `sro install`) with this image
    (installed,) = [o for o in objects(image=IMAGE, pull_policy="IfNotPresent") if o["kind"] == "Deployment"]
    assert dep["spec"] == installed["spec"]
    # every account a pod runs as exists: OLM creates those of permissions, the rest are manifests
    accounts = {
        p["serviceAccountName"] for k in ("permissions", "clusterPermissions") for p in install["spec"][k]
    }
    accounts |= {d["metadata"]["name"] for d in _docs(bundle_dir).values() if d["kind"] == "ServiceAccount"}
    assert tmpl["spec"]["serviceAccountName"] in accounts
    installed_accounts = {o["metadata"]["name"] for o in objects() if o["kind"] == "ServiceAccount"}
    assert accounts == installed_accounts


def test_rbac_is_the_install_rbac_plus_openshift(bundle_dir: Path) -> None:
    spec = _csv(bundle_dir)["spec"]["install"]["spec"]
    cluster = {p["serviceAccountName"]: p["rules"] for p in spec["clusterPermissions"]}
    namespaced = {p["serviceAccountName"]: p["rules"] for p in spec["permissions"]}
    installed = objects(image=IMAGE)
    role = next(
        o for o in installed if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "sro-operator"
    )
    assert cluster["sro-operator"][: len(role["rules"])] == role["rules"]
    scc_rule = next(r for r in cluster["sro-operator"] if "securitycontextconstraints" in r["resources"])
    assert {"sro-driver", "sro-operator", b.BOOTSTRAP_SCC} <= set(scc_rule["resourceNames"])
    assert "use" in scc_rule["verbs"]
    ns_role = next(o for o in installed if o["kind"] == "Role" and o["metadata"]["name"] == "sro-operator")
    assert namespaced["sro-operator"] == ns_role["rules"]


def _schema_has(schema: dict[str, Any], path: str) -> bool:
    node = schema
    for part in path.split("."):
        props = node.get("properties") or {}
        if part not in props:
            return False
        node = props[part]
    return True


def test_owned_crd_agrees_with_the_csv(bundle_dir: Path) -> None:
    docs = _docs(bundle_dir)
    crds = {d["metadata"]["name"]: d for d in docs.values() if d["kind"] == "CustomResourceDefinition"}
    owned = _csv(bundle_dir)["spec"]["customresourcedefinitions"]["owned"]
    assert [o["name"] for o in owned] == list(crds) == ["specialresources.sro.dev"]
    for o in owned:
        crd = crds[o["name"]]
        assert o["name"] == f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"
        assert o["kind"] == crd["spec"]["names"]["kind"] and o["displayName"] and o["description"]
        (version,) = [v for v in crd["spec"]["versions"] if v["name"] == o["version"]]
        assert version["served"] and version["storage"]
        schema = version["schema"]["openAPIV3Schema"]["properties"]
        for key, where in (("specDescriptors", "spec"), ("statusDescriptors", "status")):
            for desc in o[key]:
                assert _schema_has(schema[where], desc["path"]), f"{key} {desc['path']} is not in the schema"
                assert desc["displayName"] and desc["x-descriptors"]


def _check_against(schema: dict[str, Any], value: Any, where: str) -> None:
    kind = schema.get("type")
    if kind == "object" and isinstance(value, dict) and "properties" in schema:
        for k, v in value.items():
            assert k in schema["properties"], f"{where}.{k} is not in the schema"
            _check_against(schema["properties"][k], v, f"{where}.{k}")
    types = {"object": dict, "string": str, "boolean": bool, "array": list, "integer": int}
    if kind in types:
        assert isinstance(value, types[kind]), f"{where}: not a {kind}"


def test_alm_examples_are_valid_special_resources(bundle_dir: Path) -> None:
    csv = _csv(bundle_dir)
    examples = json.loads(csv["metadata"]["annotations"]["alm-examples"])
    crd = _docs(bundle_dir)["sro.dev_specialresources.yaml"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert [e["metadata"]["name"] for e in examples] == ["simulated-gpu", "nvidia-gpu"]
    for e in examples:
        assert e["apiVersion"] == "sro.dev/v1alpha1" and e["kind"] == "SpecialResource"
        _check_against(schema["properties"]["spec"], e["spec"], "spec")
        assert e["spec"]["recipe"] in ("simulated-gpu", "nvidia-gpu")


def test_every_image_is_a_related_image(bundle_dir: Path) -> None:
    csv = _csv(bundle_dir)
    related = {r["image"] for r in csv["spec"]["relatedImages"]}
    named = b.images_in(csv["spec"]["install"]) | {csv["metadata"]["annotations"]["containerImage"]}
    assert named == {IMAGE} and named <= related
    for ref in related:
        b.check_image(ref)


@pytest.mark.parametrize("version", ["1.0", "v1.0.0", "1.0.0.0", "01.0.0", "1.0.0-", "latest", ""])
def test_refuses_a_version_that_is_not_semver(tmp_path: Path, version: str) -> None:
    res = CliRunner().invoke(cli, ["bundle", "generate", "--version", version, "-o", str(tmp_path / "b")])
    assert res.exit_code == 1 and "not a semantic version" in res.output
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "image", ["registry.example/sro", "localhost:5000/sro", "sro", "registry.example/sro@sha256:abc"]
)
def test_refuses_an_image_without_tag_or_digest(tmp_path: Path, image: str) -> None:
    res = CliRunner().invoke(
        cli, ["bundle", "generate", "--version", "1.0.0", "--image", image, "-o", str(tmp_path / "b")]
    )
    assert res.exit_code == 1 and ("neither a tag" in res.output or "not an image reference" in res.output)
    assert len(res.output.strip().splitlines()) == 1 and not (tmp_path / "b").exists()


@pytest.mark.parametrize(
    "image",
    [
        "registry.example/sro:0.1.0",
        "localhost:5000/team/sro:v1",
        "localhost/sro:0.1.0-rc.1",
        "registry.example/sro@sha256:" + "a" * 64,
    ],
)
def test_accepts_pinned_images(image: str) -> None:
    assert b.check_image(image) == image
    assert b.check_version("1.2.3-rc.1+build.5") == "1.2.3-rc.1+build.5"


def test_default_image_replaces_and_channels(tmp_path: Path) -> None:
    made = b.generate("0.2.0", channels=("alpha", "stable"), default_channel="stable", replaces="0.1.0")
    csv = made.csv
    assert csv["metadata"]["annotations"]["containerImage"] == "localhost/sro:0.2.0"
    assert csv["spec"]["replaces"] == "sro.v0.1.0"
    ann = yaml.safe_load(made.files["metadata/annotations.yaml"])["annotations"]
    assert ann["operators.operatorframework.io.bundle.channels.v1"] == "alpha,stable"
    with pytest.raises(b.BundleError, match="default-channel"):
        b.generate("0.2.0", channels=("alpha",), default_channel="stable")


def test_a_second_generation_removes_files_it_no_longer_has(tmp_path: Path) -> None:
    _generate(tmp_path)
    (tmp_path / "manifests" / "stale.yaml").write_text("{}")
    out = _generate(tmp_path)
    assert "removed manifests/stale.yaml" in out and not (tmp_path / "manifests" / "stale.yaml").exists()


def test_olm_objects_are_what_olm_creates(bundle_dir: Path) -> None:
    docs = list(_docs(bundle_dir).values())
    csv = _csv(bundle_dir)
    objs = b.olm_objects(csv, docs, "ns")
    kinds = [o["kind"] for o in objs]
    assert "ClusterServiceVersion" not in kinds and kinds[-1] == "Deployment"
    accounts = {o["metadata"]["name"] for o in objs if o["kind"] == "ServiceAccount"}
    deployment = objs[-1]
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] in accounts
    for o in objs:
        if o["kind"] not in ("CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding"):
            assert o["metadata"]["namespace"] == "ns"
        assert o["metadata"]["labels"]["olm.owner"] == "sro.v0.1.0"
    bindings = [o for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    for bnd in bindings:
        assert {s["name"] for s in bnd["subjects"]} <= accounts
