"""Render a state's objects for one SpecialResource: the numbered templates, then sro's decorations.

Why two steps: the templates under `sro/manifests/<component>/` are the node agents' own manifests,
also used by `sro manifests render`, the demo and the tests; they know nothing of SpecialResources.
The operator renders them with the state's values and then, in Python, adds what gating and
ownership need — our labels, the owner reference, node affinity on the previous state's label, the
admin's tolerations, priority class, image, args, env and resources — so one template serves both.
Kinds that `sro install` owns (Namespace, ServiceAccount, RBAC) are left out: the operator creates
no RBAC at run time.

Values from a spec or a custom recipe enter the objects as data, never as YAML text (issue 21 §2): a
value that is not a plain name or path is rendered as an opaque token, and the token is replaced by
the value in the parsed objects. So a newline, `: `, `#`, quotes, braces or `{{ }}` in
`devicePlugin.image` stay in the image string; they cannot add `hostPID` or another key.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from sro.api.images import pull_policy_for
from sro.api.names import (
    API_VERSION,
    COMPONENT_LABEL,
    KIND,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    SIMULATED_LABEL,
    SPECIALRESOURCE_LABEL,
    STATE_LABEL,
    not_ready_taint,
)
from sro.api.recipes import Recipe
from sro.api.specialresource import SpecialResourceSpec, StateSpec
from sro.install.objects import INSTALL_KINDS
from sro.manifests import render
from sro.operator.recipedistribution import template_values

# The template values that come from a spec or a custom recipe (the rest are sro's own names, enums
# and numbers), and for the two block-scalar configs, how the template's literal block would have
# trimmed them (`|` keeps one final newline; devices_config is `trim`med first).
SPEC_VALUES = (
    "image",
    "driver_image",
    "driver_version",
    "plugin_config",
    "devices_config",
    "cuda_sample",
    "resource",
    "driver_root",
)
_BLOCK_TRIM: dict[str, Callable[[str], str]] = {
    "plugin_config": lambda v: re.sub(r"(?:\n[ \t]*)+\Z", "", v),
    "devices_config": str.strip,
}

# A node selector term: key -> value ("" = the key must exist).
Term = Mapping[str, str]


class RenderError(ValueError):
    """A template (built-in or custom) cannot be rendered; the message names the file."""


@dataclass(frozen=True)
class Context:
    """What every state's rendering needs about its SpecialResource."""

    sr: str
    uid: str
    spec: SpecialResourceSpec
    recipe: Recipe
    namespace: str
    image: str  # the operator's own image: the default of every state
    custom: Mapping[str, str] = field(default_factory=dict)  # `<state>.<file>` -> template
    prometheus_operator: bool = False  # its CRDs exist: ServiceMonitor and PrometheusRule are rendered
    openshift: bool = False  # OpenShift: CRI-O nodes (the runtime state writes CRI-O's hooks.d too)
    # what every node of one pass would compute again from this Context alone (see `memo`); a
    # `replace`d Context starts empty
    _memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def memo(self, key: Any, make: Callable[[], Any]) -> Any:
        """`make()`, computed once per Context (a Context lives for one pass): at 1,000 nodes a
        value each node's walk needs, such as the repr of the recipe, was most of a pass."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    @property
    def simulated_driver(self) -> bool:
        """sro's simulated driver stands in for the recipe's real one (`spec.driver.mode: simulated`,
        set only for a real recipe once admitted): every object says so, the templates adapt."""
        return self.spec.driver.mode == "simulated"

    def state_image(self, state: str) -> str:
        return self.spec.state(state).image or self.image

    def pull_policy(self, state: str) -> str:
        explicit = self.spec.state(state).image_pull_policy
        if explicit:
            return explicit
        return pull_policy_for(self.state_image(state))

    def object_name(self, state: str, suffix: str = "") -> str:
        return f"sro-{self.sr}-{state}" + (f"-{suffix}" if suffix else "")

    def node_object_name(self, state: str, node: str) -> str:
        """The name of a state's one pod for one node (a validation, the holder scan)."""
        return self.object_name(state, node_suffix(node))

    def overrides(self, state: str) -> dict[str, str]:
        prefix = f"{state}."
        return {k.removeprefix(prefix): v for k, v in self.custom.items() if k.startswith(prefix)}


def short_hash(*parts: object, length: int = 8) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:length]


def hash_prefix(*fixed: object) -> Any:
    """The sha256 state after the repr of `fixed` as the first items of a longer tuple, for
    `short_hash_after`: the fixed items' repr is made once, not once per node. At least one item:
    only then is "(a, ..., last)" the tuple's repr (a 1-tuple's is "(last,)")."""
    if not fixed:
        raise ValueError("hash_prefix: at least one fixed item (use short_hash for a single one)")
    return hashlib.sha256(("(" + "".join(repr(x) + ", " for x in fixed)).encode())


def short_hash_after(prefix: Any, last: object, length: int = 8) -> str:
    """short_hash(*fixed, last) from `hash_prefix(*fixed)`: the same digest, so names and
    annotations written before stay valid."""
    h = prefix.copy()
    h.update((repr(last) + ")").encode())
    return str(h.hexdigest()[:length])


