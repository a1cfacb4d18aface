"""`deploy/openshift/` (the overlay `kubectl apply -k` reads) and `sro install --platform openshift`'s
objects: the committed overlay is what a fresh generation writes (it is the golden file), its base is
deploy/ byte for byte, and it adds exactly the OpenShift objects."""

from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from sro.cli import cli
from sro.install import scc
from sro.install.deploy import OVERLAY_COMMAND, deploy_tree, overlay_objects, overlay_tree
from sro.install.objects import key, objects

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
OVERLAY = DEPLOY / "openshift"


def _committed(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): p.read_text() for p in sorted(d.rglob("*.yaml"))}


def test_overlay_directory_is_up_to_date() -> None:
    assert _committed(OVERLAY) == overlay_tree(), (
        f"deploy/openshift/ is stale: run `.venv/bin/{OVERLAY_COMMAND}` and commit the result"
    )


def test_overlay_base_is_deploy() -> None:
    base = {k.removeprefix("base/"): v for k, v in overlay_tree().items() if k.startswith("base/")}
    assert base == deploy_tree() == {p.name: p.read_text() for p in DEPLOY.glob("*.yaml")}


def test_overlay_is_kustomize_v2_bases_of_its_own_files() -> None:
    tree = overlay_tree()
    k = yaml.safe_load(tree["kustomization.yaml"])
    assert k["bases"] == ["base/"] and "components" not in k
    assert sorted(k["resources"]) == sorted(n for n in tree if "/" not in n and n != "kustomization.yaml")
    kinds = {yaml.safe_load(tree[n])["kind"] for n in k["resources"]}
    assert kinds == {
        "SecurityContextConstraints",
        "ClusterRole",
        "ClusterRoleBinding",
        "RoleBinding",
        "ClusterOperator",
    }


def test_openshift_install_is_the_plain_one_plus_the_openshift_objects() -> None:
    plain = objects()
    ocp = objects(platform="openshift")
    assert [key(o) for o in ocp if key(o) in {key(p) for p in plain}] == [key(o) for o in plain]
    assert sorted(map(str, map(key, overlay_objects()))) == sorted(map(str, map(key, scc.objects())))
    kinds = [o["kind"] for o in ocp]
    # SCCs before the accounts that use them; the ClusterOperator before the operator (uninstall
    # deletes the operator first, so it cannot write the ClusterOperator back)
    assert kinds.index("SecurityContextConstraints") < kinds.index("ServiceAccount")
    assert kinds.index("ClusterOperator") == kinds.index("Deployment") - 1


def test_cli_platform_openshift_dry_run_and_output(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["install", "--platform", "openshift", "--dry-run"])
    assert res.exit_code == 0, res.output
    docs = list(yaml.safe_load_all(res.output))
    assert sum(d["kind"] == "SecurityContextConstraints" for d in docs) == len(scc.OPERANDS)
    res = CliRunner().invoke(cli, ["install", "--platform", "openshift", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert _committed(tmp_path) == overlay_tree()
    (tmp_path / "base" / "99-stale.yaml").write_text("{}")
    res = CliRunner().invoke(cli, ["install", "--platform", "openshift", "-o", str(tmp_path)])
    assert "removed base/99-stale.yaml" in res.output
    bad = CliRunner().invoke(cli, ["install", "--platform", "ocp", "--dry-run"])
    assert bad.exit_code == 2 and "ocp" in bad.output
