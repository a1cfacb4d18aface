"""Custom manifests are untrusted text rendered inside the operator (issue 21 §2): nothing in them
runs as code, and nothing in them builds an unbounded value. Each goes through the real reconcile
over a recorded state and gets the SpecialResource Degraded (RenderFailed), as a bad template does."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sro.manifests import render_template
from sro.manifests.sandbox import MAX_OUTPUT
from sro.operator.reconcile import reconcile
from tests.unit.operator.test_reconcile import NOW, NS, cond, node, observed, sr

SPEC = {"recipe": "simulated-gpu", "customManifests": "mine"}


def _reconcile_custom(template: str) -> dict[str, object]:
    custom = {"device-plugin.0600_extra.yaml": template}
    plan = reconcile(observed([node("a")], the_sr=sr(SPEC), custom_manifests=custom), NS, NOW)
    assert not plan.deployable and not plan.apply and not plan.create_pods
    return dict(cond(plan, "Degraded"))


def test_a_template_that_reaches_for_os_runs_nothing_and_is_degraded(tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    escapes = [
        f'{{{{ cycler.__init__.__globals__.os.popen("touch {marker}").read() }}}}',
        f'{{{{ joiner.__init__.__globals__.os.system("touch {marker}") }}}}',
        f"{{{{ package_file.__globals__['os'].system('touch {marker}') }}}}",
        f"{{{{ ''.__class__.__mro__[1].__subclasses__() }}}}{{{{ 'touch {marker}' }}}}",
        f'{{{{ namespace.__init__.__globals__.os.system("touch {marker}") }}}}',
    ]
    for text in escapes:
        degraded = _reconcile_custom(f"kind: ConfigMap\nmetadata: {{name: x}}\ndata: {{a: '{text}'}}\n")
        assert degraded["status"] == "True" and degraded["reason"] == "RenderFailed", text
        assert "device-plugin/0600_extra.yaml (custom)" in str(degraded["message"])
        assert not marker.exists(), text


@pytest.mark.parametrize(
    "expr",
    [
        '"x" * 50000000',
        '50000000 * "x"',
        '["x"] * 50000000',
        "10 ** 100000000",
        '"x".ljust(50000000)',
        '"x".center(50000000)',
        '"{:>50000000}".format("x")',
        '"{:{w}}".format("x", w=50000000)',
        '"%50000000s" % "x"',
        '"%*s" % (50000000, "x")',
        '"x" | center(50000000)',
        '("x" * 1000000) | indent(100)',
        '"%50000000s" | format("x")',
        '("ab" * 500000).replace("", "x" * 1000)',
        '("x" * 1000) | replace("", "y" * 100000)',
        '("," * 1000000).join(["a"] * 1000)',
        '[[["x" * 1000] * 1000] * 1000] | string',
        '("x" * 1000000) ~ ("x" * 1000000)',
        '("x" * 1000000) + ("x" * 1000000)',
    ],
)
def test_a_template_cannot_build_a_huge_value(expr: str) -> None:
    degraded = _reconcile_custom(f"kind: ConfigMap\nmetadata: {{name: x}}\ndata: {{a: '{{{{ {expr} }}}}'}}\n")
    assert degraded["reason"] == "RenderFailed"
    assert "characters" in str(degraded["message"]) or "allowed" in str(degraded["message"])


def test_doubling_through_sets_and_macros_is_stopped() -> None:
    sets = '{% set a = "x" * 1000000 %}{% set b = a ~ a ~ a ~ a %}{% set c = b ~ b ~ b ~ b %}{{ c | length }}'
    macro = (
        "{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s | length }}{% endif %}{% endmacro %}"
        '{{ d("x", 60) }}'
    )
    for text in (sets, macro):
        assert (
            _reconcile_custom(f"kind: ConfigMap\nmetadata: {{name: x}}\ndata: {{a: '{text}'}}\n")["reason"]
            == "RenderFailed"
        )


def test_the_output_of_one_template_is_bounded() -> None:
    many = "{% for i in range(100) %}{{ 'x' * 100000 }}{% endfor %}"
    assert MAX_OUTPUT < 100 * 100000
    degraded = _reconcile_custom(f"kind: ConfigMap\nmetadata: {{name: x}}\ndata: {{a: '{many}'}}\n")
    assert degraded["reason"] == "RenderFailed" and str(MAX_OUTPUT) in str(degraded["message"])


def test_ordinary_template_code_still_works() -> None:
    text = (
        '{{ 3 * 4 }} {{ "a" ~ 1 }} {{ "%s-%d" % ("a", 2) }} {{ "a,b".split(",") | join("/") }} '
        '{{ "{}:{:>3}".format("k", 7) }} {{ "ab" | replace("a", "c") }} {{ "x" * 3 }} {{ 2 ** 10 }}'
        '{% for i in range(3) %}{{ i }}{% endfor %} {{ "l1\\nl2" | indent(2) }}'
    )
    assert render_template(text, {}) == "12 a1 a-2 a/b k:  7 cb xxx 1024012 l1\n  l2"


@pytest.mark.parametrize(
    "text",
    [
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        '{% set s = "x" * 100000 %}{% for a in s %}{% for b in s %}{% endfor %}{% endfor %}',
        "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
        "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    ],
)
def test_a_template_cannot_spin_the_operator(text: str) -> None:
    started = time.monotonic()
    degraded = _reconcile_custom(f"kind: ConfigMap\nmetadata: {{name: x}}\ndata: {{a: '{text}'}}\n")
    assert degraded["reason"] == "RenderFailed"
    assert "loop iterations and calls" in str(degraded["message"]) or "recurses" in str(degraded["message"])
    assert time.monotonic() - started < 5


def test_loops_still_work() -> None:
    text = (
        "{% for i in range(3) %}{{ loop.index }}{% endfor %} {% for x in [1, 2] if x > 1 %}{{ x }}{% endfor %} "
        '{% for a, b in {"k": "v"}.items() %}{{ a }}={{ b }}{% else %}none{% endfor %} '
        "{% for x in [] %}{{ x }}{% else %}none{% endfor %}"
    )
    assert render_template(text, {}) == "123 2 k=v none"
