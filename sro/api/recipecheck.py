"""The rules a recipe's strings must keep, as plain string code: "" when a value is fine, else why not.

Why a module of its own, written without `re`, `typing` or `dataclasses`: two loaders read recipes and
both must refuse exactly the same documents. `sro.api.recipes` checks a recipe when an admin hands it
over (a ConfigMap, `--recipe-file`); the OCI hook re-checks the recipe file installed on the node
(`sro.node.runtime.hookrecipes.load_file`) on every container start, where importing `re` alone
would cost it milliseconds. A recipe names paths the hook mounts into containers and device nodes
it creates in them, so the path rules are what keeps a recipe from reaching outside `/dev` and the
driver root: a pattern, a name or a glob that could climb out (`..`, `/`) is refused, never
normalised into something the admin did not write.

Each rule takes the value (already known to be a `str`) and returns a short phrase saying what is
wrong; `recipe_fields` walks a whole document with them and raises `Refused` naming the field.
"""

from __future__ import annotations

from sro.api import builtin_recipes as _builtin

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

BUILTIN_NAMES = (_builtin.NVIDIA_GPU["name"], _builtin.SIMULATED_GPU["name"])
BACKENDS = ("nvml", "simulated", "devnodes")
METRICS = ("telemetry", "health")
VISIBLE_SUFFIX = "_VISIBLE_DEVICES"  # the hook's fast path lets other containers through unread
MAX_NAME = 40  # a recipe's name goes into object names (sro-recipe-<name>) and label keys
MAX_COMPANION_OFFSET = 4095
GLOB_CHARS = "*?[]"

_LOWER = "abcdefghijklmnopqrstuvwxyz"
_UPPER = _LOWER.upper()
_DIGITS = "0123456789"
_HEX = _DIGITS + "abcdef"
_LETTERS = _LOWER + _UPPER
_ALNUM = _LETTERS + _DIGITS


def _only(value: str, allowed: str) -> bool:
    return all(c in allowed for c in value)


def hex_id(value: str, sizes: Iterable[int]) -> str:
    """A PCI id: `sizes` hex digits (either case; NFD writes them in lower case)."""
    lengths = tuple(sizes)
    if len(value) not in lengths or not _only(value.lower(), _HEX):
        return f"must be {' or '.join(map(str, lengths))} hex digits, got {value!r}"
    return ""


def dns_label(value: str, limit: int = 63) -> str:
    """A DNS-1123 label: lower-case letters, digits and '-', starting and ending alphanumeric."""
    if not value or len(value) > limit:
        return f"must be 1 to {limit} characters, got {value!r}"
    if not _only(value, _LOWER + _DIGITS + "-") or value[0] == "-" or value[-1] == "-":
        return f"must be a DNS-1123 label (a-z, 0-9 and '-', starting and ending alphanumeric), got {value!r}"
    return ""


def recipe_name(value: str) -> str:
    """A custom recipe's name: a DNS-1123 label of at most MAX_NAME characters, not a built-in's."""
    problem = dns_label(value, MAX_NAME)
    if problem:
        return problem
    if value in BUILTIN_NAMES:
        return f"{value!r} is a built-in recipe's name; a custom recipe needs a name of its own"
    return ""


def dns_subdomain(value: str, limit: int = 253) -> str:
    """A DNS-1123 subdomain: dot-separated DNS-1123 labels, at most `limit` characters in all."""
    if not value or len(value) > limit:
        return f"must be 1 to {limit} characters, got {value!r}"
    if any(dns_label(part) for part in value.split(".")):
        return f"must be a DNS-1123 subdomain (labels of a-z, 0-9 and '-', joined by '.'), got {value!r}"
    return ""


