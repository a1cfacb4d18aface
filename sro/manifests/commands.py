"""`sro manifests`: print the rendered manifests of a component, for `kubectl apply -f -` on any cluster."""

from __future__ import annotations

import click

from sro.api.names import IMAGE, NAMESPACE
from sro.manifests import components, render_text


@click.group()
def manifests() -> None:
    """The Kubernetes manifests sro deploys, rendered for your cluster.

    Example: sro manifests render node-report --image registry.example/sro:0.1.0 | kubectl apply -f -
    """


@manifests.command("list")
def list_() -> None:
    """The components that have manifests."""
    for name in components():
        click.echo(name)


@manifests.command("render")
@click.argument("component")
@click.option("--image", default=IMAGE, show_default=True, help="The sro image the DaemonSets run.")
@click.option("--namespace", default=NAMESPACE, show_default=True)
@click.option("--pull-policy", default="IfNotPresent", show_default=True)
@click.option(
    "--set", "extra", multiple=True, metavar="KEY=VALUE", help="Another template value (repeatable)."
)
def render(component: str, image: str, namespace: str, pull_policy: str, extra: tuple[str, ...]) -> None:
    """Print COMPONENT's manifests as multi-document YAML."""
    values: dict[str, str] = {"image": image, "namespace": namespace, "pull_policy": pull_policy}
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--set")
        values[key] = value
    try:
        click.echo(render_text(component, **values), nl=False)
    except ValueError as e:
        raise click.ClickException(str(e)) from e
