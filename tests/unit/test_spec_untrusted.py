"""Spec fields that reach code or API paths are refused unless plain (issue 21 §2): the driver image
template takes only bare documented variables and makes a bounded image; ConfigMap names are
DNS-1123 names in the schema and in the parser (both from the one field table)."""

from __future__ import annotations

from typing import Any

import pytest

from sro.api.crd import crd
from sro.api.specfields import IMAGE_MAX
from sro.api.specialresource import SpecError
from sro.api.specparsing import parse_spec
from sro.operator.reconcile import reconcile
from tests.unit.operator.test_reconcile import NOW, NS, cond, node, observed, sr


def _nvidia(template: str, version: str = "550.54") -> dict[str, Any]:
    return {"recipe": "nvidia-gpu", "driver": {"version": version, "imageTemplate": template}}


@pytest.mark.parametrize(
    "template",
    [
        "r/d:{version:>100000000}",
        "r/d:{version:x>100000000}",
        "r/d:{version:{foo}}",
        "r/d:{os_id:{}}",
        "r/d:{version!r}",
        "r/d:{version!s}",
        "r/d:{kernel:.3}",
        "r/d:{version.real}",
        "r/d:{version[0]}",
        "r/d:{}",
        "r/d:{0}",
    ],
)
def test_image_template_takes_only_bare_documented_names(template: str) -> None:
    with pytest.raises(SpecError, match=r"^spec\.driver\.imageTemplate: "):
        parse_spec("gpus", _nvidia(template))
    plan = reconcile(observed([node("a")], the_sr=sr(_nvidia(template))), NS, NOW)
    degraded = cond(plan, "Degraded")
    assert not plan.deployable and degraded["status"] == "True" and degraded["reason"] == "SpecInvalid"
    assert "spec.driver.imageTemplate" in degraded["message"]


def test_image_template_result_is_bounded() -> None:
    # each {kernel} may be a 63-character label value: 17 of them pass the bound in a short template
    many = "r/d:" + "{kernel}" * 17
    assert IMAGE_MAX < 17 * 63
    with pytest.raises(SpecError, match=r"spec\.driver\.imageTemplate: the image it makes can be"):
        parse_spec("gpus", _nvidia(many))
    with pytest.raises(SpecError, match=r"spec\.driver\.imageTemplate: the image it makes can be"):
        parse_spec("gpus", _nvidia("r/d:" + "{version}" * 40, version="v" * 100))
    with pytest.raises(SpecError, match=r"spec\.driver\.imageTemplate: .* longer than 512"):
        parse_spec("gpus", _nvidia("r/d:" + "x" * 600))
    with pytest.raises(SpecError, match=r"spec\.driver\.version: .* longer than 128"):
        parse_spec("gpus", _nvidia("r/d:{version}", version="1" * 200))


def test_documented_image_templates_still_parse() -> None:
    spec = parse_spec(
        "gpus", _nvidia("registry.example/nvidia/driver:{version}-{os_id}{os_version}-{kernel}-{os_major}")
    )
    assert spec.driver.image_template.endswith("{os_major}")


@pytest.mark.parametrize("fld", ["customManifests", "recipeConfigMap"])
@pytest.mark.parametrize(
    "name", ["../../kube-system/configmaps/coredns", "a/b", "UPPER", "x" * 254, "-a", "a?b=c"]
)
def test_config_map_names_are_dns_names(fld: str, name: str) -> None:
    spec = {"recipe": "simulated-gpu", fld: name}
    with pytest.raises(SpecError, match=rf"^spec\.{fld}: "):
        parse_spec("gpus", spec)
    plan = reconcile(observed([node("a")], the_sr=sr(spec)), NS, NOW)
    degraded = cond(plan, "Degraded")
    assert degraded["reason"] == "SpecInvalid" and f"spec.{fld}" in degraded["message"]
    props = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert props[fld]["maxLength"] == 253 and props[fld]["pattern"].startswith("^[a-z0-9]")


def test_ordinary_config_map_names_parse() -> None:
    spec = parse_spec("gpus", {"recipe": "simulated-gpu", "customManifests": "my-manifests.v2"})
    assert spec.custom_manifests == "my-manifests.v2"
