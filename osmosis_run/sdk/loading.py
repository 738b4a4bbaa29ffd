"""Turn a ``"module:attr"`` string into the object it names, with one typed error per failure.

Classes and configs may be ours or ``osmosis_ai.rollout``'s (when osmosis-ai is loaded).
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar, cast

from osmosis_run.errors import (
    AttributeNotFoundError,
    ImportPathError,
    ModuleNotFoundLoadError,
    UserModuleImportError,
    WrongKindError,
)
from osmosis_run.sdk._osmosis_ai import backend_workflow, counterpart, is_osmosis_ai

__all__ = ["import_from_string", "load_class", "load_instance", "load_module"]

T = TypeVar("T")


def import_from_string(path: str) -> Any:
    """Import ``"package.module:attr"`` (``attr`` may be dotted) and return the attribute."""
    module_name, _, attrs = path.partition(":") if isinstance(path, str) else ("", "", "")
    if not module_name or not attrs or ":" in attrs:
        raise ImportPathError(
            f'invalid import path "{path}": expected "module:attr", '
            'for example "my_rollout:MyWorkflow"'
        )
    obj: Any = load_module(module_name, path=path)
    parts = attrs.split(".")
    for index, part in enumerate(parts):
        owner, obj = obj, getattr(obj, part, None)
        if obj is None:
            owner_name = f"{module_name}:{'.'.join(parts[:index])}" if index else module_name
            raise AttributeNotFoundError(_missing_message(path, owner, owner_name, part))
    return obj


def load_module(module_name: str, *, path: str | None = None) -> ModuleType:
    """Import ``module_name``; ``path`` is what the user wrote (for messages), if not the name.

    Raises:
        ModuleNotFoundLoadError: no such module.
        UserModuleImportError: importing it raised (an ImportError inside it included).
    """
    path = path or module_name
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and _is_prefix(exc.name, module_name):
            raise ModuleNotFoundLoadError(
                f'cannot import "{path}": no module named "{exc.name}"; check the spelling, '
                "install the package, or run from the folder that holds it"
            ) from None
        raise _user_import_error(path, exc) from exc
    except Exception as exc:
        raise _user_import_error(path, exc) from exc


def load_class(ref: type[T] | str, base: Callable[..., T], *, role: str) -> type[T]:
    """Return ``ref`` (a class or an import path) checked to be a subclass of ``base``."""
    # ``base`` is typed as a callable, not ``type[T]``, because mypy refuses abstract classes
    # for ``type[T]`` (python/mypy#4717); it is always a class.
    base_cls = cast("type[object]", base)
    obj = import_from_string(ref) if isinstance(ref, str) else ref
    if isinstance(ref, str) and _stands_for_workflow(obj, base_cls):
        obj = backend_workflow(obj, ref)  # a module-level HarborBackend, say: it runs rollouts
    if not (inspect.isclass(obj) and issubclass(obj, _bases(base_cls))):
        raise WrongKindError(
            f"{_subject(role, ref)} is {_kind(obj)}, expected a subclass of {base_cls.__name__}"
        )
    if inspect.isabstract(obj):
        missing = ", ".join(sorted(getattr(obj, "__abstractmethods__", ())))
        raise WrongKindError(f"{_subject(role, ref)} is abstract: implement {missing}")
    return cast("type[T]", obj)


def load_instance(ref: T | str, base: type[T], *, role: str) -> T:
    """Return ``ref`` (an instance or an import path) checked to be an instance of ``base``."""
    obj = import_from_string(ref) if isinstance(ref, str) else ref
    if not isinstance(obj, _bases(base)):
        hint = "; instantiate it in your module" if inspect.isclass(obj) else ""
        raise WrongKindError(
            f"{_subject(role, ref)} is {_kind(obj)}, expected an instance of {base.__name__}{hint}"
        )
    return cast("T", obj)  # ours, or osmosis_ai's of the same role (the same fields)


def _stands_for_workflow(obj: object, base: type) -> bool:
    """Whether ``obj`` is an osmosis_ai ``ExecutionBackend`` (not a ``LocalBackend``, whose
    parts are loaded instead) asked for as a workflow."""
    return (
        base.__name__ == "AgentWorkflow"
        and not isinstance(obj, type)
        and is_osmosis_ai(obj, "ExecutionBackend")
        and not is_osmosis_ai(obj, "LocalBackend")
    )


def _bases(base: type) -> tuple[type, ...]:
    """``base``, and osmosis_ai's class of the same role when osmosis_ai is loaded.

    A class or config written for ``osmosis_ai.rollout`` is accepted as it is; osmosis_ai is
    never imported for it (a user's object from osmosis_ai has loaded it already).
    """
    other = counterpart(base)
    return (base,) if other is None else (base, other)


def _is_prefix(missing: str, module_name: str) -> bool:
    return module_name == missing or module_name.startswith(missing + ".")


def _user_import_error(path: str, exc: BaseException) -> UserModuleImportError:
    module_name = path.partition(":")[0]
    what = f'"{module_name}"' if module_name == path else f'"{module_name}" (for "{path}")'
    hint = ""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "osmosis_ai":
        hint = (
            "; the code is written for osmosis-ai: install it (Python >= 3.12), "
            "or port the import lines to osmosis_run"
        )
    return UserModuleImportError(f"importing {what} raised {type(exc).__name__}: {exc}{hint}")


def _missing_message(path: str, owner: object, owner_name: str, part: str) -> str:
    if hasattr(owner, part):  # present, but None: the SDK counts that as missing too
        return f'cannot import "{path}": "{part}" in "{owner_name}" is None'
    names = [name for name in dir(owner) if not name.startswith("_")]
    close = difflib.get_close_matches(part, names, n=1)
    hint = f'; did you mean "{close[0]}"?' if close else ""
    return f'cannot import "{path}": "{owner_name}" has no attribute "{part}"{hint}'


def _subject(role: str, ref: object) -> str:
    """Name what was passed: the path as written, a class or function name, or just the role."""
    if isinstance(ref, str):
        return f'{role} "{ref}"'
    if inspect.isclass(ref) or inspect.isfunction(ref):
        return f"{role} {ref.__qualname__}"
    return role


def _kind(obj: object) -> str:
    if inspect.isclass(obj):
        return f"the class {obj.__qualname__}"
    if inspect.isfunction(obj) or inspect.ismethod(obj):
        return "a function"
    if inspect.ismodule(obj):
        return "a module"
    return f"an instance of {type(obj).__qualname__}"
