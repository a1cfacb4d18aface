"""Every command, given bad input, exits non-zero with a short error that says what to fix, never a
Python traceback (issue 15).

Each case runs `python -m sro ...` in its own process, as a user would, so what is checked is what a
user sees: the exit status and the whole of stdout and stderr. The cases:

- generic, built by walking the real click command tree (so a command added later is covered without
  touching this file): an unknown option; a bad value for every typed option (a non-number for
  numbers, an unknown choice, a path that cannot exist); for a command taking `--kubeconfig`, a
  missing kubeconfig and one naming an unreachable API server;
- curated per command: missing files, wrong types in YAML/JSON, unknown names, no (simulated) driver,
  no cluster, and no permission (run as `nobody` through setpriv; the tests run as root).

Nothing here touches the host or a cluster: every path points into a temp tree, $KUBECONFIG names an
unreachable server (https://127.0.0.1:1), $HOME is a temp directory, and every case has a time
limit after which its process group is killed. Cases run a few at a time in threads.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import click
import pytest

import sro
from sro.cli import cli

EXAMPLE_DEVICES = resources.files("sro.devices") / "examples" / "4gpu-mig.yaml"
MACHINESET = str(
    Path(__file__).resolve().parent.parent / "golden" / "nodepool" / "sources" / "openshift-aws.yaml"
)
HOST = str(Path(__file__).resolve().parent.parent / "hosts" / "nvidia-8gpu" / "root")
NOBODY = ("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups")
UNREACHABLE = "127.0.0.1:1"
TIMEOUT = 30.0  # per case; a case still running then fails (and its process group is killed)
WORKERS = 4
MAX_LINES = 4  # a one-line error, perhaps after a progress line; a click usage block is 3 lines
MAX_LINE = 400

# Commands run through their own parser (`sro hook ...`, `sro runtime ...` hand their raw arguments
# on): their click subcommands are walked here as if they were children.
PASS_THROUGH: dict[tuple[str, ...], str] = {
    ("hook", "install-hooksd"): "sro.node.runtime.commands:install_hooksd",
    ("runtime", "install"): "sro.node.runtime.commands:install_command",
    ("runtime", "uninstall"): "sro.node.runtime.commands:uninstall_command",
}

# What a pass-through command does with an argument it does not know.
PASSED_ON = {("runtime",): "handed to runc as the wrapper's RUNC-ARGS: runc's own usage text"}

# Arguments that make a command do its work once and exit, with everything it writes in the case's
# own temp directory ({case}) and every device read from a temp tree: the generic bad values are
# given on top of these (the later value of an option wins).
# fmt: off
BASE: dict[tuple[str, ...], tuple[str, ...]] = {
    ("install",): ("--no-wait", "--timeout", "5"),
    ("uninstall",): ("--timeout", "5"),
    ("report",): ("--prometheus", f"http://{UNREACHABLE}", "-o", "{case}/report.png", "--timeout", "5"),
    ("nodepool", "create"): ("--instance-type", "g5.xlarge", "--replicas", "1", "--from-file", "{t}/list.yaml"),
    ("discover",): ("--host-root", HOST),
    ("driver", "simulate"): (
        "--config", str(EXAMPLE_DEVICES), "--driver-root", "{case}/driver", "--dev-root", "{case}/dev",
        "--proc-devices", "{t}/proc-devices",
    ),
    ("driver", "holders"): (
        "--recipe", "simulated-gpu", "--proc-root", "{t}/empty", "--driver-root", "{t}/sim/root",
        "--dev-root", "{t}/sim/dev",
    ),
    ("driver", "reset"): (
        "--recipe", "simulated-gpu", "--driver-root", "{t}/empty", "--device", "0", "--token", "t",
        "--ledger", "{case}/ledger",
    ),
    ("driver", "reboot"): (
        "--recipe", "simulated-gpu", "--driver-root", "{t}/empty", "--host-root", "{t}/empty", "--token", "t",
        "--ledger", "{case}/ledger",
    ),
    ("simulate", "fault"): ("--device", "0", "--driver-root", "{t}/empty"),
    ("simulate", "load"): ("--device", "0", "--util", "10", "--driver-root", "{t}/empty"),
    ("simulate", "status"): ("--driver-root", "{t}/empty"),
    ("device-plugin",): ("--oneshot", "--recipe", "simulated-gpu", "--driver-root", "{t}/empty"),
    ("exporter",): (
        "--once", "--recipe", "simulated-gpu", "--driver-root", "{t}/sim/root",
        "--pod-resources-socket", "{t}/no-kubelet.sock", "--node-name", "node-1", "--output", "{case}/metrics",
    ),
    ("cdi", "generate"): ("--driver-root", "{t}/empty", "--dev-root", "{t}/empty", "-o", "{case}/spec.yaml"),
    ("validate", "driver"): ("--recipe", "simulated-gpu", "--driver-root", "{t}/empty", "--dev-root", "{t}/empty"),
    ("validate", "workload"): ("--recipe", "simulated-gpu", "--dev-root", "{t}/empty"),
    ("hook", "install-hooksd"): ("--dir", "{case}/hooks.d"),
    ("runtime", "install"): ("--root", "{case}/runtime", "--host-root", "{t}/host"),
    ("runtime", "uninstall"): ("--root", "{case}/runtime"),
    ("bundle", "generate"): ("--version", "0.1.0", "-o", "{case}/bundle"),
    ("local", "prometheus-targets"): ("--kubeconfig", "{t}/unreachable.kubeconfig", "--port", "18998"),
    # never a real daemon: the tests run as root on a machine whose cluster may be up
    ("local", "restart"): ("no-such-daemon",),
}
# fmt: on

# How a command that takes --kubeconfig gets to the API server (added to the kubeconfig cases).
API_ARGS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("install",): ("--no-wait", "--timeout", "5"),
    ("uninstall",): ("--timeout", "5"),
    ("status",): (),
    ("upgrade", "pause"): (),
    ("upgrade", "resume"): (),
    ("upgrade", "retry"): ("node-1",),
    ("upgrade", "status"): (),
    ("remediation", "pause"): (),
    ("remediation", "resume"): (),
    ("remediation", "retry"): ("node-1",),
    ("remediation", "status"): (),
    ("discover",): ("--host-root", HOST, "--publish", "--oneshot", "--node-name", "node-1"),
    ("local", "prometheus-targets"): ("--output", "{case}/new-dir/targets.json", "--port", "18998"),
}
# Daemons among them: with no API server they wait (and say so: this text), they do not exit.
API_DAEMONS: dict[tuple[str, ...], str] = {("local", "prometheus-targets"): "connection attempts failed"}

# Bad values a command rightly accepts in the mode BASE runs it in: only "no traceback" is checked.
ACCEPTED: dict[tuple[tuple[str, ...], str], str] = {
    (("device-plugin",), "--plugin-dir"): "not used by --oneshot (the plugin waits for its kubelet dir)",
    (("device-plugin",), "--ready-file"): "not used by --oneshot",
    (("device-plugin",), "--dev-root"): "read by the devnodes backend only",
    (("device-plugin",), "--health-dir"): "not used by --oneshot (created when the plugin first writes)",
    (("device-plugin",), "--pod-resources-socket"): "not used by --oneshot; the kubelet is optional",
    (("exporter",), "--pod-resources-socket"): "the kubelet is optional: its pods are left out, said once",
    (("exporter",), "--ready-file"): "not used by --once",
    (("driver", "simulate"), "--proc-modules"): "read by the nvidia personality only (none: no modules)",
    (("driver", "simulate"), "--native-dir"): "read by the nvidia personality only",
}

# Commands whose failure is a report (one line per check, then why): not one line, but no traceback.
REPORTS = {("validate", "driver"), ("validate", "workload")}


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    expect: tuple[str, ...] = ()  # each must appear in the output (case-insensitive)
    code: int | None = None  # the exact exit status, when it matters; else any non-zero
    nobody: bool = False
    stdin: str = ""
    env: dict[str, str] = field(default_factory=dict, hash=False)
    lenient: str = ""  # why only "no traceback" is checked
    waits: float = 0.0  # a daemon that must wait for what is missing: still running after this long


def _walk() -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(cli)

    def walk(cmd: click.Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command]]:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, name
                yield from walk(sub, (*path, name))
        else:
            yield path, cmd

    yield from walk(cli, ())
    import importlib

    for path, ref in PASS_THROUGH.items():
        module, attr = ref.split(":")
        yield path, getattr(importlib.import_module(module), attr)


COMMANDS = dict(_walk())


def _bad_value(param: click.Option) -> tuple[str, str] | None:
    """A bad value for a typed option and what the error should name, or None for untyped ones."""
    t = param.type
    if isinstance(t, click.Choice):
        return "no-such-choice", param.opts[0]
    if isinstance(t, click.types.IntParamType | click.types.FloatParamType):
        return "many", param.opts[0]
    if isinstance(t, click.Path):
        return "{t}/file/missing", "{t}/file/missing"  # under a regular file: nothing can create it
    return None


def _generic() -> list[Case]:
    cases = []
    for path, cmd in COMMANDS.items():
        name = " ".join(path)
        passes_through = any(
            p.nargs == -1 and p.type == click.UNPROCESSED for p in cmd.params if isinstance(p, click.Argument)
        )
        if passes_through:  # `sro hook X`, `sro runtime X`: their own parsers, curated below
            cases.append(
                Case(
                    f"{name}: unknown option",
                    (*path, "--no-such-option"),
                    lenient=PASSED_ON.get(path, ""),
                )
            )
            continue
        cases.append(
            Case(f"{name}: unknown option", (*path, "--no-such-option"), ("no such option",), code=2)
        )
        for p in cmd.params:
            if not isinstance(p, click.Option) or p.is_flag or p.count:
                continue
            bad = _bad_value(p)
            if bad is None:
                continue
            value, named = bad
            opt = p.opts[0]
            lenient = ACCEPTED.get((path, opt), "")
            if opt == "--kubeconfig":
                continue  # below, with the arguments that make the command use it
            cases.append(
                Case(
                    f"{name}: {opt} {value.replace('{t}/', '')}",
                    (*path, *BASE.get(path, ()), opt, value),
                    () if lenient else (named,),
                    lenient=lenient,
                )
            )
        if any(isinstance(p, click.Option) and "--kubeconfig" in p.opts for p in cmd.params):
            api = API_ARGS.get(path)
            if api is None:
                continue  # test_every_command_is_covered says so
            cases += [
                Case(
                    f"{name}: --kubeconfig missing",
                    (*path, *api, "--kubeconfig", "{t}/missing.kubeconfig"),
                    ("{t}/missing.kubeconfig",),
                ),
                Case(
                    f"{name}: --kubeconfig unreachable",
                    (*path, *api, "--kubeconfig", "{t}/unreachable.kubeconfig"),
                    (API_DAEMONS.get(path, "unreachable"),),
                    waits=4 if path in API_DAEMONS else 0.0,
                ),
            ]
    return cases


def base(*path: str) -> tuple[str, ...]:
    return (*path, *BASE[path])


def _curated() -> list[Case]:
    sim = ("--driver-root", "{t}/sim/root")
    simgpu = ("--recipe", "simulated-gpu")
    nfd = (
        "NFD worker config: a problem is warned and the defaults are used (tests/unit/test_discovery_cli.py)"
    )
    return [
        # a cluster: none reachable, none configured, a kubeconfig that is not one
        Case("install: kubeconfig a YAML list", ("install", "--no-wait", "--kubeconfig", "{t}/list.yaml"),
             ("{t}/list.yaml",)),
        Case("install: kubeconfig not YAML", ("install", "--no-wait", "--kubeconfig", "{t}/bad.yaml"),
             ("{t}/bad.yaml",)),
        Case("install: -o under a file", ("install", "-o", "{t}/file/deploy"), ("{t}/file/deploy",)),
        Case("status: no such SpecialResource, no cluster", ("status", "gpu", "--kubeconfig", "{t}/unreachable.kubeconfig"),
             ("unreachable",)),
        Case("operator: $KUBECONFIG missing", ("operator", "--metrics-port", "0", "--health-port", "0", "--no-leader-election"),
             ("{t}/missing.kubeconfig",), env={"KUBECONFIG": "{t}/missing.kubeconfig"}),
        Case("nodepool create: --from, no cluster", ("nodepool", "create", "--from", "worker", "--instance-type", "g5.xlarge", "--replicas", "1"),
             ("unreachable",)),
        Case("nodepool create: --from-file a YAML list", base("nodepool", "create"), ("--from-file",)),
        Case("nodepool create: --from-file not YAML", ("nodepool", "create", "--instance-type", "g5.xlarge", "--replicas", "1", "--from-file", "{t}/bad.yaml"),
             ("{t}/bad.yaml",)),
        Case("nodepool create: unknown instance type", ("nodepool", "create", "--instance-type", "no-such-type", "--replicas", "1", "--from-file", MACHINESET),
             ("no-such-type",)),
        Case("discover --cleanup: no cluster", ("discover", "--cleanup", "--node-name", "node-1"), ("unreachable",)),
        Case("discover: --publish without a node name", ("discover", "--publish", "--oneshot", "--host-root", HOST),
             ("--node-name",)),
        Case("discover: --config a YAML list", ("discover", "--host-root", HOST, "--config", "{t}/list.yaml"), ("{t}/list.yaml",), lenient=nfd),
        Case("discover: --config not YAML", ("discover", "--host-root", HOST, "--config", "{t}/bad.yaml"), ("{t}/bad.yaml",), lenient=nfd),
        Case("discover: --sleep-interval not a duration", ("discover", "--sleep-interval", "often"), ("often",)),
        Case("report: no Prometheus", base("report"), (UNREACHABLE,)),
        Case("report: --since not a duration", (*base("report"), "--since", "ages"), ("ages",)),
        Case("report: --prometheus not a URL", ("report", "--prometheus", "not a url", "-o", "{case}/r.png"), ("--prometheus",)),
        # daemons without what they need: they wait, say why once, are not ready, stop on SIGTERM
        Case("device-plugin (daemon): no simulated driver", ("device-plugin", *simgpu, "--driver-root", "{t}/empty",
             "--plugin-dir", "{case}/device-plugins", "--ready-file", "{case}/ready"),
             ("{t}/empty", "not ready"), waits=4),
        Case("operator (daemon): no cluster", ("operator", "--metrics-port", "0", "--health-port", "0"),
             ("unreachable",), waits=4),
        # the simulated driver: absent, corrupt, unknown devices, bad device files
        Case("simulate fault: no driver", ("simulate", "fault", "--device", "0", "--driver-root", "{t}/empty"), ("{t}/empty",)),
        Case("simulate fault: unknown device", ("simulate", "fault", "--device", "99", *sim), ("99",)),
        Case("simulate fault: corrupt devices.json", ("simulate", "fault", "--all", "--driver-root", "{t}/corrupt"), ("{t}/corrupt",)),
        Case("simulate load: no driver", ("simulate", "load", "--all", "--util", "5", "--driver-root", "{t}/empty"), ("{t}/empty",)),
        Case("simulate load: more memory than the device", ("simulate", "load", "--device", "0", "--memory", "99999999", *sim), ("--memory",)),
        Case("simulate status: no driver", ("simulate", "status", "--driver-root", "{t}/empty"), ("{t}/empty",)),
        Case("simulate status: corrupt devices.json", ("simulate", "status", "--driver-root", "{t}/corrupt"), ("{t}/corrupt",)),
        Case("driver simulate: no --config", ("driver", "simulate", "--driver-root", "{case}/d"), ("--config",)),
        Case("driver simulate: --config missing", (*base("driver", "simulate"), "--config", "{t}/missing.yaml"), ("{t}/missing.yaml",)),
        Case("driver simulate: --config a YAML list", (*base("driver", "simulate"), "--config", "{t}/list.yaml"), ("{t}/list.yaml",)),
        Case("driver simulate: --config wrong types", (*base("driver", "simulate"), "--config", "{t}/wrong-devices.yaml"), ("count",)),
        Case("driver simulate: --config not YAML", (*base("driver", "simulate"), "--config", "{t}/bad.yaml"), ("{t}/bad.yaml",)),
        Case("driver simulate: --recipe-file a YAML list", (*base("driver", "simulate"), "--recipe-file", "{t}/list.yaml"), ("{t}/list.yaml",)),
        Case("driver simulate: --recipe-file wrong types", (*base("driver", "simulate"), "--recipe-file", "{t}/wrong-recipe.yaml"), ("name",)),
        Case("driver simulate: --recipe-file not simulated", (*base("driver", "simulate"), "--recipe-file", "{t}/devnodes-recipe.yaml"),
             ("only a simulated recipe",)),
        Case("driver simulate: class --config wrong types", (*base("driver", "simulate"), "--recipe-file", "{t}/class-recipe.yaml",
             "--config", "{t}/wrong-devices.yaml"), ("count",)),
        Case("driver simulate: class --config a YAML list", (*base("driver", "simulate"), "--recipe-file", "{t}/class-recipe.yaml",
             "--config", "{t}/list.yaml"), ("{t}/list.yaml",)),
        Case("driver simulate: class --config a binary not the recipe's", (*base("driver", "simulate"), "--recipe-file",
             "{t}/class-recipe.yaml", "--config", "{t}/wrong-class.yaml"), ("binaries[0]",)),
        Case("device-plugin --oneshot: no simulated driver", ("device-plugin", "--oneshot", *simgpu, "--driver-root", "{t}/empty"),
             ("{t}/empty",), code=1),
        Case("device-plugin --oneshot: no NVML", ("device-plugin", "--oneshot", "--recipe", "nvidia-gpu", "--driver-root", "{t}/empty"), ("nvml",)),
        Case("device-plugin: --config a YAML list", ("device-plugin", "--oneshot", *simgpu, *sim, "--config", "{t}/list.yaml"), ("{t}/list.yaml",)),
        Case("device-plugin: --config wrong types", ("device-plugin", "--oneshot", *simgpu, *sim, "--config", "{t}/wrong-plugin.yaml"), ("migStrategy",)),
        Case("device-plugin: --recipe-file a YAML list", ("device-plugin", "--oneshot", "--recipe-file", "{t}/list.yaml"), ("{t}/list.yaml",)),
        Case("device-plugin: --recipe-file wrong types", ("device-plugin", "--oneshot", "--recipe-file", "{t}/wrong-recipe.yaml"), ("name",)),
        Case("exporter --once: no simulated driver", (*base("exporter"), "--driver-root", "{t}/empty"), ("{t}/empty",)),
        Case("exporter: --config a YAML list", (*base("exporter"), "--config", "{t}/list.yaml"), ("{t}/list.yaml",)),
        Case("exporter: --interval not a duration", (*base("exporter"), "--interval", "often"), ("often",)),
        Case("exporter: --address not an address", ("exporter", *simgpu, *sim, "--address", "no-port"), ("no-port",)),
        Case("exporter: --recipe-file missing", ("exporter", "--once", "--recipe-file", "{t}/missing.yaml"), ("{t}/missing.yaml",)),
        Case("cdi generate: -o under a file", ("cdi", "generate", *simgpu, *sim, "--dev-root", "{t}/sim/dev", "-o", "{t}/file/x.yaml"),
             ("{t}/file/x.yaml",)),
        Case("validate driver: no driver", base("validate", "driver"), ()),
        Case("validate workload: no devices", base("validate", "workload"), ()),
        Case("driver holders: --recipe-file wrong types", ("driver", "holders", "--recipe-file", "{t}/wrong-recipe.yaml"), ("name",)),
        Case("driver holders: neither --recipe nor --recipe-file", ("driver", "holders"), ("--recipe-file",)),
        # remediation's actions: nothing to act on, what cannot be reset, no recipe, no host /var/run
        Case("driver reset: no simulated driver", base("driver", "reset"), ("{t}/empty",), code=1),
        Case("driver reset: unknown device", ("driver", "reset", *simgpu, *sim, "--device", "99"), ("99",), code=2),
        Case("driver reset: no --device", ("driver", "reset", *simgpu, *sim), ("--device",), code=2),
        Case("driver reset: devnodes recipe", ("driver", "reset", "--recipe-file", "{t}/devnodes-recipe.yaml", "--device", "0"),
             ("reset not supported", "devnodes"), code=2),
        Case("driver reset: neither --recipe nor --recipe-file", ("driver", "reset", "--device", "0"), ("--recipe-file",), code=2),
        Case("driver reset: --recipe-file wrong types", ("driver", "reset", "--recipe-file", "{t}/wrong-recipe.yaml", "--device", "0"),
             ("name",)),
        Case("driver reboot: no simulated driver", base("driver", "reboot"), ("{t}/empty",), code=1),
        Case("driver reboot: neither --recipe nor --recipe-file", ("driver", "reboot", "--host-root", "{t}/empty"),
             ("--recipe-file",), code=2),
        Case("driver reboot: no var/run under --host-root", ("driver", "reboot", "--recipe", "nvidia-gpu", "--driver-root", "{t}/empty",
             "--host-root", "{t}/empty"), ("{t}/empty/var/run",), code=1),
        Case("validate driver: --recipe-file not YAML", ("validate", "driver", "--recipe-file", "{t}/bad.yaml"), ("{t}/bad.yaml",)),
        Case("bundle generate: --version not semver", ("bundle", "generate", "--version", "1.0", "-o", "{case}/b"),
             ("not a semantic version",)),
        Case("bundle generate: --image without a tag", ("bundle", "generate", "--version", "1.0.0", "--image", "registry.example/sro",
             "-o", "{case}/b"), ("neither a tag",)),
        Case("manifests render: unknown component", ("manifests", "render", "no-such-component"), ("no-such-component",)),
        Case("manifests render: --set without =", ("manifests", "render", "device-plugin", "--set", "novalue"), ("--set",)),
        Case("hook: unknown stage", ("hook", "no-such-stage"), ("no-such-stage",)),
        Case("hook prestart: state not JSON", ("hook", "prestart", *simgpu, *sim), ("json",), stdin="not json"),
        Case("runtime write-launcher: no PATH", ("runtime", "write-launcher"), ("PATH",)),
        Case("runtime install: --root under a file", (*base("runtime", "install"), "--root", "{t}/file/rt"), ("{t}/file/rt",)),
        Case("runtime install: no such --python", (*base("runtime", "install"), "--python", "/no/such/python3"), ("/no/such/python3",)),
        Case("runtime install: --recipe-file not YAML", (*base("runtime", "install"), "--recipe-file", "{t}/bad.yaml"), ("{t}/bad.yaml",)),
        Case("runtime install: --recipe-file wrong types", (*base("runtime", "install"), "--recipe-file", "{t}/wrong-recipe.yaml"),
             ("name",)),
        Case("runtime: no such runc", ("runtime", "--runc", "{t}/missing-runc", "--", "state", "c1"), ("{t}/missing-runc",)),
        Case("runtime: --runc not absolute", ("runtime", "--runc", "runc", "--", "state", "c1"), ("--runc",)),
        # no permission: as nobody
        Case("nobody: simulate fault", ("simulate", "fault", "--device", "0", *sim), ("permission",), nobody=True),
        Case("nobody: driver reset", ("driver", "reset", *simgpu, *sim, "--device", "0"), ("permission",), nobody=True),
        Case("nobody: driver reboot", ("driver", "reboot", *simgpu, *sim), ("permission",), nobody=True),
        Case("nobody: simulate load", ("simulate", "load", "--all", "--util", "5", *sim), ("permission",), nobody=True),
        Case("nobody: driver simulate", (*base("driver", "simulate"), "--driver-root", "{t}/ro/driver", "--dev-root", "{t}/ro/dev"),
             ("permission",), nobody=True),
        Case("nobody: device-plugin --oneshot, unreadable driver", ("device-plugin", "--oneshot", *simgpu, "--driver-root", "{t}/secret"),
             ("{t}/secret", "not readable"), nobody=True),
        Case("nobody: discover --config unreadable", ("discover", "--host-root", HOST, "--config", "{t}/secret.yaml"),
             ("{t}/secret.yaml", "not readable"), nobody=True),
        Case("nobody: simulate status, unreadable driver", ("simulate", "status", "--driver-root", "{t}/locked"),
             ("{t}/locked", "permission"), nobody=True),
        Case("nobody: exporter --once --output", (*base("exporter"), "--output", "{t}/ro/metrics.txt"), ("permission",), nobody=True),
        Case("nobody: cdi generate -o", ("cdi", "generate", *simgpu, *sim, "--dev-root", "{t}/sim/dev", "-o", "{t}/ro/spec.yaml"),
             ("permission",), nobody=True),
        Case("nobody: hook install-hooksd", ("hook", "install-hooksd", "--dir", "{t}/ro/hooks.d"), ("permission",), nobody=True),
        Case("nobody: runtime install", (*base("runtime", "install"), "--root", "{t}/ro/runtime"), ("permission",), nobody=True),
        Case("nobody: validate driver --termination-log", ("validate", "driver", *simgpu, *sim, "--dev-root", "{t}/sim/dev",
             "--termination-log", "{t}/ro/log"), ("permission",), nobody=True,
             lenient="the checks passed: the pod succeeds; the termination log's failure is said on stderr"),
        Case("nobody: report -o", (*base("report"), "-o", "{t}/ro/r.png"), ("{t}/ro/r.png",), nobody=True),
        Case("nobody: local status", ("local", "status"), ("needs root",), nobody=True),
        Case("local restart: unknown component", base("local", "restart"), ("no-such-daemon", "one of etcd"), code=2),
        Case("local restart: no component", ("local", "restart"), ("COMPONENT",), code=2),
        Case("nobody: local restart", ("local", "restart", "kubelet"), ("needs root",), nobody=True),
    ]  # fmt: skip


CASES = _generic() + _curated()


@dataclass
class Result:
    argv: list[str]
    code: int | None  # None: still running at the time limit (killed)
    output: str
    seconds: float
    waited: bool = False  # a daemon case: it was still running when it was stopped
    left: tuple[str, ...] = ()  # what is in the case's directory afterwards


def _tree(t: Path) -> None:
    """The temp tree every case's {t} points into; readable (not writable) by nobody."""
    from sro.devices import simconfig, simulated_driver

    t.chmod(0o755)
    (t / "file").write_text("a regular file: nothing can be created under it\n")
    for d in ("empty", "home", "cases", "ro"):
        (t / d).mkdir()
        (t / d).chmod(0o755)
    (t / "home").chmod(0o1777)  # $HOME for nobody too (matplotlib writes its cache there)
    (t / "unreachable.kubeconfig").write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://{UNREACHABLE}", insecure-skip-tls-verify: true}}}}]
