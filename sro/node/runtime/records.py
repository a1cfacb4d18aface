"""A lean stand-in for `dataclasses.dataclass(frozen=True)` on the hook's start-up path.

Why: the OCI hook sits on every container start, and `import dataclasses` alone pulls in `inspect`,
`ast`, `dis`, `tokenize` and `enum` (~10 ms here, a third of the hook's whole budget), and each
decorated class then costs another ~0.3 ms of generated code. The runtime modules therefore write

    if TYPE_CHECKING:
        from dataclasses import dataclass, field
    else:
        from sro.node.runtime.records import dataclass, field

so mypy checks them as the real frozen dataclasses, and at run time they get this subset: keyword or
positional `__init__` with defaults and `default_factory`, `__post_init__`, frozen attributes,
`__eq__`/`__hash__` over the fields in order, a dataclass-style `__repr__` and `__match_args__`.
No `replace`/`asdict`/`fields` (the runtime code uses none); tests compare it with the real thing.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    T = TypeVar("T")

_MISSING = object()


class FrozenInstanceError(AttributeError):
    """Assigning to a field of a frozen record (the same base class as dataclasses' own)."""


class _Field:
    __slots__ = ("default", "default_factory")

    def __init__(self, default: Any, default_factory: Any) -> None:
        self.default = default
        self.default_factory = default_factory


def field(*, default: Any = _MISSING, default_factory: Callable[[], Any] | Any = _MISSING) -> Any:
    """`dataclasses.field` with only `default` and `default_factory`."""
    if default is not _MISSING and default_factory is not _MISSING:
        raise ValueError("cannot specify both default and default_factory")
    return _Field(default, default_factory)


def _frozen_setattr(self: object, name: str, value: object) -> None:
    raise FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self: object, name: str) -> None:
    raise FrozenInstanceError(f"cannot delete field {name!r}")


def _build(cls: type[T]) -> type[T]:
    names: list[str] = []
    for klass in reversed(cls.__mro__[:-1]):  # fields of record bases first, as dataclasses does
        for name in getattr(klass, "__record_fields__", ()):
            if name not in names:
                names.append(name)
    for name in cls.__dict__.get("__annotations__", {}):  # noqa: RUF063 (inspect is what we avoid)
        if name not in names:
            names.append(name)
    defaults: dict[str, Any] = {}
    factories: dict[str, Callable[[], Any]] = {}
    for name in names:
        value = getattr(cls, name, _MISSING)
        if isinstance(value, _Field):
            if value.default_factory is not _MISSING:
                factories[name] = value.default_factory
                delattr(cls, name)
            elif value.default is not _MISSING:
                defaults[name] = value.default
                setattr(cls, name, value.default)
            else:
                delattr(cls, name)
        elif value is not _MISSING:
            defaults[name] = value
    seen_default = False
    for name in names:
        if name in defaults or name in factories:
            seen_default = True
        elif seen_default:
            raise TypeError(f"non-default argument {name!r} follows default argument")
    fields = tuple(names)
    post_init = getattr(cls, "__post_init__", None)
    qualname = cls.__qualname__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(fields):
            raise TypeError(f"{qualname}.__init__() takes {len(fields) + 1} positional arguments")
        values = dict(zip(fields, args, strict=False))
        for key, value in kwargs.items():
            if key not in fields:
                raise TypeError(f"{qualname}.__init__() got an unexpected keyword argument {key!r}")
            if key in values:
                raise TypeError(f"{qualname}.__init__() got multiple values for argument {key!r}")
            values[key] = value
        setter = object.__setattr__
        for name in fields:
            if name in values:
                setter(self, name, values[name])
            elif name in defaults:
                setter(self, name, defaults[name])
            elif name in factories:
                setter(self, name, factories[name]())
            else:
                raise TypeError(f"{qualname}.__init__() missing required argument: {name!r}")
        if post_init is not None:
            post_init(self)

    def _values(self: Any) -> tuple[Any, ...]:
        return tuple(getattr(self, n) for n in fields)

    def __eq__(self: Any, other: object) -> bool:
        if other.__class__ is self.__class__:
            return _values(self) == _values(other)
        return NotImplemented

    def __hash__(self: Any) -> int:
        return hash(_values(self))

    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in fields)
        return f"{self.__class__.__qualname__}({inner})"

    methods = {
        "__init__": __init__,
        "__eq__": __eq__,
        "__hash__": __hash__,
        "__repr__": __repr__,
        "__setattr__": _frozen_setattr,
        "__delattr__": _frozen_delattr,
        "__match_args__": fields,
        "__record_fields__": fields,
    }
    for key, value in methods.items():
        setattr(cls, key, value)
    return cls


def dataclass(*, frozen: bool = True) -> Callable[[type[T]], type[T]]:
    """`@dataclass(frozen=True)`; only frozen records are supported."""
    if not frozen:
        raise TypeError("sro.node.runtime.records supports frozen records only")
    return _build
