"""Every registered method, method params type and runtime conforms to its interface, with the required members
read from the interface itself (the base class or Protocol), never from a second list kept here: an annotated
class attribute without a value must be set, a method whose body only raises NotImplementedError must be
overridden, and every method keeps the interface's parameters."""

from __future__ import annotations

import ast
import inspect
import textwrap
import typing

import pytest

from specbuild.deploy.context import BundleFlavour, bundle_flavour
from specbuild.methods import METHODS, load
from specbuild.methods.pack import MethodPack
from specbuild.runtimes import REGISTRY, get_runtime
from specbuild.runtimes.base import Runtime
from specbuild.speculation import MethodParams
from specbuild.trtllm.method_part import TrtllmPart

PARAMS = [pack.Params for pack in METHODS.values() if pack.Params is not None]


def _abstract(function) -> bool:
    """The function's body (after its docstring) is `raise NotImplementedError`."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    body = tree.body[0].body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0])


def _members(interface: type) -> tuple[set[str], dict[str, typing.Callable]]:
    """(class attributes the interface declares without a value, its public functions)."""
    own = vars(interface)
    declared = {name for name in getattr(interface, "__annotations__", {}) if name not in own}
    functions = {name: value for name, value in own.items() if not name.startswith("_") and inspect.isfunction(value)}
    return declared, functions


def _parameters(function) -> list[str]:
    return [p.name for p in inspect.signature(function).parameters.values()]


def _problems(cls: type, interface: type) -> list[str]:
    declared, functions = _members(interface)
    out = [f"{cls.__name__} does not set {name}" for name in sorted(declared) if not hasattr(cls, name)]
    for name, function in functions.items():
        mine = getattr(cls, name, None)
        if not callable(mine):
            out.append(f"{cls.__name__}.{name} is not a method")
        elif _abstract(function) and mine is function:
            out.append(f"{cls.__name__} does not implement {name}")
        elif _parameters(mine) != _parameters(function):
            out.append(
                f"{cls.__name__}.{name}{inspect.signature(mine)} differs from the interface's "
                f"{inspect.signature(function)}"
            )
    return out


def test_the_interfaces_declare_what_is_checked():
    """The derivation finds members in each interface (a renamed or emptied interface would pass vacuously)."""
    for interface in (Runtime, MethodPack, MethodParams, BundleFlavour, TrtllmPart):
        declared, functions = _members(interface)
        assert functions, interface
    assert any(_abstract(f) for f in _members(Runtime)[1].values())
    assert any(_abstract(f) for f in _members(MethodPack)[1].values())
    assert _members(Runtime)[0] and _members(MethodPack)[0]


@pytest.mark.parametrize("key", sorted(REGISTRY), ids="/".join)
def test_runtime_conforms(key):
    runtime = get_runtime(*key)
    assert (runtime.name, runtime.flavour) == key
    assert runtime.contract in ("engine", "llm-api")
    assert isinstance(runtime, Runtime)
    assert not _problems(type(runtime), Runtime)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_method_conforms(name):
    method = METHODS[name]
    assert method.name == name
    assert not _problems(type(method), MethodPack)


@pytest.mark.parametrize("key", sorted(REGISTRY), ids="/".join)
def test_each_flavour_names_a_bundle_part_that_conforms(key):
    part = bundle_flavour(get_runtime(*key))
    assert isinstance(part, BundleFlavour)
    assert not _problems(type(part), BundleFlavour)


@pytest.mark.parametrize("name", sorted(n for n, p in METHODS.items() if p.trtllm is not None))
def test_each_pack_s_trtllm_part_conforms(name):
    pack = METHODS[name]
    part = load(pack, pack.trtllm)
    assert isinstance(part, TrtllmPart) and not _problems(type(part), TrtllmPart)


@pytest.mark.parametrize("params", PARAMS, ids=lambda t: t.__name__)
def test_params_conform(params):
    assert issubclass(params, MethodParams)
    assert not _problems(params, MethodParams)


def test_a_missing_hook_is_found():
    """The check itself: a runtime that leaves a required hook to the interface is reported."""

    class Partial(type(get_runtime("reference", "engine"))):
        serving_model = Runtime.serving_model

    assert any("does not implement serving_model" in p for p in _problems(Partial, Runtime))