def extended_resource(value: str) -> str:
    """Kubernetes' rule for an extended resource name: `<domain>/<name>`, the domain a DNS-1123
    subdomain outside kubernetes.io, the name 1-63 characters `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`,
    and `requests.<resource>` still a qualified name (what a ResourceQuota on it is called)."""
    domain, slash, name = value.partition("/")
    if not slash or "/" in name:
        return f"must be '<domain>/<name>', e.g. 'example.com/fpga', got {value!r}"
    if domain == "kubernetes.io" or domain.endswith(".kubernetes.io"):
        return f"the domain kubernetes.io and its subdomains are Kubernetes' own, got {value!r}"
    if domain.startswith("requests."):
        return f"must not start with 'requests.' (quota names would collide), got {value!r}"
    problem = dns_subdomain(domain, 253 - len("requests."))
    if problem:
        return f"domain {problem}"
    if not 1 <= len(name) <= 63:
        return f"the name after '/' must be 1 to 63 characters, got {value!r}"
    if not _only(name, _ALNUM + "-_.") or name[0] not in _ALNUM or name[-1] not in _ALNUM:
        return (
            "the name after '/' must be letters, digits, '-', '_' and '.', starting and ending "
            f"alphanumeric, got {value!r}"
        )
    return ""


def env_name(value: str) -> str:
    """An environment variable name the runtimes and the hook compare exactly: `[A-Z_][A-Z0-9_]*`."""
    if not value or not _only(value, _UPPER + _DIGITS + "_") or value[0] in _DIGITS:
        return f"must be an environment variable name ([A-Z_][A-Z0-9_]*), got {value!r}"
    return ""


def visible_devices_env(value: str) -> str:
    """The env var that selects devices: an env name ending in _VISIBLE_DEVICES, since the hook lets
    through, unread, every container with no variable of that ending."""
    problem = env_name(value)
    if problem:
        return problem
    if not value.endswith(VISIBLE_SUFFIX) or value == VISIBLE_SUFFIX:
        return f"must end in {VISIBLE_SUFFIX} (the hook's fast path looks for it), got {value!r}"
    return ""


def _cdi_part(value: str) -> bool:
    return bool(value) and value[0] in _LETTERS and value[-1] in _ALNUM and _only(value, _ALNUM + "_-.")


def cdi_kind(value: str) -> str:
    """CDI's `vendor/class`: each part starts with a letter, ends alphanumeric, holds only letters,
    digits, '_', '-' and '.' (the CDI parser's rule)."""
    vendor, slash, klass = value.partition("/")
    if not slash or not _cdi_part(vendor) or not _cdi_part(klass):
        return (
            "must be CDI's 'vendor/class' (each starting with a letter, ending alphanumeric, "
            f"letters, digits, '_', '-', '.'), got {value!r}"
        )
    return ""


def _unsafe_chars(value: str) -> str:
    return f"must not contain a NUL character, got {value!r}" if "\0" in value else ""


def absolute_path(value: str) -> str:
    """An absolute, normalised path: no empty, `.` or `..` part, no trailing '/' (but '/' itself)."""
    if not value.startswith("/"):
        return f"must be an absolute path, got {value!r}"
    if value != "/" and any(part in ("", ".", "..") for part in value[1:].split("/")):
        return f"must be normalised (no '//', '.' or '..' parts, no trailing '/'), got {value!r}"
    return _unsafe_chars(value)


def relative_path(value: str) -> str:
    """A path relative to the driver root, normalised: it can never name anything outside it."""
    if not value or value.startswith("/"):
        return f"must be a non-empty path relative to the driver root, got {value!r}"
    if any(part in ("", ".", "..") for part in value.split("/")):
        return f"must be normalised (no '//', '.' or '..' parts, no trailing '/'), got {value!r}"
    return _unsafe_chars(value)


def file_name(value: str) -> str:
    """A library glob or a binary's name: one file name, never a path."""
    if not value or value in (".", ".."):
        return f"must be a file name, got {value!r}"
    if "/" in value:
        return f"must be a file name without '/', got {value!r}"
    return _unsafe_chars(value)


def dev_node(value: str) -> str:
    """A device node: absolute and normalised under /dev, no glob characters."""
    problem = absolute_path(value)
    if problem:
        return problem
    if not value.startswith("/dev/"):
        return f"must be a path under /dev/, got {value!r}"
    if any(c in value for c in GLOB_CHARS):
        return f"must not contain glob characters ({GLOB_CHARS}), got {value!r}"
    return ""


