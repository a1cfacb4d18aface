"""`sro nodepool create|types`: thin glue over `generating` (what) and `sro.kube.machines` (how).

Bad input exits 2 with the option or field named and nothing sent; the API server's refusals exit 1
(after `--apply` took back whatever it had created).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
import yaml

from sro.api.yamltext import yaml_error
from sro.nodepools.generating import SOURCE_KINDS, Kind, generate, merge_cluster_autoscaler, to_yaml
from sro.nodepools.instancetypes import INSTANCE_TYPES, PROVIDERS
from sro.nodepools.pool import Pool
from sro.nodepools.request import NodepoolError, PoolRequest, parse_label, parse_taint

DEFAULT_NAMESPACES: dict[Kind, str] = {"machineset": "openshift-machine-api", "machinedeployment": "default"}


def _refuse(message: str, code: int = 2) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _note(message: str) -> None:
    click.echo(f"note: {message}", err=True)


@click.group("nodepool")
def nodepool() -> None:
    """GPU node pools: a GPU MachineSet (OpenShift) or MachineDeployment (Cluster API) from a worker one,
    with its autoscaler wiring."""


@nodepool.command("create")
@click.option("--from", "source", default="", help="The worker MachineSet/MachineDeployment to copy.")
@click.option(
    "--from-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Read the source from YAML/JSON (with a MachineDeployment's templates) instead of the cluster.",
)
@click.option(
    "--kind", type=click.Choice(list(SOURCE_KINDS)), help="The source's kind (default: machineset)."
)
@click.option(
    "-n", "--namespace", default="", help="The source's namespace (openshift-machine-api / default)."
)
@click.option("--instance-type", required=True, help="The GPU instance type (`sro nodepool types`).")
@click.option("--replicas", type=int, required=True, help="Nodes to start with.")
@click.option("--name", default="", help="The pool's name (default: the source's, `worker` -> `gpu`).")
@click.option("--min", "min_replicas", type=int, help="Autoscaler: fewest nodes (with --max).")
@click.option("--max", "max_replicas", type=int, help="Autoscaler: most nodes (with --min).")
@click.option("--label", "labels", multiple=True, help="Node label key=value (repeatable).")
@click.option("--taint", "taints", multiple=True, help="Node taint key[=value]:Effect (repeatable).")
@click.option(
    "--special-resource", default="", help="The SpecialResource whose startup taint new nodes carry."
)
@click.option(
    "--apply", "do_apply", is_flag=True, help="Server-side apply (field manager sro) instead of printing."
)
@click.option("-o", "--output", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
def create(
    source: str,
    from_file: Path | None,
    kind: Kind | None,
    namespace: str,
    instance_type: str,
    replicas: int,
    name: str,
    min_replicas: int | None,
    max_replicas: int | None,
    labels: tuple[str, ...],
    taints: tuple[str, ...],
    special_resource: str,
    do_apply: bool,
    output: str,
) -> None:
    """Generate the GPU pool from an existing worker pool; print it, or --apply it."""
    if not source and from_file is None:
        _refuse("--from NAME (read from the cluster) or --from-file FILE is needed")
    try:
        req = PoolRequest(
            instance_type=instance_type,
            replicas=replicas,
            name=name,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            labels=tuple(parse_label(x) for x in labels),
            taints=tuple(parse_taint(x) for x in taints),
            special_resource=special_resource,
        )
        docs = _load_file(from_file) if from_file is not None else None
    except NodepoolError as e:
        _refuse(str(e))

    from sro.kube.errors import KubeError

    client: Any = None
    try:
        if docs is None:
            from sro.kube.client import sync_client
            from sro.kube.machines import read_source

            k: Kind = kind or "machineset"
            kind_name, api_version = SOURCE_KINDS[k]
            client = sync_client()
            docs = read_source(client, api_version, kind_name, source, namespace or DEFAULT_NAMESPACES[k])
        pool = generate(docs, req, source, kind)
    except NodepoolError as e:
        _refuse(str(e))
    except KubeError as e:
        _refuse(str(e), 1)

    for note in pool.notes:
        _note(note)
    if do_apply:
        _apply(pool, client)
        return
    if any(o["kind"] == "ClusterAutoscaler" for o in pool.objects):
        _note("the ClusterAutoscaler holds this pool's GPU limit only; --apply merges it into the cluster's")
    if output == "json":
        click.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": list(pool.objects)}, indent=2))
    else:
        click.echo(to_yaml(pool.objects), nl=False)


def _load_file(path: Path) -> list[Any]:
    from sro.nodepools.generating import documents

    try:
        return documents(yaml.safe_load_all(path.read_text()))
    except yaml.YAMLError as e:
        raise NodepoolError("--from-file", f"{path}: not YAML/JSON: {yaml_error(e)}") from e


def _apply(pool: Pool, client: Any) -> None:
    from sro.kube.client import sync_client
    from sro.kube.errors import KubeError
    from sro.kube.machines import apply_all, read

    try:
        client = client or sync_client()
        objects = list(pool.objects)
        for i, obj in enumerate(objects):
            if obj["kind"] == "ClusterAutoscaler":
                objects[i], note = merge_cluster_autoscaler(obj, read(client, obj))
                _note(note)
        apply_all(client, objects, lambda line: click.echo(line))
    except KubeError as e:
        _refuse(str(e), 1)
    click.echo(
        f"pool {pool.name}: {pool.instance.name} ({pool.instance.gpus} x {pool.instance.product}), "
        f"GPU type {pool.gpu_type}"
    )


@nodepool.command("types")
@click.option("--provider", type=click.Choice(PROVIDERS), help="Only this provider's types.")
def types(provider: str | None) -> None:
    """The GPU instance types sro knows, with the figures the autoscaler gets (plain columns: they
    stay whole in a narrow terminal and in a pipe)."""
    rows = [("PROVIDER", "INSTANCE TYPE", "VCPUS", "MEMORY MIB", "GPUS", "PRODUCT", "GPU TYPE")]
    for p in PROVIDERS:
        if provider and p != provider:
            continue
        for t in INSTANCE_TYPES[p].values():
            rows.append((p, t.name, str(t.vcpus), str(t.memory_mib), str(t.gpus), t.product, t.accelerator))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip())
