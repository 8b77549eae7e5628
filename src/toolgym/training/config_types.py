"""The config's type checker: YAML values -> the annotated types of a dataclass schema.

Generic (nothing here knows a section): :func:`build` turns a mapping into a dataclass, converting each
value to its field's annotation (Literal, unions with None, tuples, lists, mappings, nested dataclasses)
and naming the dotted field and the allowed values on a mismatch, with a close match for an unknown key.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, Literal, Union

from toolgym.errors import ConfigError, unknown


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        parts = [type_name(a) for a in typing.get_args(tp) if a is not type(None)]
        return " or ".join(parts) + " or null"
    if origin is tuple:
        return f"a list of {len(typing.get_args(tp))} numbers"
    if origin is dict or tp is dict:
        return "a mapping"
    if origin is list:
        return "a list"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, getattr(tp, "__name__", str(tp)))


def convert(tp: Any, value: Any, path: str) -> Any:
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin is Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{path}: must be {type_name(tp)}; got {value!r}")
        return value
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for a in args:
            if a is type(None):
                continue
            try:
                return convert(a, value, path)
            except ConfigError:
                continue
        raise ConfigError(f"{path}: must be {type_name(tp)}; got {value!r}")
    if dataclasses.is_dataclass(tp):
        return build(tp, value, path)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: must be true or false; got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: must be an integer; got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
            try:
                value = float(value)
            except ValueError:
                raise ConfigError(f"{path}: must be a number; got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ConfigError(f"{path}: must be a finite number; got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: must be a string; got {value!r}")
        return value
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{path}: must be {type_name(tp)}; got {value!r}")
        return tuple(convert(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, value, strict=True)))
    if origin is list:
        (arg,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{path}: must be a list; got {value!r}")
        return [convert(arg, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: must be a mapping; got {value!r}")
        return dict(value)
    raise TypeError(f"unsupported config type {tp!r} at {path}")


def build(cls: type, data: Any, path: str) -> Any:
    """``cls(**data)`` with every value checked against its annotation (nested sections built the same way),
    absent sections built from their defaults, then ``cls._check(path)``. Fields whose metadata has
    ``typed_by`` are left to the caller (their key is accepted, not built)."""
    where = path or "config"
    if data is None:
        data = {}
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = dataclasses.asdict(data)
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: must be a mapping of {cls.__name__} fields; got {data!r}")
    hints = typing.get_type_hints(cls)
    apart = {f.name for f in dataclasses.fields(cls) if f.metadata.get("typed_by")}
    names = [f.name for f in dataclasses.fields(cls) if f.name not in apart]
    for key in data:
        if key not in names and key not in apart:
            raise ConfigError(unknown(f"{path} key" if path else "config key", key, names))
    kwargs = {k: convert(hints[k], v, f"{path}.{k}" if path else k) for k, v in data.items() if k in names}
    for k in names:  # absent sections are built from their defaults, and checked like given ones
        if k not in kwargs and dataclasses.is_dataclass(hints[k]):
            kwargs[k] = build(hints[k], {}, f"{path}.{k}" if path else k)
    obj = cls(**kwargs)
    check = getattr(obj, "_check", None)
    if check is not None:
        check(path)
    return obj
