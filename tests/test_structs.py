"""nodus_cli.structs: what a struct promises, held against what a dataclass would do."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import subprocess
import sys
from dataclasses import KW_ONLY, InitVar
from typing import Generic, TypeVar

import pytest

from nodus_cli.structs import FrozenError, field, fields, replace, struct

T = TypeVar("T")


@struct(frozen=True)
class Point:
    """A frozen struct."""

    x: int
    y: int = 0
    label: str = field(default="", compare=False)
    secret: str = field(default="", repr=False)


@struct
class Bag:
    name: str
    items: list[str] = field(default_factory=list)


@struct(frozen=True, kw_only=True)
class Options:
    size: int
    colour: str = "red"


@struct(frozen=True)
class Boxed(Generic[T]):
    value: T

    def __repr__(self) -> str:
        return f"<{self.value!r}>"


# Module level, so that pickle finds them by name.
PICKLED = (Point(1, 2, "a", "s"), Bag("b", ["x"]))


def test_positional_and_keyword_arguments_fill_the_fields_in_order() -> None:
    assert Point(1, 2).y == 2
    assert Point(y=3, x=1) == Point(1, 3)
    assert Point(1).y == 0


def test_wrong_arguments_raise_type_errors_that_name_the_field() -> None:
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'x'"):
        Point()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        Point(1, z=2)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'x'"):
        Point(1, x=2)  # type: ignore[misc]
    with pytest.raises(TypeError, match="takes from 2 to 5 positional arguments but 6"):
        Point(1, 2, "", "", 5)  # type: ignore[call-arg]


def test_a_default_factory_gives_each_instance_its_own_value() -> None:
    a, b = Bag("a"), Bag("b")
    a.items.append("x")
    assert b.items == []


def test_keyword_only_fields_refuse_positions() -> None:
    assert Options(size=2) == Options(size=2, colour="red")
    with pytest.raises(TypeError, match="takes 1 positional argument but 2"):
        Options(2)  # type: ignore[misc]


def test_equality_compares_fields_of_the_same_class_only() -> None:
    assert Point(1, 2, label="one") == Point(1, 2, label="other")  # compare=False
    assert Point(1, 2) != Point(1, 3)
    assert Point(1, 2) != (1, 2)
    assert Bag("a") == Bag("a") and Bag("a") != Bag("a", ["x"])


def test_frozen_structs_hash_by_their_compared_fields_and_refuse_assignment() -> None:
    assert hash(Point(1, 2, label="a")) == hash(Point(1, 2, label="b"))
    assert len({Point(1), Point(1), Point(2)}) == 2
    p = Point(1)
    with pytest.raises(FrozenError, match="cannot assign to field 'x'"):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del p.x  # type: ignore[misc]
    with pytest.raises(AttributeError):
        p.other = 1  # type: ignore[attr-defined]


def test_mutable_structs_can_change_and_are_unhashable() -> None:
    b = Bag("a")
    b.name = "b"
    assert b == Bag("b")
    with pytest.raises(TypeError, match="unhashable"):
        hash(b)


def test_repr_shows_the_fields_but_those_marked_repr_false() -> None:
    assert repr(Point(1, 2, "a", "hidden")) == "Point(x=1, y=2, label='a')"
    assert repr(Bag("a")) == "Bag(name='a', items=[])"


def test_a_method_the_class_defines_is_kept_and_generics_still_subscript() -> None:
    assert repr(Boxed(3)) == "<3>"
    assert Boxed[int](3) == Boxed(3)


def test_replace_copies_with_changes_and_checks_the_names() -> None:
    p = Point(1, 2, "a", "s")
    q = replace(p, y=5)
    assert (q.x, q.y, q.label, q.secret) == (1, 5, "a", "s")
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        replace(p, z=1)


def test_fields_lists_the_declared_fields_in_order() -> None:
    assert [f.name for f in fields(Point)] == ["x", "y", "label", "secret"]
    assert [f.name for f in fields(Bag("a"))] == ["name", "items"]


def test_instances_copy_and_pickle_frozen_or_not() -> None:
    for obj in PICKLED:
        assert copy.copy(obj) == obj
        assert copy.deepcopy(obj) == obj
        assert pickle.loads(pickle.dumps(obj)) == obj
    assert pickle.loads(pickle.dumps(PICKLED[0])).secret == "s"


def test_definitions_that_a_dataclass_would_refuse_are_refused() -> None:
    with pytest.raises(ValueError, match="mutable default"):

        @struct
        class Shared:
            items: list[str] = []  # noqa: RUF012

    with pytest.raises(ValueError, match="mutable default"):

        @struct
        class SharedBag:
            bag: Bag = Bag("shared")  # unhashable: mutable

    with pytest.raises(TypeError, match="without a default follows one with"):

        @struct
        class Order:
            a: int = 0
            b: int  # type: ignore[misc]


def test_structs_are_slotted() -> None:
    assert Point.__slots__ == ("x", "y", "label", "secret")  # type: ignore[attr-defined]
    assert not hasattr(Point(1), "__dict__")


def test_importing_structs_does_not_load_dataclasses_or_inspect() -> None:
    names = "('dataclasses', 'inspect')"
    code = f"import sys, nodus_cli.structs; print(*(m in sys.modules for m in {names}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_first_instance_writes_out_the_class_s_own_init() -> None:
    @struct(frozen=True)
    class Fresh:
        a: int
        b: list[int] = field(default_factory=list)

    before = Fresh.__init__
    Fresh(1)
    assert Fresh.__init__ is not before
    assert Fresh.__init__.__qualname__.endswith("Fresh.__init__")
    assert Fresh(2, b=[3]).b == [3] and Fresh(2).b == []


@struct(frozen=True)
class Named:
    first: int
    second: str = ""
    hidden: int = field(default=0, kw_only=True)


@struct(frozen=True)
class Other:
    first: int
    second: str = ""
    hidden: int = field(default=0, kw_only=True)


def test_match_args_are_the_positional_fields_so_class_patterns_match() -> None:
    assert Named.__match_args__ == ("first", "second")
    assert Options.__match_args__ == ()
    match Named(1, "a", hidden=2):
        case Named(1, label, hidden=h):
            assert (label, h) == ("a", 2)
        case _:
            pytest.fail("the positional pattern did not match")
    match Point(3, 4):
        case Point(x, y):
            assert (x, y) == (3, 4)
        case _:
            pytest.fail("the positional pattern did not match")


def test_two_struct_types_with_the_same_fields_are_not_equal() -> None:
    assert Named(1, "a") != Other(1, "a")  # type: ignore[comparison-overlap]
    assert Named(1, "a") == Named(1, "a")
    assert Named(1, "a") != (1, "a")  # type: ignore[comparison-overlap]


def test_a_struct_is_not_a_tuple() -> None:
    with pytest.raises(TypeError):
        _first, _second = Named(1, "a")  # type: ignore[misc]
    with pytest.raises(TypeError):
        Named(1, "a")[0]  # type: ignore[index]


def test_post_init_is_refused_with_what_to_do_instead() -> None:
    with pytest.raises(
        TypeError, match=r"Checked: a struct never calls __post_init__.*classmethod"
    ):

        @struct
        class Checked:
            a: int

            def __post_init__(self) -> None:
                raise AssertionError("never called")


def test_what_a_dataclass_would_honour_and_a_struct_cannot_is_refused() -> None:
    with pytest.raises(TypeError, match="unexpected keyword argument 'order'"):
        struct(order=True)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="unexpected keyword argument 'init'"):
        field(init=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"use nodus_cli\.structs\.field, not dataclasses'"):

        @struct
        class Foreign:
            a: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="own __slots__"):

        @struct
        class Slotted:
            __slots__ = ("a",)
            a: int

    with pytest.raises(TypeError, match="no InitVar or KW_ONLY"):

        @struct
        class Initvar:
            a: InitVar[int]

    with pytest.raises(TypeError, match="no InitVar or KW_ONLY"):

        @struct
        class KwOnly:
            a: int
            _: KW_ONLY
            b: int


def test_class_vars_are_not_fields_whether_or_not_annotations_are_strings() -> None:
    namespace: dict[str, object] = {}
    exec(  # annotations evaluated, as in a module without `from __future__ import annotations`
        "from typing import ClassVar\n"
        "from nodus_cli.structs import struct\n"
        "@struct\n"
        "class Counted:\n"
        "    total: ClassVar[int] = 0\n"
        "    a: int\n",
        namespace,
    )
    counted: type = namespace["Counted"]  # type: ignore[assignment]
    assert [f.name for f in fields(counted)] == ["a"]
    assert counted.total == 0  # type: ignore[attr-defined]


@struct(frozen=True)
class Base:
    a: int
    b: str = "b"


@struct(frozen=True)
class Derived(Base):
    c: float = 0.0
    b: str = "again"


def test_a_struct_deriving_from_a_struct_has_the_base_s_fields_first() -> None:
    d = Derived(1, "x", 2.0)
    assert (d.a, d.b, d.c) == (1, "x", 2.0)
    assert [f.name for f in fields(Derived)] == ["a", "b", "c"]
    assert Derived(1).b == "again"  # declared again: same place, new default
    assert repr(d) == "Derived(a=1, b='x', c=2.0)"
    assert Derived.__match_args__ == ("a", "b", "c")
    assert d != Base(1, "x") and Base(1, "x") != d
    assert replace(d, c=3.0) == Derived(1, "x", 3.0)
    assert pickle.loads(pickle.dumps(d)) == d
    assert isinstance(d, Base) and not hasattr(d, "__dict__")
    with pytest.raises(FrozenError):
        d.a = 2  # type: ignore[misc]


def test_frozen_and_mutable_structs_do_not_derive_from_each_other() -> None:
    with pytest.raises(TypeError, match="mutable struct cannot derive from the frozen struct Base"):

        @struct
        class Loose(Base):
            c: int = 0

    with pytest.raises(TypeError, match="frozen struct cannot derive from the mutable struct Bag"):

        @struct(frozen=True)
        class Tight(Bag):
            c: int = 0
