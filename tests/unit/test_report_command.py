"""`sro report` end to end against a fake Prometheus (canned answers over real HTTP), and its bad input:
every failure one line naming the URL or query, exit 1 (bad options 2), never a traceback."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from sro.cli import cli
from sro.local.images import PROJECT_ROOT, runtime_dependencies
from sro.report.summary import utilisation_lines

Answer = Callable[[str, dict[str, str]], tuple[int, bytes]]


def ok(data: Any) -> tuple[int, bytes]:
    return 200, json.dumps({"status": "success", "data": data}).encode()


def matrix_answer(endpoint: str, params: dict[str, str]) -> tuple[int, bytes]:
    """Two simulated devices on one node, a minute of samples every `step`."""
    start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
    times = [start + i * step for i in range(int((end - start) / step) + 1)]
    metric = next(m for m in ("GPU_UTIL", "FB_USED", "FB_FREE") if f"DCGM_FI_DEV_{m}" in params["query"])
    result = []
    for gpu in (0, 1):
        values = {
            "GPU_UTIL": [(i * 3) % 100 for i in range(len(times))],
            "FB_USED": [1024 * (1 + gpu)] * len(times),
        }
        result.append(
            {
                "metric": {"Hostname": "node-a", "gpu": str(gpu), "simulated": "true"},
                "values": [
                    [t, str(v)] for t, v in zip(times, values.get(metric, [8192] * len(times)), strict=True)
                ],
            }
        )
    return ok({"resultType": "matrix", "result": result})


@dataclass
class FakePrometheus:
    url: str
    answer: Answer = matrix_answer
    asked: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    delay: float = 0.0


@pytest.fixture
def fake() -> Iterator[FakePrometheus]:
    state = FakePrometheus(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urllib.parse.urlsplit(self.path)
            params = dict(urllib.parse.parse_qsl(parts.query))
            state.asked.append((parts.path, params))
            time.sleep(state.delay)
            code, body = state.answer(parts.path, params)
            try:
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (the timeout tests make it): nothing to answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # handler threads are joined on close: one still sleeping must not print into a later test's
    # captured output (CliRunner swaps sys.stderr for the whole process)
    server.daemon_threads = False
    server.block_on_close = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, ["report", *args])


def refused(result: Result, code: int = 1) -> str:
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    return result.output


def test_draws_from_query_range(fake: FakePrometheus, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    out = tmp_path / "r.png"
    result = run("--prometheus", fake.url + "/", "--since", "10m", "--step", "30s", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"{out}: 1200x800, 2 devices over the last 10m (step 30s), SIMULATED devices",
        "  node-a gpu0",
        "  node-a gpu1",
    ]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert [path for path, _ in fake.asked] == ["/api/v1/query_range"] * 3
    _, params = fake.asked[0]
    assert params["step"] == "30" and float(params["end"]) - float(params["start"]) == pytest.approx(600)
    assert params["query"].startswith("max by (Hostname, gpu, GPU_I_ID, simulated) (DCGM_FI_DEV_GPU_UTIL")


def test_url_comes_from_the_environment(
    fake: FakePrometheus, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    monkeypatch.setenv("PROMETHEUS_URL", fake.url)
    assert run("--by", "node", "-o", str(tmp_path / "r.png")).exit_code == 0
    assert fake.asked and fake.asked[0][1]["step"] == "15"  # 1h, auto step


def test_without_the_extra_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    out = refused(run("--prometheus", "http://127.0.0.1:1", "-o", str(tmp_path / "r.png")))
    assert "pip install 'sro[report]'" in out
    assert "report" in CliRunner().invoke(cli, ["report", "--help"]).output  # help needs no matplotlib


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--since", "1x"], "--since"),
        (["--step", "0s"], "--step"),
        (["--since", "30d", "--step", "1s"], "--step"),
        (["--prometheus", "localhost:9090"], "--prometheus"),
        (["--by", "pod"], "--by"),
    ],
)
def test_bad_options_exit_2_naming_the_option(args: list[str], named: str) -> None:
    out = refused(run(*args), code=2)
    assert named in out


def query_error(endpoint: str, params: dict[str, str]) -> tuple[int, bytes]:
    body = {"status": "error", "errorType": "bad_data", "error": "1:5: parse error: unexpected"}
    return 400, json.dumps(body).encode()


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (query_error, "answered HTTP 400: bad_data: 1:5: parse error: unexpected"),
        (lambda e, p: (502, b"<html>Bad Gateway</html>"), "answered HTTP 502: Bad Gateway"),
        (lambda e, p: (200, b"<html>login</html>"), "answered something that is not JSON: is it Prometheus?"),
        (
            lambda e, p: (200, b'{"status": "error", "errorType": "timeout", "error": "query timed out"}'),
            "failed: timeout: query timed out",
        ),
        (lambda e, p: ok({"resultType": "vector", "result": []}), "expected a matrix result, got 'vector'"),
    ],
)
def test_prometheus_errors_name_the_url_and_query(
    fake: FakePrometheus, tmp_path: Path, answer: Answer, said: str
) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    fake.answer = answer
    out = refused(run("--prometheus", fake.url, "-o", str(tmp_path / "r.png")))
    assert said in out
    if "HTTP" in said or "JSON" in said or "failed" in said:
        assert (
            f"{fake.url}/api/v1/query_range (query: max by (Hostname, gpu, GPU_I_ID, simulated) (DCGM_FI_DEV_GPU_UTIL))"
            in out
        )
    assert not (tmp_path / "r.png").exists()


def test_no_data_names_the_query_and_the_filter(fake: FakePrometheus, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    fake.answer = lambda e, p: ok({"resultType": "matrix", "result": []})
    out = refused(
        run(
            "--prometheus",
            fake.url,
            "--by",
            "node",
            "--node",
            "gpu-7",
            "--since",
            "2h",
            "-o",
            str(tmp_path / "r.png"),
        )
    )
    assert f"Prometheus at {fake.url} returned no data over the last 2h (node gpu-7) for: " in out
    assert 'DCGM_FI_DEV_GPU_UTIL{Hostname="gpu-7"}' in out


def test_a_slow_prometheus_times_out(fake: FakePrometheus, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    fake.delay = 1.0
    out = refused(run("--prometheus", fake.url, "--timeout", "0.2", "-o", str(tmp_path / "r.png")))
    assert f"cannot reach Prometheus at {fake.url}: timed out" in out


@pytest.mark.parametrize(
    ("output", "said"),
    [
        ("missing/r.png", "no directory"),
        (".", "it is a directory"),
        ("/proc/sro-report.png", ""),  # passes the early check as root; the write itself fails
    ],
)
def test_unwritable_output(fake: FakePrometheus, tmp_path: Path, output: str, said: str) -> None:
    pytest.importorskip("matplotlib", reason="needs the report extra: pip install 'sro[report]'")
    path = output if output.startswith("/") else str(tmp_path / output)
    out = refused(run("--prometheus", fake.url, "-o", path))
    assert f"cannot write {path}: {said}" in out


def test_status_lines_are_quiet_when_prometheus_is_not_there(fake: FakePrometheus) -> None:
    fake.answer = lambda e, p: ok(
        {
            "resultType": "vector",
            "result": [
                {
                    "metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "Hostname": "n", "gpu": "0"},
                    "value": [1, "40"],
                }
            ],
        }
    )
    assert utilisation_lines(fake.url) == ["n: 1 GPU, utilisation 40% (max 40%)"]
    assert fake.asked[-1][0] == "/api/v1/query"
    fake.answer = query_error
    assert utilisation_lines(fake.url) == []
    fake.delay, began = 1.0, time.monotonic()
    assert utilisation_lines(fake.url, timeout=0.2) == []
    assert time.monotonic() - began < 0.9
    assert utilisation_lines("http://127.0.0.1:1") == []
    assert utilisation_lines("not a url") == []


def test_the_node_image_leaves_the_extra_out() -> None:
    """The image builder installs `dependencies` only, the Containerfile `.` without extras."""
    assert not [d for d in runtime_dependencies() if "matplotlib" in d or "[report]" in d]
    install = next(
        line for line in (PROJECT_ROOT / "Containerfile").read_text().splitlines() if "pip install" in line
    )
    assert "/src &&" in install and "[" not in install
