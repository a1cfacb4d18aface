"""`sro install` and `sro uninstall`: thin commands over `objects` and `deploy` (what) and `kube.applying` (how).

Why the order of uninstall: every SpecialResource is deleted first and awaited, because the
operator's finalizer removes what each one created (DaemonSets, pods, node labels and taints, the
runtime files on the nodes) — so the operator must still run then. Only after that go the operator,
discovery, the RBAC, the CRD and the namespace.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from sro.api.images import pull_policy_for
from sro.api.names import IMAGE, NAMESPACE
from sro.api.openshift import PLATFORMS
from sro.console import progress
from sro.console.progress import Progress
from sro.install.deploy import (
    DEPLOY_COMMAND,
    DEPLOY_PULL_POLICY,
    OVERLAY_COMMAND,
    deploy_tree,
    overlay_tree,
    write_tree,
)
from sro.install.objects import OPERATOR_DEPLOYMENT, InstallError, Key, key, objects, to_yaml

console = Console(stderr=True, soft_wrap=True)  # whole lines: logs and tests read them
POLL = 0.5  # seconds between checks while waiting: a second install is done after one look


class WaitTimeout(RuntimeError):
    pass


def steps(title: str) -> AbstractContextManager[Progress]:
    """Progress for install steps; an API, install or wait error ends the command in one line."""
    from sro.kube.errors import KubeError

    return progress.steps(console, title, (KubeError, InstallError, WaitTimeout))


def wait_for(
    what: str, check: Callable[[], tuple[bool, str]], timeout: float, progress: Progress, hint: str = ""
) -> str:
    """Poll `check` until it is done; say what is awaited (and every change of its message) meanwhile."""
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        done, message = check()
        if done:
            return message
        if time.monotonic() >= deadline:
            raise WaitTimeout(
                f"{what}: not done after {timeout:.0f} s: {message}" + (f"\n{hint}" if hint else "")
            )
        if message != last:
            progress(f"waiting: {message}")
            last = message
        time.sleep(POLL)


def _client(kubeconfig: str | None) -> Any:
    from sro.kube.client import sync_client

    return sync_client(kubeconfig)


kubeconfig_option = click.option(
    "--kubeconfig",
    type=click.Path(dir_okay=False),
    envvar="KUBECONFIG",
    help="Kubeconfig [default: $KUBECONFIG, else in-cluster, else ~/.kube/config].",
)
namespace_option = click.option("--namespace", "-n", default=NAMESPACE, show_default=True)
timeout_option = click.option(
    "--timeout", default=300.0, show_default=True, type=float, help="Seconds to wait for each step."
)


@click.command()
@click.option(
    "--image", default=IMAGE, show_default=True, help="The sro image of the operator and its operands."
)
@namespace_option
@click.option(
    "--pull-policy",
    type=click.Choice(["Always", "IfNotPresent", "Never"]),
    help="[default: Never for localhost/ images (imported, no registry), else IfNotPresent; "
    f"{DEPLOY_PULL_POLICY} with --output]",
)
@click.option(
    "--operator/--no-operator",
    default=True,
    show_default=True,
    help="--no-operator: everything but the operator Deployment (run `sro operator` yourself, e.g. "
    "from a checkout); an existing Deployment is left as it is.",
)
@click.option("--dry-run", is_flag=True, help="Print the objects as YAML instead of applying them.")
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Write them as a kustomize directory instead (`{DEPLOY_COMMAND}` refreshes deploy/).",
)
@click.option(
    "--wait/--no-wait", default=True, show_default=True, help="Wait for discovery and the operator to run."
)
@click.option(
    "--platform",
    type=click.Choice(PLATFORMS),
    default="kubernetes",
    show_default=True,
    help="openshift: also an SCC per operand with its `use` grant, the operator's OpenShift role and its "
    "ClusterOperator; refused where config.openshift.io is not served. With --output: the "
    f"deploy/openshift/ overlay alone (`{OVERLAY_COMMAND}`).",
)
@click.option(
    "--discovery-labels-nodes",
    is_flag=True,
    help="Discovery labels its own Node (a ClusterRole with patch on every Node) instead of writing the "
    "labels into its NodeFeature for the operator to apply (the default: no node agent may patch Nodes).",
)
@timeout_option
@kubeconfig_option
def install(
    image: str,
    namespace: str,
    pull_policy: str | None,
    operator: bool,
    dry_run: bool,
    output: Path | None,
    wait: bool,
    platform: str,
    discovery_labels_nodes: bool,
    timeout: float,
    kubeconfig: str | None,
) -> None:
    """Install sro: namespace, the SpecialResource CRD, every account and role the operator and its
    operands use (the operator creates no RBAC), discovery (once for the cluster), the operator.

    Idempotent: a second run applies the same objects (server-side apply, field manager `sro`) and
    reports them unchanged. `kubectl apply -k deploy/` installs the same objects.
    """
    try:
        if output is not None:
            if not operator:
                raise click.UsageError("--output writes the whole install; --no-operator is for a cluster")
            if platform == "openshift":
                tree = overlay_tree(namespace, image)
            else:
                tree = deploy_tree(namespace, image, pull_policy or DEPLOY_PULL_POLICY)
            removed = write_tree(tree, output)
            click.echo(
                f"wrote {len(tree)} files to {output}"
                + (f", removed {', '.join(removed)}" if removed else "")
            )
            return
        objs = objects(
            namespace,
            image,
            pull_policy or pull_policy_for(image),
            operator=operator,
            platform=platform,
            discovery_labels_nodes=discovery_labels_nodes,
        )
    except InstallError as e:
        raise click.ClickException(str(e)) from e
    if dry_run:
        click.echo(to_yaml(objs), nl=False)
        return

    from sro.kube import applying

    with steps(f"Installing sro into namespace {namespace}") as progress:
        client = _client(kubeconfig)
        if platform == "openshift":
            _require_openshift(client, progress)
        counts: dict[str, int] = {}
        for obj in objs:
            before = applying.get(client, obj)
            after = applying.apply(client, obj)
            if before is None:
                verb = "created"
            elif before["metadata"].get("resourceVersion") == after["metadata"].get("resourceVersion"):
                verb = "unchanged"
            else:
                verb = "configured"
            counts[verb] = counts.get(verb, 0) + 1
            if verb != "unchanged":
                progress(f"{verb} {key(obj)}")
            if obj["kind"] == "CustomResourceDefinition":
                name = obj["metadata"]["name"]
                wait_for(
                    f"CRD {name}",
                    _established(client, name),
                    timeout,
                    progress,
                )
        progress("applied " + ", ".join(f"{n} {verb}" for verb, n in sorted(counts.items())))
        if wait:
            rollouts = [o for o in objs if key(o) in _workloads(namespace)]
            for obj in rollouts:
                message = wait_for(
                    str(key(obj)),
                    _rolled_out(client, obj),
                    timeout,
                    progress,
                    hint=f"see: kubectl -n {namespace} describe {obj['kind'].lower()} {obj['metadata']['name']}",
                )
                progress(message)
        progress("Done" + ("" if operator else " (no operator: run `sro operator` yourself)"))


def _workloads(namespace: str) -> set[Key]:
    return {Key("DaemonSet", "sro-discovery", namespace), Key("Deployment", OPERATOR_DEPLOYMENT, namespace)}


Check = Callable[[], tuple[bool, str]]


def _established(client: Any, name: str) -> Check:
    from sro.kube.applying import crd_established

    return lambda: (crd_established(client, name), f"CRD {name} to be Established")


def _rolled_out(client: Any, obj: dict[str, Any]) -> Check:
    from sro.kube.applying import rollout

    def check() -> tuple[bool, str]:
        r = rollout(client, obj)
        return r.done, r.message

    return check


def _gone(client: Any, obj: dict[str, Any]) -> Check:
    from sro.kube.applying import get

    return lambda: (get(client, obj) is None, f"{key(obj)} to be gone")


@click.command()
@namespace_option
@click.option(
    "--keep-crd", is_flag=True, help="Leave the SpecialResource CRD (and so nothing to lose of it)."
)
@click.option(
    "--force",
    is_flag=True,
    help="Do not wait for the operator to finalize the SpecialResources: remove their finalizers at "
    "once (when no operator runs); what they created on the nodes stays.",
)
@timeout_option
@kubeconfig_option
def uninstall(namespace: str, keep_crd: bool, force: bool, timeout: float, kubeconfig: str | None) -> None:
    """Remove sro: every SpecialResource first (the operator's finalizer removes what each created:
    DaemonSets, pods, node labels and taints, runtime files), then the operator, discovery, the RBAC,
    the CRD (unless --keep-crd) and the namespace.

    The feature labels discovery published stay on the nodes (they are the nodes' facts, and other
    tools may select on them); `sro discover --cleanup --node-name NODE` removes them from a node.
    """
    from sro.kube import applying

    try:
        # every object either mode installs: --discovery-labels-nodes adds a ClusterRole and its binding
        objs = objects(namespace, discovery_labels_nodes=True)
    except InstallError as e:
        raise click.ClickException(str(e)) from e
    with steps(f"Uninstalling sro from namespace {namespace}") as progress:
        client = _client(kubeconfig)
        if _is_openshift(client):  # the SCCs, grants and ClusterOperator of --platform openshift too
            objs = objects(namespace, platform="openshift", discovery_labels_nodes=True)
        _delete_special_resources(client, namespace, force, timeout, progress)
        last = [o for o in objs if o["kind"] in ("CustomResourceDefinition", "Namespace")]
        for obj in reversed([o for o in objs if o not in last]):
            progress(f"{'deleted' if applying.delete(client, obj) else 'absent '} {key(obj)}")
        kept_nfd = _nfd_crds_to_keep(client)
        for obj in reversed(last):
            if keep_crd and obj["kind"] == "CustomResourceDefinition":
                progress(f"kept    {key(obj)}")
                continue
            if obj["kind"] == "CustomResourceDefinition" and obj["metadata"]["name"] in kept_nfd:
                progress(f"kept    {key(obj)}: {kept_nfd[obj['metadata']['name']]}")
                continue
            if applying.delete(client, obj):
                progress(f"deleted {key(obj)}")
                wait_for(str(key(obj)), _gone(client, obj), timeout, progress)
            else:
                progress(f"absent  {key(obj)}")
        progress(
            "Done. The feature labels discovery published stay on the nodes; "
            "`sro discover --cleanup --node-name NODE` removes them from a node."
        )


def _require_openshift(client: Any, progress: Progress) -> None:
    """Refuse --platform openshift, before anything is created, where OpenShift's groups are not served."""
    from sro.kube.openshift import missing_groups

    missing = missing_groups(client)
    if missing:
        raise InstallError(
            f"--platform openshift: this cluster does not serve the API group {' or '.join(missing)}, so it "
            "is not OpenShift; nothing was created (install without --platform on plain Kubernetes)"
        )
    progress("OpenShift: config.openshift.io and security.openshift.io are served")


