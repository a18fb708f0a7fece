"""The helpers that keep old names working for one minor version, each with a DeprecationWarning."""

from __future__ import annotations

import sys
import types

import pytest

from gyre_contract.core.deprecation import (
    deprecated_alias,
    lazy_exports,
    renamed_arguments,
    renamed_function,
)


@renamed_arguments(step_model="model", old="new")
def pick(path: str, *, model: str = "default", new: int = 0) -> tuple[str, str, int]:
    """Return what it got, so the test sees where each argument landed."""
    return path, model, new


def test_the_new_argument_name_does_not_warn() -> None:
    assert pick("p", model="m", new=1) == ("p", "m", 1)
    assert pick.__name__ == "pick" and "what it got" in (pick.__doc__ or "")


def test_an_old_argument_name_still_works_and_warns_at_the_callers_line() -> None:
    with pytest.warns(DeprecationWarning, match=r"^pick\(\): the argument step_model= is now "
                      r"model= \(the old name goes away in 0\.3\.0\)$") as caught:
        assert pick("p", step_model="m") == ("p", "m", 0)
    assert caught[0].filename == __file__


def test_old_and_new_argument_names_together_are_refused() -> None:
    with pytest.raises(TypeError, match=r"pick\(\) got both step_model= and model="):
        pick("p", step_model="a", model="b")


class Thing:
    def __init__(self) -> None:
        self.ok = True

    def exit_code(self, strict: bool = False) -> int:
        return 1 if strict else 0

    holds = deprecated_alias("ok")
    code = deprecated_alias("exit_code", "pass strict= explicitly")


def test_a_deprecated_attribute_alias_forwards_and_warns() -> None:
    thing = Thing()
    with pytest.warns(DeprecationWarning, match=r"^Thing\.holds is deprecated, use Thing\.ok") as caught:
        assert thing.holds is True
    assert caught[0].filename == __file__
    with pytest.warns(DeprecationWarning, match=r"Thing\.code is deprecated, use Thing\.exit_code; "
                      r"pass strict= explicitly"):
        assert thing.code(strict=True) == 1
    assert isinstance(Thing.holds, deprecated_alias)  # on the class: no warning (help, inspect)


def test_a_renamed_function_still_works_under_its_old_name_and_warns() -> None:
    old_pick = renamed_function(pick, "old_pick")
    assert old_pick.__name__ == "old_pick"
    with pytest.warns(DeprecationWarning, match=r"^old_pick\(\) is deprecated, use pick\(\)") as caught:
        assert old_pick("p", model="m") == ("p", "m", 0)
    assert caught[0].filename == __file__


def test_lazy_exports_load_on_first_use_and_serve_moved_names_with_a_warning() -> None:
    package = types.ModuleType("gyre_contract_test_pkg")
    sys.modules[package.__name__] = package
    try:
        names, getattr_, dir_ = lazy_exports(
            package.__name__, {"json": ("dumps",)}, moved={"sqrt": "math"})
        package.__getattr__ = getattr_  # type: ignore[attr-defined]
        assert names == ["dumps"]
        import json

        assert package.dumps is json.dumps  # type: ignore[attr-defined]
        assert "dumps" in vars(package)  # kept after the first use
        assert "dumps" in dir_() and "sqrt" not in dir_()
        with pytest.warns(DeprecationWarning, match=r"gyre_contract_test_pkg\.sqrt has moved: "
                          r"import it from math"):
            assert package.sqrt(4.0) == 2.0  # type: ignore[attr-defined]
        with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
            package.nothing  # type: ignore[attr-defined]  # noqa: B018
    finally:
        del sys.modules[package.__name__]
