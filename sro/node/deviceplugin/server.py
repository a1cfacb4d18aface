"""One gRPC server per resource on its own unix socket, and its registration with the kubelet.

Why one server per resource: the kubelet binds a resource to one endpoint, and MIG `mixed` or a
renamed time-sliced resource means several resources from one plugin (as NVIDIA's plugin does).
`PluginServer` can be started, stopped and re-registered any number of times; the watcher in
`lifecycle` decides when. `register` is a plain function so a fake kubelet can be tested against.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

from sro.node.deviceplugin import api_pb2, api_pb2_grpc
from sro.node.deviceplugin.core import ResourceCore
from sro.node.deviceplugin.servicer import DevicePluginServicer

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL


class RegistrationError(RuntimeError):
    """The kubelet refused or could not be reached; the message says which."""


def socket_name(resource: str) -> str:
    """sro-<resource with / and odd characters as _>.sock, e.g. sro-sro.dev_simulated-gpu.sock"""
    return "sro-" + re.sub(r"[^A-Za-z0-9.-]", "_", resource) + ".sock"


def register(kubelet_socket: Path, endpoint: str, resource: str, timeout: float = 5.0) -> None:
    """Register `resource` served at `endpoint` (a socket name in the kubelet's directory)."""
    channel = grpc.insecure_channel(f"unix://{kubelet_socket}")
    try:
        stub = api_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        stub.Register(
            api_pb2.RegisterRequest(
                version=API_VERSION,
                endpoint=endpoint,
                resource_name=resource,
                options=api_pb2.DevicePluginOptions(
                    pre_start_required=False, get_preferred_allocation_available=True
                ),
            ),
            timeout=timeout,
            wait_for_ready=False,
        )
    except grpc.RpcError as e:
        raise RegistrationError(
            f"register {resource} with {kubelet_socket}: {e.code().name}: {e.details()}"
        ) from e
    finally:
        channel.close()


class PluginServer:
    def __init__(self, core: ResourceCore, plugin_dir: Path, workers: int = 16) -> None:
        self.core = core
        self.plugin_dir = plugin_dir
        self.endpoint = socket_name(core.resource)
        self.path = plugin_dir / self.endpoint
        self.workers = workers
        self.grpc_server: grpc.Server | None = None
        self._stop = threading.Event()
        # identity of the kubelet socket this server last registered with (None: not registered)
        self.registered_with: tuple[int, int] | None = None
        self.started_at = 0.0  # wall-clock time of the last start

    @property
    def resource(self) -> str:
        return self.core.resource

    def start(self) -> None:
        self.stop()
        if len(os.fsencode(self.path)) > UNIX_PATH_MAX:
            raise RuntimeError(f"{self.path}: longer than a unix socket path may be ({UNIX_PATH_MAX} bytes)")
        self.plugin_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._stop = threading.Event()
        server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix=f"dp-{self.endpoint}"),
            options=[("grpc.so_reuseport", 0)],
        )
        servicer = DevicePluginServicer(self.core, self._stop)
        api_pb2_grpc.add_DevicePluginServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]
        server.add_insecure_port(f"unix://{self.path}")
        server.start()
        self.started_at = time.time()
        self.grpc_server = server
        self.registered_with = None
        log.info("%s: serving on %s", self.resource, self.path)

    def stop(self, grace: float = 0.5) -> None:
        self._stop.set()
        self.core.board.wake_all()
        if self.grpc_server is not None:
            self.grpc_server.stop(grace).wait(grace + 1)
            self.grpc_server = None
        self.registered_with = None
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def socket_present(self) -> bool:
        try:
            return os.path.exists(self.path) and self.path.is_socket()
        except OSError:
            return False

    def alive(self, timeout: float = 1.0) -> bool:
        """The server answers GetDevicePluginOptions on its own socket."""
        if self.grpc_server is None or not self.socket_present():
            return False
        channel = grpc.insecure_channel(f"unix://{self.path}")
        try:
            stub = api_pb2_grpc.DevicePluginStub(channel)  # type: ignore[no-untyped-call]
            stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=timeout)
            return True
        except grpc.RpcError:
            return False
        finally:
            channel.close()