def control_node(value: str) -> str:
    """A node every container using the hardware gets: a plain path under /dev (no placeholder)."""
    if "{" in value or "}" in value:
        return f"must not contain '{{' or '}}' (control nodes are not per device), got {value!r}"
    return dev_node(value)


def _one_placeholder(value: str) -> tuple[str, str, str]:
    """(the placeholder's inside, the pattern with 0 in its place, "") or ("", "", why not)."""
    start, end = value.find("{"), value.find("}")
    if value.count("{") != 1 or value.count("}") != 1 or end < start:
        return "", "", "must hold exactly one placeholder"
    if "/" in value[start:]:
        return "", "", "must have its placeholder in the file name (after the last '/')"
    return value[start + 1 : end], value[:start] + "0" + value[end + 1 :], ""


def device_node_pattern(value: str) -> str:
    """A device's node: a node path with exactly one `{index}` or `{minor}` in its file name."""
    inner, filled, why = _one_placeholder(value)
    if why:
        return f"{why} ({{index}} or {{minor}}), got {value!r}"
    if inner not in ("index", "minor"):
        return f"must hold exactly one {{index}} or {{minor}}, got {value!r}"
    return dev_node(filled)


def companion_offset(value: str) -> int:
    """N of a companion pattern's `{index+N}` (0 for `{index}`), -1 when it has no valid one."""
    start, end = value.find("{"), value.find("}")
    inner = value[start + 1 : end] if 0 <= start < end else ""
    if inner == "index":
        return 0
    digits = inner.removeprefix("index+")
    if digits == inner or not 1 <= len(digits) <= 4 or not _only(digits, _DIGITS):
        return -1
    offset = int(digits)
    return offset if offset <= MAX_COMPANION_OFFSET else -1


def companion_node(pattern: str, index: int) -> str:
    """The companion node of device `index` that a valid `pattern` names."""
    start, end = pattern.find("{"), pattern.find("}")
    return pattern[:start] + str(index + companion_offset(pattern)) + pattern[end + 1 :]


def companion_pattern(value: str) -> str:
    """More nodes of each device: a node path with exactly one `{index}` or `{index+N}` (N 0..4095)
    in its file name."""
    _, filled, why = _one_placeholder(value)
    if why:
        return f"{why} ({{index}} or {{index+N}}), got {value!r}"
    if companion_offset(value) < 0:
        return (
            f"must hold exactly one {{index}} or {{index+N}} with N 0..{MAX_COMPANION_OFFSET}, got {value!r}"
        )
    return dev_node(filled)


def capability(value: str) -> str:
    """A capability group's name, as the capabilities env var lists them (comma-separated)."""
    if not value or any(c in value for c in ", \t\n="):
        return f"must be a non-empty name without ',', '=' or whitespace, got {value!r}"
    return ""


def one_of(value: str, allowed: Iterable[str]) -> str:
    choices = tuple(allowed)
    if value not in choices:
        return f"must be one of {', '.join(choices)}, got {value!r}"
    return ""


# --- the whole document: both loaders build their records from what this returns -----------------


