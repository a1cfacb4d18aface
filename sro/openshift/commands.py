"""`sro bundle generate`: write sro's OLM bundle (ClusterServiceVersion, CRD, metadata) to a directory.

Thin: checks the inputs and writes what `sro.openshift.bundle.generate` makes; every refusal (a
version that is not semver, an image without a tag or digest) is one line, before anything is
written. Files of an earlier bundle in the directory that this one no longer has are removed.
"""

from __future__ import annotations

from pathlib import Path

import click

from sro.openshift.bundle import ANNOTATIONS_FILE, CHANNEL, MANIFESTS, BundleError, generate


@click.group()
def bundle() -> None:
    """OLM bundles of sro (registry+v1: manifests/ and metadata/)."""


@bundle.command("generate")
@click.option("--version", "version", required=True, help="The operator version, semver (e.g. 0.1.0).")
@click.option(
    "--image", default=None, help="The operator image, with a tag or digest [default: localhost/sro:VERSION]."
)
@click.option("--channel", "channels", multiple=True, default=(CHANNEL,), show_default=True,
              help="A channel the bundle is in (repeatable).")  # fmt: skip
@click.option("--default-channel", default=None, help="[default: the first --channel]")
@click.option("--replaces", default=None, help="The version this one upgrades from (spec.replaces).")
@click.option(
    "--output",
    "-o",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("bundle"),
    show_default=True,
    help="The bundle directory.",
)
def generate_command(
    version: str,
    image: str | None,
    channels: tuple[str, ...],
    default_channel: str | None,
    replaces: str | None,
    output: Path,
) -> None:
    """Write the bundle: manifests/ (the ClusterServiceVersion with the operator's Deployment, RBAC,
    the owned SpecialResource CRD and its descriptors, install modes, alm-examples, icon and related
    images; the CRD; the accounts, ConfigMaps and Services of the install) and
    metadata/annotations.yaml. Made from the objects `sro install` applies (deploy/ is the same)."""
    try:
        made = generate(version, image, channels=channels, default_channel=default_channel, replaces=replaces)
    except BundleError as e:
        raise click.ClickException(str(e)) from None
    removed = []
    for sub in (MANIFESTS, ANNOTATIONS_FILE.split("/")[0] + "/"):
        d = output / sub
        if d.is_dir():
            for p in sorted(d.glob("*.yaml")):
                if f"{sub}{p.name}" not in made.files:
                    p.unlink()
                    removed.append(f"{sub}{p.name}")
    for rel, text in made.files.items():
        path = output / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
    click.echo(
        f"wrote {len(made.files)} files to {output}" + (f", removed {', '.join(removed)}" if removed else "")
    )
