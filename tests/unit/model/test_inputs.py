"""Input modes: how one batch input becomes a call, per the upstream table."""

from __future__ import annotations

from typing import Any

import pytest
from kinetic.model.payload import INPUT_MODES, call_with_input, resolve_call


def echo(*args: Any, **kwargs: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    return args, kwargs


@pytest.mark.parametrize(
    ("item", "expected"),
    [
        ({"lr": 0.01, "wd": 1e-4}, ((), {"lr": 0.01, "wd": 1e-4})),
        ({"_private": 1, "x2": 2}, ((), {"_private": 1, "x2": 2})),
        ([0.01, 32], ((0.01, 32), {})),
        ((0.01, 32), ((0.01, 32), {})),
        ([], ((), {})),
        (0.01, ((0.01,), {})),
        ("text", (("text",), {})),
        (None, ((None,), {})),
        ({1, 2}, (({1, 2},), {})),
        # dicts that cannot be keyword arguments are passed whole
        ({"class": 1}, (({"class": 1},), {})),
        ({"not-an-id": 1}, (({"not-an-id": 1},), {})),
        ({"1st": 1}, (({"1st": 1},), {})),
        ({"ok": 1, "lambda": 2}, (({"ok": 1, "lambda": 2},), {})),
        ({1: "a"}, (({1: "a"},), {})),
        ({("t",): 1}, (({("t",): 1},), {})),
        # an empty dict has no bad keys, so it unpacks to no arguments
        ({}, ((), {})),
    ],
)
def test_auto_mode(item: Any, expected: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
    assert resolve_call(item, "auto") == expected
    assert call_with_input(echo, item, "auto") == expected


def test_auto_is_the_default() -> None:
    assert resolve_call({"a": 1}) == ((), {"a": 1})
    assert call_with_input(echo, [1, 2]) == ((1, 2), {})


def test_auto_does_not_unpack_dict_subclass_with_bad_keys_or_other_sequences() -> None:
    # strings and ranges are sequences but not list/tuple: passed whole
    assert resolve_call("ab", "auto") == (("ab",), {})
    assert resolve_call(range(3), "auto") == ((range(3),), {})


@pytest.mark.parametrize("item", [{"lr": 1}, [1, 2], (1, 2), "x", 3, None, {"class": 1}])
def test_single_mode_always_passes_the_item_whole(item: Any) -> None:
    assert resolve_call(item, "single") == ((item,), {})
    assert call_with_input(echo, item, "single") == ((item,), {})


@pytest.mark.parametrize("item", [[1, 2], (1, 2), [], [{"a": 1}]])
def test_args_mode_unpacks_lists_and_tuples(item: Any) -> None:
    assert call_with_input(echo, item, "args") == (tuple(item), {})


@pytest.mark.parametrize(
    ("item", "type_name"), [({"a": 1}, "dict"), ("ab", "str"), (3, "int"), (None, "NoneType")]
)
def test_args_mode_rejects_everything_else(item: Any, type_name: str) -> None:
    with pytest.raises(TypeError) as info:
        call_with_input(echo, item, "args")
    assert str(info.value) == f"input_mode='args' needs a list or tuple, got {type_name}"


@pytest.mark.parametrize("item", [{"lr": 1}, {"class": 1}, {"not-an-id": 1}, {}])
def test_kwargs_mode_unpacks_any_str_keyed_dict(item: Any) -> None:
    def takes_anything(**kw: Any) -> dict[str, Any]:
        return kw

    assert resolve_call(item, "kwargs") == ((), item)
    assert call_with_input(takes_anything, item, "kwargs") == item


@pytest.mark.parametrize(("item", "type_name"), [([1], "list"), ((1,), "tuple"), (3, "int")])
def test_kwargs_mode_rejects_non_dicts(item: Any, type_name: str) -> None:
    with pytest.raises(TypeError, match=rf"^input_mode='kwargs' needs a dict, got {type_name}$"):
        call_with_input(echo, item, "kwargs")


def test_kwargs_mode_rejects_non_str_keys() -> None:
    with pytest.raises(TypeError, match=r"needs a dict with str keys, got key 1 \(int\)"):
        resolve_call({"a": 1, 1: 2}, "kwargs")


def test_unknown_mode_names_the_supported_ones() -> None:
    with pytest.raises(ValueError) as info:
        resolve_call(1, "positional")
    assert "auto, single, args, kwargs" in str(info.value)
    assert "'positional'" in str(info.value)
    assert INPUT_MODES == ("auto", "single", "args", "kwargs")


def test_call_with_input_returns_the_function_value_and_propagates_its_errors() -> None:
    def train(lr: float, batch_size: int) -> float:
        if lr < 0:
            raise ValueError("bad lr")
        return lr * batch_size

    assert call_with_input(train, {"lr": 0.5, "batch_size": 4}) == 2.0
    assert call_with_input(train, [0.5, 4]) == 2.0
    with pytest.raises(ValueError, match="bad lr"):
        call_with_input(train, {"lr": -1, "batch_size": 4})
    # a dict of the wrong shape reaches the function and fails there, like a local call
    with pytest.raises(TypeError):
        call_with_input(train, {"lr": 0.5})


def test_resolve_call_does_not_alias_the_input() -> None:
    item = {"a": 1}
    _, kwargs = resolve_call(item, "auto")
    kwargs["a"] = 2
    assert item == {"a": 1}
