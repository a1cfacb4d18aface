"""The `--recipe` and `--recipe-file` options, written once for every command that takes them.

Why one place: the node agents' commands (device plugin, exporter, validation, CDI, hook, runtime,
holder scan) all choose a recipe the same way, a built-in one by name or a custom one from a YAML
file; what differs per command (a default, repeatable, required, any name) is a parameter here, so
the flags, their help and the error for a bad recipe file read the same everywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from sro.api.recipes import BUILTIN, Recipe, RecipeError, recipe_from_file

F = TypeVar("F", bound=Callable[..., Any])


def recipe_option(
    *,
    default: str | None = None,
    show_default: bool | None = None,
    required: bool = False,
    multiple: bool = False,
    builtin_only: bool = True,
    help: str | None = None,
) -> Callable[[F], F]:
    """`--recipe NAME`: a built-in recipe, as `recipe_name` (or as the tuple `recipe` when repeatable).

    `builtin_only=False` takes any name (a recipe installed earlier, which need not be built in now).
    """
    decls = ("--recipe",) if multiple else ("--recipe", "recipe_name")
    return click.option(
        *decls,
        type=click.Choice(sorted(BUILTIN)) if builtin_only else None,
        default=default,
        show_default=show_default,
        required=required,
        multiple=multiple,
        help=help,
    )


def recipe_file_option(f: F) -> F:
    """`--recipe-file PATH`: a custom recipe that replaces --recipe's, as `recipe_file`."""
    return click.option(
        "--recipe-file", type=click.Path(path_type=Path, dir_okay=False), help="A custom recipe (YAML)."
    )(f)


def recipe_options(default: str) -> Callable[[F], F]:
    """`--recipe NAME` (default shown in the help) and `--recipe-file PATH`; `load_recipe` reads them."""

    def decorate(f: F) -> F:
        return recipe_option(default=default, show_default=True)(recipe_file_option(f))

    return decorate


def load_recipe(name: str, path: Path | None) -> Recipe:
    """The recipe --recipe-file holds if given, else the built-in one --recipe names; a bad file ends
    the command with one line naming it and what is wrong."""
    if path is None:
        return BUILTIN[name]
    try:
        return recipe_from_file(path)
    except RecipeError as e:
        raise click.ClickException(str(e)) from e
