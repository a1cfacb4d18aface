"""Custom recipes installed in the runtime root: `recipes/<name>.json`, who owns them, what is refused.

Why: the hook and the wrapper run on the host, with the host's python and the zipapp alone, and know
only the built-in recipes by name. A custom recipe reaches them as a file in the root sro owns: the
canonical JSON of the admitted recipe (`recipe_to_dict`, sorted keys), written atomically and listed
in the manifest like every other file there, named by `--recipe-file <host path>` in the launcher,
the hooks.d entry and the CDI ldcache hook; the hook loads it with `hookrecipes.load_file`, which
checks its paths again. The manifest records the recipe and its owners as it does a built-in's, and
the file goes with its last owner. A name stands for one recipe on a node: a second owner installing
a different recipe under a name already installed is refused (its containers would get the other
recipe's files); the only owner may change its own (a recipe edited in its ConfigMap).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from sro.api.recipes import BUILTIN, Recipe, RecipeError, recipe_from_file
from sro.node.runtime.rootmanifest import File, InstallError, Log, Manifest, Settings, recipe_file
from sro.node.runtime.rootwrites import sha256


def document(recipe: Recipe) -> File:
    """The file `sro runtime install` writes for a custom recipe: its canonical JSON."""
    from sro.api.recipes import recipe_to_dict

    return File(json.dumps(recipe_to_dict(recipe), sort_keys=True).encode())


def custom_names(manifest: Manifest | None) -> tuple[str, ...]:
    """The recipes of `manifest` installed from a recipe file (the others are built-ins)."""
    if manifest is None:
        return ()
    return tuple(n for n in sorted(manifest.recipes) if recipe_file(n) in manifest.files)


def host_files(settings: Settings, names: Iterable[str]) -> dict[str, str]:
    """Recipe name -> the host path of its file, as the hook and wrapper options name it."""
    return {n: os.path.join(settings.host_dir, recipe_file(n)) for n in names}


def load(
    root: str, manifest: Manifest | None, skip: Iterable[str] = (), log: Log | None = None
) -> dict[str, Recipe]:
    """The custom recipes `manifest` lists, read back from `root` (but those in `skip`).

    An unreadable one is an InstallError, or, given `log` (uninstall, which must get on), a line
    there and left out."""
    out: dict[str, Recipe] = {}
    for name in custom_names(manifest):
        if name in skip:
            continue
        try:
            out[name] = recipe_from_file(Path(root) / recipe_file(name))
        except RecipeError as e:
            message = f"installed recipe {e}"
            if log is None:
                raise InstallError(f"{message}; install it again with --recipe-file") from None
            log(message)
    return out


def check_claims(root: str, old: Manifest | None, custom: Mapping[str, Recipe], owner: str) -> None:
    """Refuse a custom recipe named as a built-in, or one that differs from the recipe of that name
    another owner installed."""
    for name, recipe in sorted(custom.items()):
        if name in BUILTIN:
            raise InstallError(f"recipe {name!r}: a built-in recipe's name; give the custom recipe another")
        if old is None or name not in old.recipes:
            continue
        others = sorted(set(old.owners.get(name, ())) - {owner})
        meta = old.files.get(recipe_file(name))
        if others and (meta is None or meta.get("sha256") != sha256(document(recipe).data)):
            raise InstallError(
                f"recipe {name!r} is installed in {root} as a different recipe by {', '.join(others)}: "
                "refusing to replace it (give this recipe another name, or uninstall theirs first)"
            )


def recipe_of(name: str, custom: Mapping[str, Recipe]) -> Recipe | None:
    """The built-in recipe `name`, or the custom one; None when neither is known."""
    return BUILTIN.get(name) or custom.get(name)
