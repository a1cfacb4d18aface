"""The Jinja2 environment every manifest template is rendered in: sandboxed, immutable and bounded.

Why: an admin's custom manifests (a ConfigMap) are rendered inside the operator, so a template is
untrusted code. Jinja2's ImmutableSandboxedEnvironment stops attribute walks to Python internals
(`cycler.__init__.__globals__.os`) and mutation, but not size: `{{ "x" * 50000000 }}` would build
50 MB. Here every operation that can build a large value from a small template — `*`, `**`, `%`,
`~` (concatenation), calls of functions, methods and macros, filters and `str.format` — is checked
before it runs against an estimate of what it builds (at most `MAX_VALUE` characters), and a
render's output against `MAX_OUTPUT`; `range` stays the sandbox's bounded one, and a render makes
at most `MAX_STEPS` loop iterations and calls (nested loops or a macro calling itself twice would
otherwise hold the operator's event loop for hours). `namespace` (the
only mutable accumulator a template has) and `lipsum` are not offered. A refused operation raises
`jinja2.sandbox.SecurityError`, a `TemplateError`, which the callers already report as a bad
template naming its file.
"""

from __future__ import annotations

import contextvars
import functools
import re
import string
from collections.abc import Callable, Iterator
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

MAX_VALUE = 1 << 20  # characters (or list items) one operation may build
MAX_OUTPUT = 4 << 20  # characters one template may render (the largest built-in is ~60 KB)
MAX_WIDTH = 10_000  # a format width or precision
MAX_STEPS = 100_000  # loop iterations and calls one render may make (the built-in templates: < 100)
_DEPTH = 8  # how deep an estimate looks into nested lists and dicts

# a %-format conversion: its width and precision are read as numbers
_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?[hlL]?[a-zA-Z%]")
_NUMBERS = re.compile(r"\d+")


def size(value: Any, depth: int = _DEPTH, seen: dict[int, int] | None = None) -> int:
    """An upper estimate of how many characters `value` becomes as text (shared items counted
    once per reference: a list repeated by reference is big once rendered)."""
    if isinstance(value, str | bytes):
        return len(value)
    if isinstance(value, int | float | bool) or value is None:
        return 1
    if depth <= 0:
        return 1
    seen = {} if seen is None else seen
    key = id(value)
    if key in seen:
        return seen[key]
    total = 1
    if isinstance(value, dict):
        for k, v in list(value.items())[: MAX_VALUE + 1]:
            total += size(k, depth - 1, seen) + size(v, depth - 1, seen) + 1
    elif isinstance(value, list | tuple | set | frozenset):
        for item in list(value)[: MAX_VALUE + 1]:
            total += size(item, depth - 1, seen) + 1
    elif isinstance(value, range):
        total += len(value)
    seen[key] = total
    return total


def _ints(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
    return sum(abs(a) for a in (*args, *kwargs.values()) if isinstance(a, int) and not isinstance(a, bool))


def _refuse(what: str, estimate: int, limit: int = MAX_VALUE) -> None:
    if estimate > limit:
        raise SecurityError(f"{what} would build about {estimate} characters, more than the {limit} allowed")


def _check_call(what: str, obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any], name: str = "") -> None:
    """A call's result is at most its inputs times (1 + its numbers) — `s.ljust(n)`, `s | indent(n)`,
    `s | center(n)` — and, for `replace` and `join`, times the inserted text too: `s.replace("", t)`,
    `sep.join(l)`."""
    inputs = size(obj) if isinstance(obj, str | list | tuple | dict) else 0
    inputs += sum(size(a) for a in args) + sum(size(v) for v in kwargs.values())
    factor = 1 + _ints(args, kwargs)
    if name in ("replace", "join"):
        texts = [a for a in (obj, *args, *kwargs.values()) if isinstance(a, str)]
        factor *= 1 + max((len(t) for t in texts), default=0)
    _refuse(what, (inputs + 1) * factor)


def _check_percent(fmt: Any, values: Any) -> None:
    if not isinstance(fmt, str):
        return
    for width, precision in _PERCENT_SPEC.findall(fmt):
        for n in (width, precision):
            if n.isdigit() and int(n) > MAX_WIDTH:
                raise SecurityError(f"a %-format width of {n} is more than the {MAX_WIDTH} allowed")
    star = [v for v in (values if isinstance(values, tuple) else (values,)) if isinstance(v, int)]
    if any(abs(v) > MAX_WIDTH for v in star) and "*" in fmt:
        raise SecurityError(f"a %-format width is more than the {MAX_WIDTH} allowed")
    _refuse("a %-format", size(fmt) + size(values))


def _check_format_spec(fmt: str) -> None:
    """`str.format`'s format specs: no width or precision beyond MAX_WIDTH (nested fields too)."""
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError as e:
        raise SecurityError(f"malformed format string: {e}") from e
    for _, _, spec, _ in parsed:
        if spec:
            if any(int(n) > MAX_WIDTH for n in _NUMBERS.findall(spec)):
                raise SecurityError(f"a format spec {spec!r} asks for more than {MAX_WIDTH} characters")
            _check_format_spec(spec)


