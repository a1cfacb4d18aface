"""Bad input to the hook: a clear refusal naming what is wrong, and nothing changed anywhere."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sro.node.runtime import hook
from sro.node.runtime.specedits import HookCommand


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for root, dirs, files in os.walk(path):
        for n in dirs + files:
            st = os.lstat(os.path.join(root, n))
            out[os.path.join(root, n)] = (st.st_mode, st.st_mtime_ns)
    return out


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    b = tmp_path / "bundle"
    (b / "rootfs").mkdir(parents=True)
    (tmp_path / "driver" / "lib").mkdir(parents=True)
    (tmp_path / "dev").mkdir()
    return b


def _config(bundle: Path, env: list[str], **extra: object) -> None:
    doc = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"env": env}, **extra}
    (bundle / "config.json").write_text(json.dumps(doc))


def _run(bundle: Path, stdin: bytes, capsys: pytest.CaptureFixture[str], *opts: str) -> tuple[int, str]:
    root = bundle.parent
    argv = [
        "prestart",
        "--recipe",
        "simulated-gpu",
        "--driver-root",
        str(root / "driver"),
        "--dev-root",
        str(root / "dev"),
        "--accept-envvar-unprivileged",  # these containers' own env is what is under test
        "true",
        *opts,
    ]
    before = _tree(root)
    rc = hook.main(argv, io.BytesIO(stdin))
    assert _tree(root) == before, "bad input changed files"
    return rc, capsys.readouterr().err


def _state(bundle: Path, **extra: object) -> bytes:
    return json.dumps(
        {"ociVersion": "1.0.2", "id": "c1", "pid": 4242, "bundle": str(bundle), **extra}
    ).encode()


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        (b"{not json", "state JSON on stdin: not valid JSON"),
        (b"", "state JSON on stdin: not valid JSON"),
        (b"[1, 2]", "state JSON on stdin: expected an object"),
        (b'{"pid": 1}', "'bundle' must be an absolute path"),
        (b'{"pid": 1, "bundle": "relative/dir"}', "'bundle' must be an absolute path"),
        (b'{"pid": -1, "bundle": "/x"}', "'pid' must be a non-negative integer"),
        (b'{"pid": true, "bundle": "/x"}', "'pid' must be a non-negative integer"),
        (b"{" + b" " * (2 << 20) + b"}", "larger than 1 MiB"),
    ],
)
def test_malformed_state(
    bundle: Path, capsys: pytest.CaptureFixture[str], stdin: bytes, message: str
) -> None:
    rc, err = _run(bundle, stdin, capsys)
    assert rc == 1 and message in err


def test_missing_bundle(tmp_path: Path, bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _run(bundle, _state(tmp_path / "gone"), capsys)
    assert rc == 1 and "gone/config.json: No such file or directory" in err


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ("{{{", "not valid JSON"),
        ("[]", "expected an object"),
        ('{"process": {"env": []}}', "'root.path' must be a non-empty string"),
        (
            '{"root": {"path": "rootfs"}, "process": {"env": "A=1"}}',
            "'process.env' must be a list of strings",
        ),
        (
            '{"root": {"path": "rootfs"}, "annotations": {"a": 1}}',
            "'annotations' must map strings to strings",
        ),
        (
            '{"root": {"path": "rootfs"}, "linux": {"rootfsPropagation": "rshared"}}',
            "rootfsPropagation rshared",
        ),
    ],
)
def test_unparsable_config(
    bundle: Path, capsys: pytest.CaptureFixture[str], config: str, message: str
) -> None:
    (bundle / "config.json").write_text(config)
    rc, err = _run(bundle, _state(bundle), capsys)
    assert rc == 1 and message in err, err


def test_unknown_device_id(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _config(bundle, ["SRO_VISIBLE_DEVICES=7"])
    rc, err = _run(bundle, _state(bundle), capsys)
    assert rc == 1 and "unknown device id '7' for simulated-gpu (this node has: none)" in err


def test_cdi_name_of_another_kind(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _config(bundle, ["SRO_VISIBLE_DEVICES=nvidia.com/gpu=0"])
    rc, err = _run(bundle, _state(bundle), capsys)
    assert rc == 1 and "is not of kind 'sro.dev/simulated-gpu'" in err


def test_bad_cdi_annotation(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _config(bundle, [], annotations={"cdi.k8s.io/x": "not-a-cdi-name"})
    rc, err = _run(bundle, _state(bundle), capsys)
    assert rc == 1 and "annotation cdi.k8s.io/x" in err


def test_prestart_without_pid(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (bundle.parent / "dev" / "sro-simgpuctl").write_text("")  # not a char device: ignored
    (bundle.parent / "driver" / "lib" / "libsimgpu.so.1").write_text("x")
    _config(bundle, ["SRO_VISIBLE_DEVICES=none"])
    rc, err = _run(bundle, _state(bundle, pid=0), capsys)
    assert rc == 1 and "prestart needs the container's 'pid'" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bogus"], "unknown hook stage 'bogus'"),
        (["prestart", "--frobnicate", "1"], "unknown option or value: --frobnicate 1"),
        (["prestart", "--dev-root"], "option --dev-root needs a value"),
        (["prestart", "--resolver", "magic"], "unknown option or value: --resolver magic"),
        (["prestart", "--debug", "yes"], "unknown option or value: --debug yes"),
    ],
)
def test_bad_arguments(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert hook.main(argv, io.BytesIO(b"{}")) == 1
    assert message in capsys.readouterr().err


def test_the_started_hook_says_why_before_it_exits(bundle: Path) -> None:
    """The hook as runc starts it (the bootstrap, which ends in `posix._exit`): its exit code and
    its message on stderr both get out, and a success prints nothing."""
    argv = HookCommand(sys.executable).argv()
    bad = subprocess.run([*argv, "prestart", "--frobnicate", "1"], input=b"{}", capture_output=True)
    assert bad.returncode == 1
    assert bad.stderr.decode() == "sro hook: unknown option or value: --frobnicate 1\n"
    _config(bundle, ["PATH=/bin", "SRO_VISIBLE_DEVICES=void"])
    ok = subprocess.run([*argv, "prestart"], input=_state(bundle), capture_output=True)
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, b"", b"")


def test_nothing_asked_is_a_quick_success(bundle: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _config(bundle, ["PATH=/bin", "SRO_VISIBLE_DEVICES=void"])
    rc, err = _run(bundle, _state(bundle), capsys)
    assert rc == 0 and err == ""


def test_inactive_stages_do_not_read_stdin(capsys: pytest.CaptureFixture[str]) -> None:
    for stage in ("poststart", "poststop", "createRuntime"):
        assert hook.main([stage], io.BytesIO(b"garbage")) == 0


def test_unknown_recipe_is_named_once_a_container_asks(
    bundle: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _config(bundle, ["SRO_VISIBLE_DEVICES=0"])
    rc, err = _run(bundle, _state(bundle), capsys, "--recipe", "nope")
    assert rc == 1 and "unknown recipe 'nope'" in err


def test_prefilter_matches_the_recipes() -> None:
    """The cheap pre-filter must let through everything activation could act on."""
    from sro.api.recipes import BUILTIN
    from sro.node.runtime import activation

    assert all(r.visible_devices_env.endswith(hook.VISIBLE_SUFFIX) for r in BUILTIN.values())
    assert {activation.ANNOTATION_PREFIX, activation.CDI_ANNOTATION_PREFIX} == set(hook.ANNOTATION_PREFIXES)
    assert not hook.may_ask({"process": {"env": ["PATH=/bin", "HOME=/"]}, "annotations": {"io.k8s/x": "1"}})
    assert hook.may_ask({"process": {"env": [3]}})
    assert hook.may_ask({"annotations": {"cdi.k8s.io/a": "x"}})


@pytest.mark.parametrize(
    "text",
    [
        '{"a": [1, 2.5, -3e2, true, false, null, "x\\u00e9"], "b": {"c": NaN, "d": -Infinity}}',
        " [] ",
        '"s"',
        "7",
    ],
)
def test_fast_json_reader_agrees_with_json(text: str) -> None:
    got, want = hook.loads(text.encode()), json.loads(text)
    assert json.dumps(got) == json.dumps(want)


@pytest.mark.parametrize("text", ["{bad", "", "[1,]", '{"a": 1} extra', "\xff"])
def test_fast_json_reader_raises_json_errors(text: str) -> None:
    with pytest.raises(ValueError):
        hook.loads(text.encode("latin-1"))
