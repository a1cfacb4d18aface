"""Local feature source: feature files in NFD's `features.d` directory, with NFD's directives.

Each line is `name[=value]` (value "true" when omitted); a name without a namespace gets
`feature.node.kubernetes.io/`. Directives in comment lines: `# +expiry-time=<RFC 3339>` applies to
the lines below it (expired lines are ignored), `# +no-label` and `# +no-feature` apply to the next
feature line only. Files starting with "." are ignored; so are names in Kubernetes' own namespaces.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sro.api.names import NFD_PREFIX
from sro.host.reading import HostReader
from sro.host.root import FEATURES_D
from sro.node.discovery.config import Config
from sro.node.discovery.features import Features

NAME = "local"
MAX_FILE_SIZE = 64 * 1024
ALLOWED_K8S_NS = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")


@dataclass(frozen=True)
class ParsedFile:
    features: dict[str, str]
    labels: dict[str, str]
    problems: tuple[str, ...]


def parse_feature_file(text: str, now: datetime) -> ParsedFile:
    """Pure: one features.d file -> features, labels and line-numbered problems."""
    features: dict[str, str] = {}
    labels: dict[str, str] = {}
    problems: list[str] = []
    expired = False
    no_label = no_feature = False
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            directive = line[1:].strip()
            if directive.startswith("+expiry-time="):
                stamp = directive.removeprefix("+expiry-time=").strip()
                try:
                    when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
                    if when.tzinfo is None:
                        when = when.replace(tzinfo=UTC)
                    expired = when < now
                except ValueError:
                    problems.append(f"line {n}: invalid expiry-time {stamp!r}; features below it ignored")
                    expired = True
            elif directive == "+no-label":
                no_label = True
            elif directive == "+no-feature":
                no_feature = True
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        value = value.strip() if sep else "true"
        key = name if "/" in name else NFD_PREFIX + name
        namespace = key.split("/", 1)[0]
        if not name or name.startswith("/"):
            problems.append(f"line {n}: empty feature name")
        elif (namespace.endswith(("kubernetes.io", "k8s.io"))) and namespace not in ALLOWED_K8S_NS:
            problems.append(f"line {n}: namespace {namespace!r} is reserved by Kubernetes; ignored")
        elif not expired:
            if not no_feature:
                features[key] = value
            if not no_label:
                labels[key] = value
        no_label = no_feature = False
    return ParsedFile(features, labels, tuple(problems))


class LocalSource:
    name = NAME

    def __init__(self, clock: type[datetime] = datetime) -> None:
        self._clock = clock

    def discover(self, reader: HostReader, config: Config) -> Features:
        directory = f"{reader.host.etc}/{FEATURES_D}"  # reader.host.features_d, joined as a string
        now = self._clock.now(UTC)
        features: dict[str, str] = {}
        labels: dict[str, str] = {}
        for name in reader.list_dir(directory):
            if name.startswith("."):
                continue
            path = f"{directory}/{name}"
            text = reader.read_text(path, limit=MAX_FILE_SIZE)
            if text is None:
                continue
            parsed = parse_feature_file(text, now)
            for p in parsed.problems:
                # A bad line is the author's to fix, not a failed read: warn, removals go on.
                reader.warn(path, p)
            features.update(parsed.features)
            labels.update(parsed.labels)
        return Features(attributes={"feature": features, "label": labels})

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        return dict(features.attributes.get("label", {}))


SOURCE = LocalSource()
