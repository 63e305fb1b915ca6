"""``slot_init``: the frozen, slotted dataclasses built once per push (``Push``, ``PushResult``, ``Answered``,
``Unanswered``) get an ``__init__`` that stores through the slots' descriptors. It must take exactly the
parameters the dataclass's own ``__init__`` takes and store exactly what it stores, and leave the instances
frozen, comparable and ``replace``-able as before."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.apns.connection import Answered, Unanswered
from daemon.apns.types import Fence, Push, PushResult, slot_init

CLASSES = [Push, PushResult, Answered, Unanswered]


def dataclass_init_signature(cls: type) -> inspect.Signature:
    """The signature dataclasses would give ``cls.__init__`` (a plain copy of its fields, made afresh)."""
    twin = dataclasses.make_dataclass(
        cls.__name__,
        [
            (f.name, Any, dataclasses.field(default=f.default, kw_only=f.kw_only))
            for f in dataclasses.fields(cls)
        ],
        frozen=True,
        slots=True,
    )
    return inspect.signature(twin.__init__)


@pytest.mark.parametrize("cls", CLASSES)
def test_the_slot_init_takes_the_dataclass_parameters(cls: type) -> None:
    ours = inspect.signature(cls.__init__)  # type: ignore[misc]
    theirs = dataclass_init_signature(cls)
    assert [(p.name, p.kind, p.default) for p in ours.parameters.values()] == [
        (p.name, p.kind, p.default) for p in theirs.parameters.values()
    ]


values = st.one_of(st.none(), st.integers(), st.text(max_size=5), st.binary(max_size=5))


@pytest.mark.parametrize("cls", CLASSES)
@settings(deadline=None)  # a loaded machine must not fail it on time
@given(data=st.data())
def test_the_slot_init_stores_every_field_and_keeps_instances_frozen(cls: type, data: st.DataObject) -> None:
    fields = dataclasses.fields(cls)
    given_values = {f.name: data.draw(values, label=f.name) for f in fields}
    required = [f.name for f in fields if f.default is dataclasses.MISSING]
    positional = data.draw(st.integers(0, len(required)), label="positional")
    args = [given_values[name] for name in required[:positional]]
    kwargs = {name: v for name, v in given_values.items() if name not in required[:positional]}
    instance = cls(*args, **kwargs)
    assert {f.name: getattr(instance, f.name) for f in fields} == given_values
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(instance, fields[0].name, "changed")
    again = dataclasses.replace(instance)
    assert again == instance and again is not instance


def test_defaults_are_the_declared_ones() -> None:
    push = Push("t" * 64, "liveactivity", "com.a", b"{}")
    assert (push.priority, push.kind, push.fence, push.reply_to) == (10, "alert", None, None)
    fence = Fence(5.0)
    assert dataclasses.replace(push, fence=fence).fence is fence
    assert PushResult(push, "accepted", 200, None, None, 1, 0.5).token == "t" * 64


def test_slot_init_refuses_what_it_cannot_speed_up() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    for cls in (Mutable, NoSlots, Factory):
        with pytest.raises(TypeError, match="slot_init"):
            slot_init(cls)