@functools.lru_cache(maxsize=1 << 14)
def node_suffix(node: str) -> str:
    """The part of a per-node object's name that names the node (a pure function of the name,
    asked for every state of every node on every pass: cached)."""
    return f"{slug(node, 20)}-{short_hash(node, length=5)}"


def slug(value: str, length: int = 24) -> str:
    """A DNS-label-safe piece of `value` (lower case, [a-z0-9-], trimmed)."""
    return re.sub(r"[^a-z0-9-]+", "-", value.lower()).strip("-")[:length].strip("-") or "x"


def render_state(ctx: Context, state: str, component: str, **values: Any) -> list[dict[str, Any]]:
    """The component's templates (with the admin's custom ones for this state), minus install kinds."""
    base: dict[str, Any] = dict(
        namespace=ctx.namespace,
        image=ctx.state_image(state),
        pull_policy=ctx.pull_policy(state),
        recipe=ctx.recipe.name,
        resource=ctx.recipe.resource,
        driver_root=ctx.recipe.driver_root,
        sr=ctx.sr,
        state=state,
    )
    if ctx.simulated_driver:
        base["simulated_driver"] = True
    # a custom recipe reaches the agents as a mounted file (`recipedistribution`)
    base.update(template_values(ctx.sr, ctx.recipe, bool(ctx.spec.recipe_config_map)))
    base.update(values)
    overrides = ctx.overrides(state)
    key = _render_key(component, state, overrides, base)
    docs = _RENDERED.get(key) if key is not None else None
    if docs is None:
        docs = _render_docs(component, state, overrides, base)
        if key is not None:
            _RENDERED[key] = docs
            while len(_RENDERED) > RENDER_CACHE_SIZE:
                del _RENDERED[next(iter(_RENDERED))]  # the oldest entry
    return [_fresh(d) for d in docs]


# The objects of the last RENDER_CACHE_SIZE distinct renders, by their inputs: rendering is pure
# (the sandboxed templates read only their values), and a pass rendered every state's templates again
# though a spec and its recipe rarely change: Jinja and the YAML parse were 60-70% of a one-node
# pass's CPU (py-spy of the operator, stop 43). Callers get their own copies (`_fresh`).
RENDER_CACHE_SIZE = 256
_RENDERED: dict[str, list[dict[str, Any]]] = {}


def _render_key(
    component: str, state: str, overrides: Mapping[str, str] | None, values: Mapping[str, Any]
) -> str | None:
    """The inputs of a render as one string, or None when a value is not plain data (not cached
    then: a value's text must stand for it exactly)."""
    try:
        return json.dumps([component, state, _keyed(overrides or {}), _keyed(values)])
    except TypeError:
        return None


def _keyed(value: Any) -> Any:
    """`value` as JSON that tells apart what a template could render differently: a tuple from a
    list (`{{ x }}` prints them unlike), a mapping's order (a loop over it follows it)."""
    if value is None or isinstance(value, str | int | float):  # bool is an int; JSON keeps them apart
        return value
    if isinstance(value, Mapping):
        return {"map": [[_keyed(k), _keyed(v)] for k, v in value.items()]}
    if isinstance(value, list | tuple):
        return {type(value).__name__: [_keyed(v) for v in value]}
    raise TypeError(f"not cached: a {type(value).__name__} value")


def _render_docs(
    component: str, state: str, overrides: Mapping[str, str] | None, values: Mapping[str, Any]
) -> list[dict[str, Any]]:
    base, tokens = _as_tokens(values)
    try:
        docs = _restore(render(component, overrides, **base), tokens)
    except ValueError as e:
        raise RenderError(f"state {state}: {e}") from e
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict) or "kind" not in doc or "metadata" not in doc:
            raise RenderError(f"state {state}: document {i + 1} is not a Kubernetes object (kind/metadata)")
    return [d for d in docs if d["kind"] not in INSTALL_KINDS]