users: [{{name: u, user: {{token: not-a-token}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
"""
    )
    (t / "bad.yaml").write_text("key: [unclosed\n")
    (t / "list.yaml").write_text("- 1\n- 2\n")
    (t / "wrong-devices.yaml").write_text("count: many\n")
    (t / "wrong-plugin.yaml").write_text("version: v1\nflags: {migStrategy: [1]}\n")
    (t / "wrong-recipe.yaml").write_text("name: [1]\nresource: 5\n")
    recipe = "resource: example.com/card\npciVendor: '10ee'\nvisibleDevicesEnv: CARD_VISIBLE_DEVICES\n"
    recipe += "deviceNode: /dev/card{index}\nbinaries: {runtime: [cardctl]}\n"
    (t / "class-recipe.yaml").write_text(f"name: example-card\nbackend: simulated\n{recipe}")
    (t / "devnodes-recipe.yaml").write_text(f"name: example-card\nbackend: devnodes\n{recipe}")
    (t / "wrong-class.yaml").write_text("count: 1\nbinaries: [nvidia-smi]\n")
    (t / "proc-devices").write_text(Path("/proc/devices").read_text())
    python = t / "host" / "usr" / "bin" / "python3"  # the host's interpreter as `runtime install` checks it
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    inv = simconfig.parse(__import__("yaml").safe_load(EXAMPLE_DEVICES.read_text()))
    simulated_driver.install(inv, t / "sim" / "root", t / "sim" / "dev", (t / "proc-devices").read_text())
    for d in (t / "sim", t / "sim" / "root", t / "sim" / "dev"):
        d.chmod(0o755)
    (t / "corrupt").mkdir()
    (t / "corrupt" / "devices.json").write_text('["not", "an", "inventory"]\n')
    shutil.copytree(t / "sim" / "root", t / "secret")
    (t / "secret").chmod(0o700)
    shutil.copytree(t / "sim" / "root", t / "locked")  # listable, its files root's alone
    for f in (t / "locked").glob("*.json"):
        f.chmod(0o600)
    (t / "secret.yaml").write_text("core: {}\n")
    (t / "secret.yaml").chmod(0o600)


def _run(case: Case, t: Path, n: int) -> Result:
    here = t / "cases" / str(n)
    here.mkdir()

    def fill(s: str) -> str:
        return s.replace("{t}", str(t)).replace("{case}", str(here))

    argv = [*(NOBODY if case.nobody else ()), sys.executable, "-m", "sro", *map(fill, case.argv)]
    env = {
        "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
        "HOME": str(t / "home"),
        "LANG": "C.UTF-8",
        "KUBECONFIG": str(t / "unreachable.kubeconfig"),
        "PROMETHEUS_URL": f"http://{UNREACHABLE}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": str(Path(sro.__file__).parents[1]),  # the sro this test imported
        "COLUMNS": "200",
        "TERM": "dumb",
        **{k: fill(v) for k, v in case.env.items()},
    }
    start = time.monotonic()
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        cwd=here,
        env=env,
        start_new_session=True,  # its own process group: a time limit kills everything it started
    )
    waited = False
    try:
        out, _ = proc.communicate(fill(case.stdin).encode(), timeout=case.waits or TIMEOUT)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        waited = bool(case.waits)
        os.killpg(proc.pid, signal.SIGTERM if waited else signal.SIGKILL)  # a daemon stops on SIGTERM
        try:
            out, _ = proc.communicate(timeout=10)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            code = None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode(errors="replace"))
    text = text.replace(str(here), "{case}").replace(str(t), "{t}")
    left = tuple(sorted(p.name for p in here.iterdir()))
    return Result(argv, code, text, time.monotonic() - start, waited, left)


@pytest.fixture(scope="module")
def results(request: pytest.FixtureRequest) -> Iterator[dict[str, Result]]:
    """Run the selected cases, a few at a time, once for the module."""
    wanted = {
        item.callspec.params["case"].id
        for item in request.session.items
        if item.module is sys.modules[__name__]
        and hasattr(item, "callspec")
        and "case" in item.callspec.params
    }
    t = Path(tempfile.mkdtemp(prefix="sro-bad-input-"))
    try:
        _tree(t)
        todo = [c for c in CASES if c.id in wanted]
        with ThreadPoolExecutor(WORKERS) as pool:
            done = pool.map(lambda nc: _run(nc[1], t, nc[0]), enumerate(todo))
            yield dict(zip([c.id for c in todo], done, strict=True))
    finally:
        shutil.rmtree(t, ignore_errors=True)


def test_every_command_is_covered() -> None:
    """Every leaf command has generic cases; commands that use a kubeconfig say how (API_ARGS)."""
    covered = {c.argv[: len(p)] for c in CASES for p in COMMANDS if c.argv[: len(p)] == p}
    assert covered == set(COMMANDS)
    assert len(COMMANDS) >= 25
    missing = [
        " ".join(p)
        for p, cmd in COMMANDS.items()
        if any(isinstance(o, click.Option) and "--kubeconfig" in o.opts for o in cmd.params)
        and p not in API_ARGS
    ]
    assert not missing, f"say in API_ARGS how these reach the API server: {missing}"
    assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"


@pytest.mark.root
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, results: dict[str, Result]) -> None:
    r = results[case.id]
    shown = f"$ {' '.join(r.argv)}\n(exit {r.code}, {r.seconds:.1f}s)\n{r.output}"
    if r.code is None:
        pytest.fail(f"still running after {TIMEOUT:.0f}s (killed):\n{shown}", pytrace=False)
    if "Traceback" in r.output:
        pytest.fail(f"a traceback:\n{shown}", pytrace=False)
    if case.lenient:
        return
    if case.waits:
        if not r.waited:
            pytest.fail(f"a daemon should wait for what it lacks, not exit:\n{shown}", pytrace=False)
        if r.code is None:
            pytest.fail(f"did not stop on SIGTERM:\n{shown}", pytrace=False)
    elif r.code == 0 or (case.code is not None and r.code != case.code):
        pytest.fail(f"exit {r.code}, expected {case.code or 'non-zero'}:\n{shown}", pytrace=False)
    if "ready" in r.left:
        pytest.fail(f"left its ready file: the pod would be Ready:\n{shown}", pytrace=False)
    lines = [line for line in r.output.splitlines() if line.strip()]
    if not lines:
        pytest.fail(f"no error message at all:\n{shown}", pytrace=False)
    if not _short(lines) and case.argv[:2] not in REPORTS:
        pytest.fail(f"not short (one line, or click's usage block):\n{shown}", pytrace=False)
    for word in case.expect:
        if word.lower() not in r.output.lower():
            pytest.fail(f"does not say {word!r}:\n{shown}", pytrace=False)


LOG_CONTEXT = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (WARNING|INFO|DEBUG) ")


def _short(lines: list[str]) -> bool:
    """One line (maybe after a progress line), or click's usage block; the log lines below ERROR
    that a node agent writes on the way (what it could not read) are context, not the error."""
    if lines[0].startswith("Usage: ") and any(line.startswith("Error: ") for line in lines):
        return len(lines) <= 8  # click's usage error: a missing option lists its choices
    errors = [line for line in lines if not LOG_CONTEXT.match(line)]
    return (
        len(lines) <= 3 * MAX_LINES and len(errors) <= MAX_LINES and all(len(x) <= MAX_LINE for x in errors)
    )
