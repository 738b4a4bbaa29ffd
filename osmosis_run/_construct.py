"""Build our own pydantic models from trusted values, over twice as fast as pydantic does.

``BaseModel.model_construct`` walks every field in Python, checking aliases and defaults; for
the six models a rollout builds, that is about a tenth of W1-ram's eval (the README's figure,
from ``tests/perf/bench_construct.py``). ``construct`` makes the same instance from a plan
computed once per class: a template holding every field's
default in field order, the default factories, the required fields. A call that gives every
field in field order (what the runner's own calls do) needs no template: its keyword arguments,
a dict of its own, become the instance's ``__dict__``. A class the plan cannot reproduce exactly
(aliases, a root model, private attributes or ``model_post_init``, factories that read other
fields, its own ``__new__``) and a call with keys that are not fields go to ``model_construct``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel

__all__ = ["construct"]

M = TypeVar("M", bound=BaseModel)
_MISSING = object()
_set = object.__setattr__


@dataclass(frozen=True, slots=True)
class _Plan:
    template: dict[str, Any]  # every field, in order: its default, or _MISSING
    factories: tuple[tuple[str, Callable[[], Any]], ...]
    required: frozenset[str]
    extra: bool  # extra="allow": the instance gets an empty __pydantic_extra__
    names: tuple[str, ...]  # every field, in order
    every: frozenset[str]  # the same, copied into the instances that set every field


_plans: dict[type[BaseModel], _Plan | None] = {}
_new = object.__new__


def construct(cls: type[M], /, **values: Any) -> M:
    """``cls.model_construct(**values)``: the same instance, without validation, faster."""
    try:
        plan = _plans[cls]
    except KeyError:
        plan = _plans[cls] = _plan(cls)
    if plan is None:
        return cls.model_construct(**values)
    instance = _new(cls)
    if tuple(values) == plan.names:  # every field, in order: no defaults to fill in
        _set(instance, "__dict__", values)
        _set(instance, "__pydantic_fields_set__", set(plan.every))
    elif values.keys() <= plan.every and plan.required <= values.keys():
        data = plan.template.copy()
        data.update(values)
        for name, factory in plan.factories:
            if name not in values:
                data[name] = factory()
        _set(instance, "__dict__", data)
        _set(instance, "__pydantic_fields_set__", set(values))
    else:
        return cls.model_construct(**values)
    _set(instance, "__pydantic_extra__", {} if plan.extra else None)
    _set(instance, "__pydantic_private__", None)
    return instance


def _plan(cls: type[BaseModel]) -> _Plan | None:
    if cls.__pydantic_root_model__ or cls.__pydantic_post_init__ or cls.__new__ is not _new:
        return None
    template: dict[str, Any] = {}
    factories: list[tuple[str, Callable[[], Any]]] = []
    required: set[str] = set()
    # model_fields: public in every pydantic 2 (__pydantic_fields__ only came in 2.10).
    for name, field in cls.model_fields.items():
        if field.alias is not None or field.validation_alias is not None:
            return None
        if field.is_required():
            template[name] = _MISSING
            required.add(name)
        elif field.default_factory is not None:
            # A factory may take the validated data from pydantic 2.10 on, and FieldInfo says
            # so from 2.11 on; where it does not say, model_construct calls the factory.
            if getattr(field, "default_factory_takes_validated_data", True):
                return None
            template[name] = _MISSING
            factories.append((name, field.default_factory))  # type: ignore[arg-type]
        else:
            template[name] = field.default
    return _Plan(
        template,
        tuple(factories),
        frozenset(required),
        cls.model_config.get("extra") == "allow",
        tuple(template),
        frozenset(template),
    )
