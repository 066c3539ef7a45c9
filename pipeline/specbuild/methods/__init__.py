"""The speculative methods specbuild knows, one pack each (`specbuild/methods/<name>/`, the interface in
specbuild/methods/pack.py; every pack folder here is found, and a pack that lives elsewhere is registered), found
by the recipe's `method:` value or by the type of a Speculation's params; the recipe's `speculation` union is
derived from this registry. `describe(recipe)` is the runtime-neutral description of
a recipe's speculation.

A runtime asks the pack of a description for its part (`pack_for(spec)`), and loads a pack's runtime-side module
through `load` (never by importing it: a pack's recipe side imports no runtime, and no runtime imports a pack's
modules by name).
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from specbuild.methods.pack import MethodPack, Recipe, Refusal
from specbuild.speculation import DisableBelow

if TYPE_CHECKING:
    from specbuild.speculation import Speculation


def _packs() -> list[MethodPack]:
    """Every pack folder of this package (a subpackage whose PACK is its MethodPack): adding a method adds a folder,
    nothing here. No speculation first (the recipe's default), then by name."""
    found = [importlib.import_module(f"{__name__}.{m.name}").PACK for m in pkgutil.iter_modules(__path__) if m.ispkg]
    return sorted(found, key=lambda p: (p.Params is not None, p.name))


# The packs by recipe `method:` value, in the order `specbuild schema` lists them
METHODS: dict[str, MethodPack] = {p.name: p for p in _packs()}
_BY_PARAMS: dict[type | None, MethodPack] = {p.Params: p for p in METHODS.values()}
# Called with each pack registered after import (the recipe's schema rebuilds its union of sections)
_listeners: list[Callable[[MethodPack], None]] = []


def register(pack: MethodPack) -> None:
    """Add a pack that lives elsewhere (the tests' fixture pack): it is found like the packs above."""
    if pack.name in METHODS or pack.Params in _BY_PARAMS:
        raise ValueError(f"a method named {pack.name!r} or with params {pack.Params!r} is registered already")
    METHODS[pack.name] = pack
    _BY_PARAMS[pack.Params] = pack
    for listener in _listeners:
        listener(pack)


def unregister(name: str) -> None:
    """Remove a registered pack (the tests' fixture pack, after its tests)."""
    pack = METHODS.pop(name)
    _BY_PARAMS.pop(pack.Params)
    for listener in _listeners:
        listener(pack)


def on_register(listener: Callable[[MethodPack], None]) -> None:
    """Call `listener` whenever a pack is registered or removed."""
    _listeners.append(listener)


def pack_for(spec: Speculation) -> MethodPack:
    """The pack that described `spec` (by its params' type)."""
    return _BY_PARAMS[type(spec.params) if spec.params is not None else None]


def method_for(recipe: Recipe) -> MethodPack:
    return METHODS[recipe.speculation.method]


def load(pack: MethodPack, part: str) -> Any:
    """A pack's runtime-side object, "module:name" inside the pack's package (e.g. "decoder:MedusaDecoder"),
    imported now: only the runtime that asks for it pays for what it imports."""
    module, name = part.split(":")
    package = type(pack).__module__
    return getattr(importlib.import_module(f"{package}.{module}"), name)


def describe(recipe: Recipe) -> Speculation:
    """The recipe's speculation as a typed, frozen description (what every runtime translates), with the
    recipe's adaptive draft-length schedule and acceptance-rate switch (section `adaptive`, shared by every method)."""
    spec = method_for(recipe).describe(recipe)
    schedule, gate = recipe.adaptive.draft_len_schedule, recipe.adaptive.disable_below
    if (schedule is None and gate is None) or not spec.speculative:
        return spec
    return replace(
        spec,
        draft_len_schedule=None if schedule is None else tuple(sorted((int(k), int(v)) for k, v in schedule.items())),
        disable_below=None if gate is None else DisableBelow(float(gate.acceptance_rate), int(gate.window)),
    )


__all__ = [
    "METHODS",
    "MethodPack",
    "Refusal",
    "describe",
    "load",
    "method_for",
    "on_register",
    "pack_for",
    "register",
    "unregister",
]