class Refused(ValueError):
    """A recipe document breaks a rule: `field` is where (`companionNodes[0]`, "" for the document
    itself), `why` what is wrong."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"{field}: {why}" if field else why)
        self.field = field
        self.why = why


SIMULATED_ROOTS = _builtin.SIMULATED_DRIVER_ROOT.rsplit("/", 1)[0]  # /var/lib/sro/driver
REQUIRED = ("name", "resource", "pciVendor", "visibleDevicesEnv", "deviceNode")
# document key -> Recipe field, in the canonical document's order
FIELDS = {
    "name": "name",
    "resource": "resource",
    "backend": "backend",
    "pciVendor": "pci_vendor",
    "pciClasses": "pci_classes",
    "pciDevices": "pci_devices",
    "visibleDevicesEnv": "visible_devices_env",
    "capabilitiesEnv": "capabilities_env",
    "defaultCapabilities": "default_capabilities",
    "cdiKind": "cdi_kind",
    "driverRoot": "driver_root",
    "deviceNode": "device_node",
    "companionNodes": "companion_nodes",
    "controlNodes": "control_nodes",
    "libraries": "libraries",
    "binaries": "binaries",
    "directories": "directories",
    "firmware": "firmware",
    "validation": "validation_commands",
    "metrics": "metrics",
    "pools": "pools",
}


_EMPTY_TUPLES = ("pci_classes", "pci_devices", "default_capabilities", "companion_nodes", "control_nodes")


def _defaults() -> dict[str, object]:
    """What a recipe holds where its document leaves a field out (backend-dependent ones aside)."""
    out: dict[str, object] = dict.fromkeys((*_EMPTY_TUPLES, "firmware", "validation_commands"), ())
    out |= {k: {} for k in ("libraries", "binaries", "directories", "pools")}
    return out | {"capabilities_env": "", "metrics": "telemetry", "simulated": False}


def _string(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise Refused(field, f"expected a string, got {value!r}")
    return value


def _checked(value: str, field: str, problem: str) -> str:
    if problem:
        raise Refused(field, problem)
    return value


def _strings(value: object, field: str, check: Callable[[str], str]) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise Refused(field, f"expected a list of strings, got {value!r}")
    out = []
    for i, item in enumerate(value):
        at = f"{field}[{i}]"
        text = _string(item, at)
        out.append(_checked(text, at, check(text)))
    return tuple(out)


def _mapping(value: object, field: str, what: str) -> dict[object, object]:
    if not isinstance(value, dict):
        raise Refused(field, f"expected a mapping of {what}, got {value!r}")
    return value


def _groups(value: object, field: str, check: Callable[[str], str]) -> dict[str, tuple[str, ...]]:
    out = {}
    for cap, names in _mapping(value, field, "capability -> list of names").items():
        at = f"{field}.{cap}"
        key = _string(cap, at)
        out[_checked(key, at, capability(key))] = _strings(names, at, check)
    return out


def _validation(value: object, binaries: Iterable[str]) -> tuple[tuple[str, ...], ...]:
    doc = _mapping(value, "validation", "commands: [argv, ...]")
    unknown = sorted(str(k) for k in doc if k != "commands")
    if unknown:
        raise Refused("validation", f"unknown field(s) {', '.join(unknown)} (known: commands)")
    commands = doc.get("commands", [])
    if not isinstance(commands, list | tuple):
        raise Refused("validation.commands", f"expected a list of argv lists, got {commands!r}")
    known = set(binaries)
    out = []
    for i, argv in enumerate(commands):
        at = f"validation.commands[{i}]"
        args = _strings(argv, at, lambda _: "")
        if not args:
            raise Refused(at, "an empty command")
        if args[0] not in known:
            names = ", ".join(sorted(known)) or "none"
            raise Refused(f"{at}[0]", f"{args[0]!r} is not one of the recipe's binaries ({names})")
        out.append(args)
    return tuple(out)


def _pools(value: object, resource: str) -> dict[str, dict[str, str]]:
    out = {}
    for key, selector in _mapping(value, "pools", "resource -> {attribute: value}").items():
        at = f"pools.{key}"
        pool = _string(key, at)
        _checked(pool, at, extended_resource(pool))
        if pool == resource:
            raise Refused(at, f"a pool's resource must differ from the recipe's resource {resource!r}")
        attrs = _mapping(selector, at, "attribute -> value (strings)")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in attrs.items()):
            raise Refused(at, f"expected a mapping of attribute -> value (strings), got {selector!r}")
        out[pool] = {str(k): str(v) for k, v in attrs.items()}
    return out


def recipe_fields(doc: object) -> dict[str, object]:
    """The keyword arguments of a recipe record (`Recipe`, `HookRecipe`) for a recipe document, every
    rule checked; raises Refused naming the first field that breaks one. A document naming a built-in
    recipe is accepted only when it describes that built-in exactly (its canonical form)."""
    if not isinstance(doc, dict):
        raise Refused("", f"a recipe must be a mapping, got {type(doc).__name__}")
    unknown = sorted(str(k) for k in doc if k not in FIELDS)
    if unknown:
        raise Refused("", f"unknown field(s) {', '.join(unknown)} (known: {', '.join(sorted(FIELDS))})")
    missing = [k for k in REQUIRED if not doc.get(k)]
    if missing:
        raise Refused(missing[0], f"missing (required: {', '.join(REQUIRED)})")
    get = doc.get
    name = _string(get("name"), "name")
    _checked(name, "name", dns_label(name, MAX_NAME))
    backend = _string(get("backend", "simulated"), "backend")
    _checked(backend, "backend", one_of(backend, BACKENDS))
    resource = _string(get("resource"), "resource")
    _checked(resource, "resource", extended_resource(resource))
    lower = _string(get("pciVendor"), "pciVendor").lower()
    fields = _defaults()
    fields |= {
        "name": name,
        "resource": resource,
        "backend": backend,
        "simulated": backend == "simulated",
        "pci_vendor": _checked(lower, "pciVendor", hex_id(lower, (4,))),
    }
    if "pciClasses" in doc:
        found = _strings(get("pciClasses"), "pciClasses", lambda v: hex_id(v, (2, 4)))
        fields["pci_classes"] = tuple(v.lower() for v in found)
    if "pciDevices" in doc:
        found = _strings(get("pciDevices"), "pciDevices", lambda v: hex_id(v, (4,)))
        fields["pci_devices"] = tuple(v.lower() for v in found)
    env = _string(get("visibleDevicesEnv"), "visibleDevicesEnv")
    fields["visible_devices_env"] = _checked(env, "visibleDevicesEnv", visible_devices_env(env))
    if get("capabilitiesEnv", ""):
        caps_env = _string(get("capabilitiesEnv"), "capabilitiesEnv")
        fields["capabilities_env"] = _checked(caps_env, "capabilitiesEnv", env_name(caps_env))
    if "defaultCapabilities" in doc:
        caps = _strings(get("defaultCapabilities"), "defaultCapabilities", capability)
        fields["default_capabilities"] = caps
    kind = _string(get("cdiKind", resource), "cdiKind")
    fields["cdi_kind"] = _checked(kind, "cdiKind", cdi_kind(kind))
    default_root = f"{SIMULATED_ROOTS}/{name}" if backend == "simulated" else "/"
    root = _string(get("driverRoot", default_root), "driverRoot")
    fields["driver_root"] = _checked(root, "driverRoot", absolute_path(root))
    node = _string(get("deviceNode"), "deviceNode")
    fields["device_node"] = _checked(node, "deviceNode", device_node_pattern(node))
    lists = {"companionNodes": companion_pattern, "controlNodes": control_node, "firmware": relative_path}
    for key, check in lists.items():
        if key in doc:
            fields[FIELDS[key]] = _strings(get(key), key, check)
    groups = {"libraries": file_name, "binaries": file_name, "directories": relative_path}
    for key, check in groups.items():
        if key in doc:
            fields[FIELDS[key]] = _groups(get(key), key, check)
    if "validation" in doc:
        binaries = fields["binaries"]
        names = (n for group in binaries.values() for n in group) if isinstance(binaries, dict) else ()
        fields["validation_commands"] = _validation(get("validation"), names)
    metrics = _string(get("metrics", "health" if backend == "devnodes" else "telemetry"), "metrics")
    fields["metrics"] = _checked(metrics, "metrics", one_of(metrics, METRICS))
    if "pools" in doc:
        fields["pools"] = _pools(get("pools"), resource)
    builtin = {"nvidia-gpu": _builtin.NVIDIA_GPU, "simulated-gpu": _builtin.SIMULATED_GPU}.get(name)
    if builtin is not None and fields != {**_defaults(), **builtin}:
        raise Refused("name", recipe_name(name))
    return fields