def _fresh(obj: Any) -> Any:
    """A copy of parsed YAML's dicts and lists (its scalars are immutable): `copy.deepcopy` without
    its memo, several times quicker on these trees."""
    if isinstance(obj, dict):
        return {k: _fresh(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fresh(v) for v in obj]
    return obj


_PLAIN = re.compile(r"[A-Za-z0-9/][A-Za-z0-9._/@+-]*(?::[A-Za-z0-9._/@+-]+)*")


def plain_scalar(value: str) -> bool:
    """True for a name or path (`localhost/sro:1.0`, `/run/nvidia`) that reads back as the same
    string wherever a template puts it (plain, quoted, in a flow mapping)."""
    if not _PLAIN.fullmatch(value):
        return False
    try:
        return bool(yaml.safe_load(value) == value)
    except yaml.YAMLError:
        return False


def _as_tokens(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """`values` with each spec value that is not a plain YAML scalar replaced by a token that is;
    the tokens, to put the values back once the YAML is parsed."""
    out = dict(values)
    tokens: dict[str, str] = {}
    nonce = secrets.token_hex(6)
    for key in SPEC_VALUES:
        value = out.get(key)
        if not isinstance(value, str) or not value:
            continue
        if key in _BLOCK_TRIM:
            value = _BLOCK_TRIM[key](value)
        if key in _BLOCK_TRIM or not plain_scalar(value):
            token = f"sro-value-{nonce}-{len(tokens)}"
            tokens[token] = value
            out[key] = token
    return out, tokens


def _restore(obj: Any, tokens: Mapping[str, str]) -> Any:
    """`obj` with every token in its strings (keys too) replaced by its value, in one pass: a value
    that looks like a token is never replaced again."""
    if not tokens:
        return obj
    pattern = re.compile("|".join(re.escape(t) for t in tokens))

    def walk(o: Any) -> Any:
        if isinstance(o, str):
            return pattern.sub(lambda m: tokens[m.group(0)], o)
        if isinstance(o, dict):
            return {walk(k): walk(v) for k, v in o.items()}
        if isinstance(o, list):
            return [walk(v) for v in o]
        return o

    return walk(obj)


def node_affinity(terms: Sequence[Term]) -> dict[str, Any]:
    """Required node affinity: any one term, each term all of its labels (a value "a|b": either)."""
    out = []
    for term in terms:
        exprs = []
        for key, value in sorted(term.items()):
            if value:
                exprs.append({"key": key, "operator": "In", "values": value.split("|")})
            else:
                exprs.append({"key": key, "operator": "Exists"})
        out.append({"matchExpressions": exprs})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": out}}}


def _our_labels(ctx: Context, state: str) -> dict[str, str]:
    labels = {
        MANAGED_BY_LABEL: MANAGED_BY_VALUE,
        SPECIALRESOURCE_LABEL: ctx.sr,
        STATE_LABEL: state,
        COMPONENT_LABEL: state,
    }
    if ctx.simulated_driver:
        labels[SIMULATED_LABEL] = "true"
    return labels


def tolerations(ctx: Context) -> list[dict[str, Any]]:
    """Operands run where workloads may not: on startup-tainted and partitioned nodes, plus the admin's list."""
    out: list[dict[str, Any]] = [
        {"key": not_ready_taint(ctx.sr), "operator": "Exists", "effect": "NoSchedule"},
        # the partitioning taint (spec.partitioning.taint) is named after the extended resource
        {"key": ctx.recipe.resource, "operator": "Exists", "effect": "NoSchedule"},
    ]
    out.extend(dict(t) for t in ctx.spec.tolerations)
    return out


def _customise_container(container: dict[str, Any], st: StateSpec) -> None:
    if st.args:
        container["args"] = [*container.get("args", []), *st.args]
    if st.env:
        env = [e for e in container.get("env", []) if e.get("name") not in {k for k, _ in st.env}]
        container["env"] = [*env, *({"name": k, "value": v} for k, v in st.env)]
    if st.resources:
        container["resources"] = copy.deepcopy(dict(st.resources))
    if st.readiness_probe:
        container["readinessProbe"] = copy.deepcopy(dict(st.readiness_probe))
    if st.liveness_probe:
        container["livenessProbe"] = copy.deepcopy(dict(st.liveness_probe))


def decorate(
    doc: Mapping[str, Any], ctx: Context, state: str, terms: Sequence[Term] | None = None
) -> dict[str, Any]:
    """A copy of `doc` as the operator applies it: ours, owned by the SpecialResource, gated."""
    obj = copy.deepcopy(dict(doc))
    md = obj.setdefault("metadata", {})
    md["namespace"] = ctx.namespace
    md["labels"] = {**(md.get("labels") or {}), **_our_labels(ctx, state)}
    md["ownerReferences"] = [
        {"apiVersion": API_VERSION, "kind": KIND, "name": ctx.sr, "uid": ctx.uid, "blockOwnerDeletion": False}
    ]
    pod_spec: dict[str, Any] | None = None
    if obj["kind"] in ("DaemonSet", "Deployment"):
        spec = obj.setdefault("spec", {})
        spec.setdefault("selector", {}).setdefault("matchLabels", {}).update(
            {SPECIALRESOURCE_LABEL: ctx.sr, STATE_LABEL: state}
        )
        tmpl = spec.setdefault("template", {})
        tmd = tmpl.setdefault("metadata", {})
        tmd["labels"] = {**(tmd.get("labels") or {}), **_our_labels(ctx, state)}
        pod_spec = tmpl.setdefault("spec", {})
    elif obj["kind"] == "Pod":
        pod_spec = obj.setdefault("spec", {})
    if pod_spec is not None:
        if terms is not None:
            pod_spec["affinity"] = node_affinity(terms)
        existing = pod_spec.get("tolerations") or []
        pod_spec["tolerations"] = [*existing, *(t for t in tolerations(ctx) if t not in existing)]
        if ctx.spec.priority_class_name:
            pod_spec["priorityClassName"] = ctx.spec.priority_class_name
        containers = pod_spec.get("containers") or []
        if containers:
            _customise_container(containers[0], ctx.spec.state(state))
    return obj