def _bounded_mul(left: Any, right: Any) -> Any:
    for seq, n in ((left, right), (right, left)):
        if isinstance(seq, str | list | tuple) and isinstance(n, int) and not isinstance(n, bool):
            _refuse("a repetition", size(seq) * max(n, 0))
    return left * right


def _bounded_pow(left: Any, right: Any) -> Any:
    if isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
        _refuse("a power", right * max(abs(left).bit_length(), 1) // 3)  # about its decimal digits
    return left**right


def _bounded_mod(left: Any, right: Any) -> Any:
    _check_percent(left, right)
    return left % right


def _bounded_add(left: Any, right: Any) -> Any:
    if not (isinstance(left, int | float) and isinstance(right, int | float)):
        _refuse("a concatenation", size(left) + size(right))
    return left + right


def bounded_concat(parts: tuple[Any, ...]) -> str:
    """`a ~ b ~ ...`: refused when the result would be too big."""
    texts = [str(p) for p in parts]
    _refuse("a concatenation", sum(len(t) for t in texts))
    return "".join(texts)


class _Steps:
    """The loop iterations and calls one render may still make."""

    def __init__(self) -> None:
        self.left = MAX_STEPS

    def take(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise SecurityError(f"the template makes more than {MAX_STEPS} loop iterations and calls")


_steps: contextvars.ContextVar[_Steps | None] = contextvars.ContextVar("sro_template_steps", default=None)


def _take_step() -> None:
    steps = _steps.get()
    if steps is not None:
        steps.take()


def counted(iterable: Any) -> Iterator[Any]:
    for item in iterable:
        _take_step()
        yield item


class _CodeGenerator(CodeGenerator):
    """Sends `~` through `bounded_concat` (Jinja2 has no interception hook for it), and counts
    every `for` loop's iterations against the render's step budget (nested loops over a long
    string or `range` would otherwise hold the operator's event loop for hours)."""

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        loop_iter = node.iter
        previous = self.__dict__.get("visit")  # a wrapper of an enclosing loop, if any
        visit = previous or super().visit

        def visit_counting(n: nodes.Node, *args: Any, **kwargs: Any) -> Any:
            if n is not loop_iter:
                return visit(n, *args, **kwargs)
            self.write("environment.counted(")
            visit(n, *args, **kwargs)
            self.write(")")
            return None

        setattr(self, "visit", visit_counting)  # noqa: B010  (an instance attribute shadows the method)
        try:
            super().visit_For(node, frame)
        finally:
            if previous is None:
                del self.visit
            else:
                setattr(self, "visit", previous)  # noqa: B010

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        plain = tuple(a for a in args if not isinstance(a, jinja2.runtime.Context | jinja2.Environment))
        if plain:
            _check_call(f"the filter {name}", plain[0], plain[1:], kwargs, name)
        if name == "format" and plain:
            _check_percent(plain[0], plain[1:] or kwargs)
        return func(*args, **kwargs)

    return guarded


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment whose every value-building operation is size-checked."""

    code_generator_class = _CodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+"})

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.binop_table = {
            **self.binop_table,
            "*": _bounded_mul,
            "**": _bounded_pow,
            "%": _bounded_mod,
            "+": _bounded_add,
        }
        self.globals.pop("namespace", None)
        self.globals.pop("lipsum", None)
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}
        self.bounded_concat = bounded_concat
        self.counted = counted

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        _take_step()
        owner = getattr(__obj, "__self__", None)
        name = str(getattr(__obj, "__name__", ""))
        what = f"the call of {name or 'a function'}"
        _check_call(what, owner, args, kwargs, name)
        result = super().call(__context, __obj, *args, **kwargs)
        if isinstance(result, str):
            _refuse(what, len(result))
        return result

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt: str = value.__self__

        def checked(*args: Any, **kwargs: Any) -> str:
            _check_format_spec(fmt)
            for a in (*args, *kwargs.values()):  # format_map's mapping
                if isinstance(a, dict):
                    _check_call("a format", fmt, tuple(a.values()), {})
            _check_call("a format", fmt, args, kwargs)
            assert wrapped is not None
            return wrapped(*args, **kwargs)

        return checked


def render_bounded(template: jinja2.Template, values: dict[str, Any]) -> str:
    """The template's output, refused once it passes MAX_OUTPUT characters or MAX_STEPS loop
    iterations and calls (a macro recursing without end is refused too)."""
    out: list[str] = []
    total = 0
    token = _steps.set(_Steps())
    try:
        chunks: Iterator[str] = template.generate(**values)
        for chunk in chunks:
            total += len(chunk)
            if total > MAX_OUTPUT:
                raise SecurityError(f"the template renders more than {MAX_OUTPUT} characters")
            out.append(chunk)
    except RecursionError:
        raise SecurityError("the template recurses too deep") from None
    finally:
        _steps.reset(token)
    return "".join(out)