def _is_openshift(client: Any) -> bool:
    from sro.kube.openshift import missing_groups

    return not missing_groups(client)


def _nfd_crds_to_keep(client: Any) -> dict[str, str]:
    """NFD's CRDs hold the admin's NodeFeatureRules (and NFD itself may be back one day): while any
    rule exists, deleting them would delete the rules, so they stay (name -> why)."""
    from sro.api.nfd_crds import nfd_crds
    from sro.kube.errors import KubeError
    from sro.kube.nodefeatures import rule_names

    try:
        rules = rule_names(client)
    except Exception as e:  # the API away or refusing: say so in one line, delete nothing of NFD's
        raise KubeError(f"list NodeFeatureRules: {e}") from e
    if not rules:
        return {}
    why = f"{len(rules)} NodeFeatureRule(s) ({', '.join(rules[:5])}) would go with it"
    return {c["metadata"]["name"]: why for c in nfd_crds()}


def _delete_special_resources(
    client: Any, namespace: str, force: bool, timeout: float, progress: Progress
) -> None:
    from sro.kube import applying

    names = [sr["metadata"]["name"] for sr in applying.special_resources(client)]
    if not names:
        return
    for name in names:
        applying.delete_special_resource(client, name)
        progress(f"deleting SpecialResource {name}")

    def gone() -> tuple[bool, str]:
        left = applying.special_resources(client)
        detail = ", ".join(
            f"{sr['metadata']['name']} (finalizers: {', '.join(sr['metadata'].get('finalizers') or []) or 'none'})"
            for sr in left
        )
        return not left, f"{len(left)} SpecialResource(s) to be finalized by the operator: {detail}"

    if force:
        for sr in applying.special_resources(client):
            applying.drop_finalizers(client, sr["metadata"]["name"])
            progress(f"removed the finalizers of SpecialResource {sr['metadata']['name']} (--force)")
    wait_for(
        "SpecialResources",
        gone,
        timeout,
        progress,
        hint=f"Is the operator running? kubectl -n {namespace} get pods -l app.kubernetes.io/name=sro-operator\n"
        "`sro uninstall --force` removes their finalizers instead (what they created on the nodes stays).",
    )
    progress("every SpecialResource is gone")
