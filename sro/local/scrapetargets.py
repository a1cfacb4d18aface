"""The local Prometheus's targets: the exporter Services' endpoints, kept current in a file_sd file.

Why: Debian's Prometheus 2.42 is built without `kubernetes_sd_configs`, and the exporter's pods move
(a DaemonSet rollout, a deleted pod, a node's restart give each a new IP). A fixed target list would
keep scraping an address nobody serves. So `sro local prometheus-targets` (supervised by `sro local
up --prometheus`, beside Prometheus) lists and watches the Services labelled
`app.kubernetes.io/name=sro-exporter` and their Endpoints (the endpoints controller copies a
Service's labels to its Endpoints, so one label selector serves both) and rewrites the file_sd file
whenever they change: a new pod is scraped about a second after it is Ready (Prometheus reads the
file on inotify), a deleted one is dropped as soon as the Endpoints lose it.

The target groups carry the labels kubernetes_sd's `endpoints` role would give the same objects, so
the shipped scrape job (`monitoring/scrape/sro-exporter.yaml`) runs with only its discovery swapped:
its relabelling (keep annotated exporter Services, the port and path of the annotations, `node` and
`exporter_pod`) is applied by Prometheus itself. `endpoint_groups` is pure; `watch` is the I/O.

Health (`GET /healthz` on 127.0.0.1): 200 once both lists are in and the file is written, 503 with
the API's error while the Services or Endpoints cannot be read (the file keeps its last targets).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sro.kube.client import HttpClient, async_http
from sro.kube.reflector import Reflector

log = logging.getLogger(__name__)

EXPORTER_SELECTOR = "app.kubernetes.io/name=sro-exporter"
_INVALID = re.compile(r"[^a-zA-Z0-9_]")
Obj = Mapping[str, Any]


def _sanitize(name: str) -> str:
    return _INVALID.sub("_", name)


def _key(obj: Obj) -> str:
    md = obj.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


def endpoints_targets(service: Obj, endpoints: Obj) -> list[dict[str, Any]]:
    """The target groups of kubernetes_sd (role: endpoints) for one Service and its Endpoints."""
    md = service["metadata"]
    common = {
        "__meta_kubernetes_namespace": md.get("namespace", ""),
        "__meta_kubernetes_service_name": md["name"],
    }
    for key, value in (md.get("labels") or {}).items():
        common[f"__meta_kubernetes_service_label_{_sanitize(key)}"] = value
        common[f"__meta_kubernetes_service_labelpresent_{_sanitize(key)}"] = "true"
    for key, value in (md.get("annotations") or {}).items():
        common[f"__meta_kubernetes_service_annotation_{_sanitize(key)}"] = value
        common[f"__meta_kubernetes_service_annotationpresent_{_sanitize(key)}"] = "true"
    targets = []
    for subset in endpoints.get("subsets") or []:
        for ready, key in (("true", "addresses"), ("false", "notReadyAddresses")):
            for addr in subset.get(key) or []:
                for port in subset.get("ports") or []:
                    labels = dict(common)
                    labels["__address__"] = f"{addr['ip']}:{port['port']}"
                    labels["__meta_kubernetes_endpoint_port_name"] = port.get("name", "")
                    labels["__meta_kubernetes_endpoint_port_protocol"] = port.get("protocol", "TCP")
                    labels["__meta_kubernetes_endpoint_ready"] = ready
                    if addr.get("nodeName"):
                        labels["__meta_kubernetes_endpoint_node_name"] = addr["nodeName"]
                        labels["__meta_kubernetes_pod_node_name"] = addr["nodeName"]
                    ref = addr.get("targetRef") or {}
                    if ref.get("kind") == "Pod":
                        labels["__meta_kubernetes_pod_name"] = ref["name"]
                        labels["__meta_kubernetes_pod_ip"] = addr["ip"]
                    targets.append({"targets": [labels.pop("__address__")], "labels": labels})
    return targets


def endpoint_groups(services: Iterable[Obj], endpoints: Iterable[Obj]) -> list[dict[str, Any]]:
    """Every Service's target groups, in a stable order (namespace/name, then address), for the
    Endpoints that have a Service of the same name (Endpoints left of a deleted Service give none)."""
    by_key = {_key(s): s for s in services}
    groups: list[dict[str, Any]] = []
    for eps in sorted(endpoints, key=_key):
        svc = by_key.get(_key(eps))
        if svc is not None:
            groups.extend(sorted(endpoints_targets(svc, eps), key=lambda g: g["targets"][0]))
    return groups


def render(groups: list[dict[str, Any]]) -> str:
    return json.dumps(groups, indent=1, sort_keys=True) + "\n"


def summary(groups: list[dict[str, Any]]) -> str:
    """`10.244.0.7:9400 (sro-system/sro-exporter-abcde)`, comma-separated: the log line of a change."""
    shown = [
        f"{g['targets'][0]} ({g['labels'].get('__meta_kubernetes_namespace', '')}/"
        f"{g['labels'].get('__meta_kubernetes_pod_name', '?')})"
        for g in groups
    ]
    return ", ".join(shown) or "none"


def write_if_changed(path: Path, text: str) -> bool:
    """Replace the file atomically (Prometheus never reads half a file) when its text changes."""
    try:
        if path.read_text() == text:
            return False
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return True


class Targets:
    """Two reflectors (Services, Endpoints) and the file they keep current."""

    def __init__(self, http: HttpClient, output: Path) -> None:
        params = {"labelSelector": EXPORTER_SELECTOR}
        self.output = output
        self.services: Reflector[Obj] = Reflector(http, "/api/v1/services", _key, dict, params)
        self.endpoints: Reflector[Obj] = Reflector(http, "/api/v1/endpoints", _key, dict, params)
        self.changed = asyncio.Event()
        self.written = False
        for r in (self.services, self.endpoints):
            r.listeners.append(lambda kind, obj: self.changed.set())

    def health(self) -> tuple[int, str]:
        errors = [r.error for r in (self.services, self.endpoints) if r.error]
        if errors:
            return 503, "; ".join(errors)
        if not self.written:
            return 503, "not listed yet"
        return 200, f"ok: {self.output}"

    def write(self) -> None:
        groups = endpoint_groups(self.services.items.values(), self.endpoints.items.values())
        if write_if_changed(self.output, render(groups)):
            log.info("targets: %s", summary(groups))
        self.written = True

    async def keep_current(self) -> None:
        await asyncio.gather(self.services.synced.wait(), self.endpoints.synced.wait())
        while True:
            self.changed.clear()
            self.write()
            await self.changed.wait()
            await asyncio.sleep(0.2)  # a rollout changes Endpoints several times in a row


async def _serve_health(targets: Targets, port: int) -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await asyncio.wait_for(reader.readline(), 5)
            code, text = targets.health()
            reason = "OK" if code == 200 else "Service Unavailable"
            body = (text + "\n").encode()
            writer.write(
                f"HTTP/1.0 {code} {reason}\r\nContent-Type: text/plain\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, OSError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(answer, "127.0.0.1", port)


async def watch(kubeconfig: Path, output: Path, port: int) -> None:
    """Keep `output` current for ever (until the process is stopped)."""
    async with async_http(kubeconfig) as http:
        targets = Targets(http, output)
        server = await _serve_health(targets, port)
        log.info(
            "watching %s Services and Endpoints into %s (health on :%d)", EXPORTER_SELECTOR, output, port
        )
        async with server:
            await asyncio.gather(targets.services.run(), targets.endpoints.run(), targets.keep_current())
