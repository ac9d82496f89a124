"""Plain data classes, the one way nodus writes a record, at a fraction of what
:mod:`dataclasses` costs to define.

``@struct`` turns a class whose body annotates its fields into a slotted class with what
``@dataclass(slots=True)`` would give it, for the part of dataclasses nodus uses:

- ``__init__`` taking the fields in order, or by name; defaults and
  ``field(default_factory=...)`` fill the ones left out; ``kw_only`` (on the decorator or
  a field) makes fields keyword-only, after the positional ones;
- ``__match_args__``: the positional fields in order, so ``case Point(1, y)`` matches;
- ``__repr__`` of the fields not marked ``field(repr=False)``;
- ``__eq__``: the same class and equal fields, leaving out ``field(compare=False)``; two
  struct types with the same fields never compare equal, and a struct is not a tuple;
- with ``frozen=True``, ``__hash__`` of those fields, and an assignment or ``del`` of a
  field raises :class:`FrozenError` (an ``AttributeError``, as dataclasses' own); without
  it, instances are mutable and unhashable;
- copy and pickle (``__getstate__``/``__setstate__``), frozen or not;
- a struct deriving from a struct has the base's fields first, then its own (a field
  declared again keeps its place), as a dataclass does; frozen and mutable do not mix.

A method the class defines itself (``__repr__``, ``__eq__``, ``__hash__``,
``__match_args__``) is kept. :func:`replace` and :func:`fields` stand for their
``dataclasses`` namesakes. mypy checks a struct as it checks a dataclass
(``dataclass_transform``): constructor signatures, frozen assignment, field specifiers,
``match`` patterns. So that what mypy believes is true at run time, whatever a dataclass
would honour and a struct does not is refused when the class is defined, with a
``TypeError``: ``__post_init__`` (build the instance in a classmethod or a function
instead), ``InitVar`` and ``KW_ONLY`` annotations, a ``__slots__`` of the class's own, a
``dataclasses.field``; the decorator and :func:`field` take only the keywords they
implement. A default that is not hashable (a list, a mutable struct) is refused as
dataclasses refuse it (``ValueError``): use ``field(default_factory=...)``.

Why not dataclasses: ``@dataclass`` writes each method's source and ``exec``s it when the
class is defined, and importing it loads ``inspect``; a short command defines dozens of
record types and builds few of them. Here ``repr``, equality, hashing and pickling are
shared functions that read the class's field table, and ``__init__`` is written out (one
``exec``, as fast per instance as a dataclass's) the first time an instance of the class
is built, so most classes a command loads cost next to nothing. Why not ``NamedTuple``: a
record is not a tuple (it unpacks, indexes, and equals any tuple with the same values).
The figures, measured side by side, are in ``benchmarks/README.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, ClassVar, TypeVar, dataclass_transform, get_origin, overload

__all__ = ["Field", "FrozenError", "field", "fields", "replace", "struct"]

T = TypeVar("T")


class _Missing:
    __slots__ = ()

    def __repr__(self) -> str:
        return "MISSING"


_MISSING: Any = _Missing()
#: The default of a field with a default_factory, in a compiled __init__.
_FACTORY: Any = _Missing()


class FrozenError(AttributeError):
    """An assignment to (or ``del`` of) a field of a frozen struct."""


class Field:
    """One field of a struct: its name, how it gets a value when none is given, and
    whether it takes part in ``repr`` and comparison."""

    __slots__ = ("compare", "default", "default_factory", "kw_only", "name", "repr")

    def __init__(
        self,
        default: Any = _MISSING,
        default_factory: Callable[[], Any] | None = None,
        compare: bool = True,
        repr: bool = True,
        kw_only: bool = False,
    ) -> None:
        self.name = ""
        self.default = default
        self.default_factory = default_factory
        self.compare = compare
        self.repr = repr
        self.kw_only = kw_only

    @property
    def required(self) -> bool:
        return self.default is _MISSING and self.default_factory is None

    def __repr__(self) -> str:
        return f"Field({self.name!r})"


def field(
    *,
    default: Any = _MISSING,
    default_factory: Callable[[], Any] | None = None,
    compare: bool = True,
    repr: bool = True,
    kw_only: bool = False,
) -> Any:
    """A field with more than a plain default: ``field(default_factory=list)`` for a fresh
    list per instance, ``compare=False`` for provenance that equality ignores,
    ``repr=False`` for what ``repr`` should not show."""
    if default is not _MISSING and default_factory is not None:
        raise ValueError("a field takes a default or a default_factory, not both")
    return Field(default, default_factory, compare, repr, kw_only)


def fields(struct_or_class: Any) -> tuple[Field, ...]:
    """The fields of a struct (class or instance), in the order the class declares them."""
    table: tuple[Field, ...] = struct_or_class.__struct_fields__
    return table


def replace(obj: T, /, **changes: Any) -> T:
    """A copy of ``obj`` with the given fields changed (``dataclasses.replace``)."""
    for f in obj.__struct_fields__:  # type: ignore[attr-defined]
        if f.name not in changes:
            changes[f.name] = getattr(obj, f.name)
    return type(obj)(**changes)


@overload
def struct(cls: type[T], /) -> type[T]: ...


@overload
def struct(*, frozen: bool = False, kw_only: bool = False) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(field_specifiers=(field, Field))
def struct(
    cls: type[T] | None = None, /, *, frozen: bool = False, kw_only: bool = False
) -> type[T] | Callable[[type[T]], type[T]]:
    """Make ``cls`` a struct; ``@struct`` or ``@struct(frozen=True, kw_only=True)``."""
    if cls is None:
        return lambda c: _build(c, frozen, kw_only)
    return _build(cls, frozen, kw_only)


def _build(cls: type[T], frozen: bool, kw_only: bool) -> type[T]:
    where = cls.__qualname__
    # What a dataclass would honour and a struct cannot is refused here, never ignored:
    # mypy reads a struct as a dataclass, so anything left out would type-check and then
    # behave otherwise at run time.
    if hasattr(cls, "__post_init__"):
        raise TypeError(
            f"{where}: a struct never calls __post_init__; build the instance in a "
            "classmethod or a function that computes the fields first"
        )
    if "__slots__" in cls.__dict__:
        raise TypeError(f"{where}: a struct writes its own __slots__ (its fields); drop them")
    bases = [b for b in cls.__mro__[-1:0:-1] if "__struct_fields__" in b.__dict__]
    inherited: dict[str, Field] = {}
    for base in bases:
        if (base.__dict__.get("__setattr__") is _frozen_setattr) != frozen:
            raise TypeError(
                f"{where}: a {'frozen' if frozen else 'mutable'} struct cannot derive from "
                f"the {'mutable' if frozen else 'frozen'} struct {base.__qualname__}"
            )
        for f in base.__dict__["__struct_fields__"]:
            inherited[f.name] = f
    body = dict(cls.__dict__)
    own: dict[str, Field] = {}
    for name, kind in body.get("__annotations__", {}).items():
        if _is_classvar(kind):
            continue
        if _is_unsupported(kind):
            raise TypeError(
                f"{where}.{name}: structs have no InitVar or KW_ONLY; use kw_only=True "
                "on the field or the decorator, and a classmethod for values not stored"
            )
        value = body.pop(name, _MISSING)
        if isinstance(value, Field):
            f = value
        elif type(value).__module__ == "dataclasses":  # dataclasses.field(): not a struct's
            raise TypeError(f"{where}.{name}: use nodus_cli.structs.field, not dataclasses'")
        else:
            if type(value).__hash__ is None:  # list, dict, set, a mutable struct: as dataclasses
                raise ValueError(
                    f"{where}.{name}: a mutable default is shared by every "
                    "instance; use field(default_factory=...)"
                )
            f = Field(value)
        f.name = name
        f.kw_only = f.kw_only or kw_only
        own[name] = f
    # A base's fields come first, in its order; a field declared again keeps its place
    # and takes the new declaration (as dataclasses do).
    table = list({**inherited, **own}.values())
    positional = [f for f in table if not f.kw_only]
    seen_default = False
    for f in positional:
        if not f.required:
            seen_default = True
        elif seen_default:
            raise TypeError(f"{where}.{f.name}: a field without a default follows one with")
    compared = tuple(f.name for f in table if f.compare)
    body.pop("__dict__", None)
    body.pop("__weakref__", None)
    body["__slots__"] = tuple(name for name in own if name not in inherited)
    body["__qualname__"] = where
    body["__struct_fields__"] = tuple(table)
    body["__struct_init__"] = (*positional, *(f for f in table if f.kw_only))
    # A staticmethod: a lambda in the class body would be bound to the instance.
    body["__struct_key__"] = staticmethod(_key_of(compared))
    body["__struct_repr__"] = tuple(f.name for f in table if f.repr)
    mine = cls.__dict__
    if "__match_args__" not in mine:
        body["__match_args__"] = tuple(f.name for f in positional)
    for method, shared in (
        ("__init__", _init),
        ("__repr__", _repr),
        ("__eq__", _eq),
        ("__getstate__", _getstate),
        ("__setstate__", _setstate),
    ):
        if method not in mine:
            body[method] = shared
    if frozen:
        body["__setattr__"] = _frozen_setattr
        body["__delattr__"] = _frozen_delattr
        if "__hash__" not in mine or mine["__hash__"] is None:
            body["__hash__"] = _hash
    elif "__hash__" not in mine:
        body["__hash__"] = None  # mutable and compared by value: unhashable, as a dataclass
    maker: Any = type(cls)  # the class's own metaclass (``type``, or a Generic's)
    made: type[T] = maker(cls.__name__, cls.__bases__, body)
    return made


def _is_classvar(kind: Any) -> bool:
    if isinstance(kind, str):
        return kind.startswith(("ClassVar", "typing.ClassVar"))
    return kind is ClassVar or get_origin(kind) is ClassVar


def _is_unsupported(kind: Any) -> bool:
    # By name: a struct does not import dataclasses to compare with its InitVar and KW_ONLY.
    if isinstance(kind, str):
        return kind.startswith(("InitVar", "dataclasses.InitVar", "KW_ONLY", "dataclasses.KW_"))
    name = getattr(kind, "__name__", "") or type(kind).__name__
    return name in ("InitVar", "_KW_ONLY_TYPE")


def _key_of(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    if not names:
        return lambda _obj: ()
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    key: Callable[[Any], tuple[Any, ...]] = attrgetter(*names)
    return key


def _init(self: Any, *args: Any, **kwargs: Any) -> None:
    # The first instance of a class compiles its own __init__ and puts it on the class:
    # one exec for a class that is built, none for the many that a command never builds.
    cls = type(self)
    compiled = _compile_init(cls)
    cls.__init__ = compiled
    compiled(self, *args, **kwargs)


def _compile_init(cls: type) -> Callable[..., None]:
    """``__init__`` for ``cls``, written out as a dataclass's would be: a real signature
    (so a wrong call is Python's own ``TypeError``) and one assignment per field."""
    frozen = cls.__dict__.get("__setattr__") is _frozen_setattr
    scope: dict[str, Any] = {"_put": object.__setattr__, "_FACTORY": _FACTORY}
    params: list[str] = []
    lines: list[str] = []
    for f in cls.__struct_init__:  # type: ignore[attr-defined]
        name = f.name
        if f.kw_only and "*" not in params:
            params.append("*")
        if f.default is not _MISSING:
            scope[f"_d_{name}"] = f.default
            params.append(f"{name}=_d_{name}")
        elif f.default_factory is not None:
            scope[f"_f_{name}"] = f.default_factory
            params.append(f"{name}=_FACTORY")
            lines.append(f"    if {name} is _FACTORY: {name} = _f_{name}()")
        else:
            params.append(name)
        put = f"_put(self, {name!r}, {name})" if frozen else f"self.{name} = {name}"
        lines.append(f"    {put}")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines or ["    pass"])
    exec(source, scope)  # the names are the class's annotations: identifiers
    init: Callable[..., None] = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    return init


def _repr(self: Any) -> str:
    cls = type(self)
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in cls.__struct_repr__)
    return f"{cls.__qualname__}({shown})"


def _eq(self: Any, other: Any) -> Any:
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = self.__struct_key__
    return key(self) == key(other)


def _hash(self: Any) -> int:
    return hash(self.__struct_key__(self))


def _getstate(self: Any) -> tuple[Any, ...]:
    return tuple(getattr(self, f.name) for f in self.__struct_fields__)


def _setstate(self: Any, state: tuple[Any, ...]) -> None:
    put = object.__setattr__
    for f, value in zip(self.__struct_fields__, state, strict=True):
        put(self, f.name, value)


def _frozen_setattr(self: Any, name: str, value: Any) -> None:
    raise FrozenError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")


def _frozen_delattr(self: Any, name: str) -> None:
    raise FrozenError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")
