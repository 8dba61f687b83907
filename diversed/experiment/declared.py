"""Config dataclasses read through their declarations (diversed.utils.option): from the fields alone, a JSON
schema (`schema`), a parse of a nested mapping into plain data with every default filled and every value checked
(`parse`, errors naming the key's path), the typed objects of a parsed mapping (`build`), the check of a built
settings object (`check`), and the docs' key table (`rows`). A float field refuses NaN and inf wherever it is
declared."""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from typing import Any

SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean"}


def declared(cls: type, omit: tuple[str, ...] = ()) -> list[dataclasses.Field]:
    """The fields of a config dataclass that a config may set: those with help, less `omit`."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata and f.name not in omit]


def default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default is dataclasses.MISSING else f.default


def _parts(hint) -> tuple[Any, bool]:
    """A type hint without its None, and whether None is allowed (int | None -> int, True)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return rest[0], len(rest) < len(typing.get_args(hint))
    return hint, False


def _join(where: str, key: str | int) -> str:
    return f"{where}[{key}]" if isinstance(key, int) else (f"{where}.{key}" if where else key)


# ------------------------------------------------------------------------------------------ the schema

def schema(cls: type, omit: tuple[str, ...] = ()) -> dict:
    """The JSON schema (draft 2020-12) of a config dataclass's mapping, from its declarations."""
    hints, props = typing.get_type_hints(cls), {}
    for f in declared(cls, omit):
        props[f.name] = _schema(hints[f.name], f.metadata) | {"description": " ".join(f.metadata["help"].split())}
        if not f.metadata.get("required"):
            props[f.name]["default"] = _plain(default(f))
    out = {"type": "object", "additionalProperties": False, "properties": props}
    return out | ({"required": need} if (need := [f.name for f in declared(cls, omit) if f.metadata.get("required")])
                  else {})


def _plain(x):
    """A default as the schema writes it (a settings object's default: the mapping of its defaults, {})."""
    return {} if dataclasses.is_dataclass(x) else list(x) if isinstance(x, tuple) else x


def _schema(hint, meta) -> dict:
    base, nullable = _parts(hint)
    origin = typing.get_origin(base)
    if dataclasses.is_dataclass(base):
        out = schema(base, meta.get("omit", ()))
    elif origin in (list, tuple):
        item = typing.get_args(base)[0]
        out = {"type": "array", "items": schema(item) if dataclasses.is_dataclass(item) else _bounds(item, meta)}
        out |= ({"minItems": 1} if meta.get("nonempty") else {}) | ({"uniqueItems": True} if meta.get("unique") else {})
    elif origin is dict:
        value = typing.get_args(base)[1]
        if meta.get("keys"):
            out = {"type": "object", "additionalProperties": False, "properties": {
                k: _schema(h, f.metadata) | {"description": f.metadata["help"]} for k, (h, f) in meta["keys"].items()}}
        else:
            item = _schema(value, {"omit": meta.get("omit", ())}) if dataclasses.is_dataclass(value) else \
                _bounds(value, meta)
            out = {"type": "object", "additionalProperties": item} | ({"minProperties": 1} if meta.get("nonempty")
                                                                        else {})
    else:
        out = _bounds(base, meta)
    if nullable:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _bounds(base, meta) -> dict:
    out: dict = {"type": SCALARS[base]}
    if meta.get("choices"):
        out["enum"] = list(meta["choices"])
    for key, name in (("low", "minimum"), ("high", "maximum"), ("above", "exclusiveMinimum"),
                      ("below", "exclusiveMaximum"), ("pattern", "pattern")):
        if meta.get(key) is not None:
            out[name] = meta[key]
    return out


# ------------------------------------------------------------------------------------------ parsing

def parse(cls: type, data: Any, where: str = "", omit: tuple[str, ...] = ()) -> dict:
    """`data` (a config's mapping) checked against cls's declarations: every key known, every value of its type
    and in its range, a required key given, the others' defaults filled in. Plain data out (nested mappings);
    ValueError naming the key's path at the first problem."""
    if not isinstance(data, dict):
        raise ValueError(f"{where or 'the config'}: expected a mapping, got {data!r}")
    fields, hints = {f.name: f for f in declared(cls, omit)}, typing.get_type_hints(cls)
    if unknown := [k for k in data if k not in fields]:
        raise ValueError(f"{_join(where, str(unknown[0]))}: unknown key; allowed: {', '.join(fields)}")
    out = {}
    for name, f in fields.items():
        path = _join(where, name)
        if name in data:
            out[name] = value(hints[name], f.metadata, data[name], path)
        elif f.metadata.get("required"):
            raise ValueError(f"{path}: required, not given")
        else:
            out[name] = value(hints[name], f.metadata, _plain(default(f)), path)
    return out


def value(hint, meta, x: Any, where: str) -> Any:
    """One value checked against its declared type and option (a nested settings object: its parse)."""
    base, nullable = _parts(hint)
    if x is None:
        if nullable:
            return None
        raise ValueError(f"{where}: null is not allowed")
    origin = typing.get_origin(base)
    if dataclasses.is_dataclass(base):
        return parse(base, x, where, meta.get("omit", ()))
    if origin in (list, tuple):
        if not isinstance(x, (list, tuple)):
            raise ValueError(f"{where}: expected a list, got {x!r}")
        item = typing.get_args(base)[0]
        items = [parse(item, v, _join(where, i)) if dataclasses.is_dataclass(item) else
                 _scalar(item, meta, v, _join(where, i)) for i, v in enumerate(x)]
        if meta.get("nonempty") and not items:
            raise ValueError(f"{where}: must not be empty")
        if meta.get("unique") and len(set(map(repr, items))) < len(items):
            raise ValueError(f"{where}: has repeated values")
        return items
    if origin is dict:
        return _mapping(typing.get_args(base)[1], meta, x, where)
    return _scalar(base, meta, x, where)


def _mapping(item, meta, x: Any, where: str) -> dict:
    if not isinstance(x, dict):
        raise ValueError(f"{where}: expected a mapping, got {x!r}")
    if meta.get("nonempty") and not x:
        raise ValueError(f"{where}: must not be empty")
    keys = meta.get("keys")
    if keys and (unknown := [k for k in x if k not in keys]):
        raise ValueError(f"{_join(where, str(unknown[0]))}: unknown key; allowed: {', '.join(keys)}")
    out = {}
    for k, v in x.items():
        if not isinstance(k, str):
            raise ValueError(f"{where}: key {k!r} is not a string")
        if keys:
            hint, f = keys[k]
            out[k] = value(hint, f.metadata, v, _join(where, k))
        elif dataclasses.is_dataclass(item):
            out[k] = parse(item, v, _join(where, k), meta.get("omit", ()))
        else:
            out[k] = value(item, meta, v, _join(where, k))
    return out


def _scalar(base, meta, x: Any, where: str) -> Any:
    if base is float:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise ValueError(f"{where}: expected a number, got {x!r}")
        if not math.isfinite(x):
            raise ValueError(f"{where}: {x} is not a finite number")
    elif base is int and (isinstance(x, bool) or not isinstance(x, int)):
        raise ValueError(f"{where}: expected an integer, got {x!r}")
    elif base in (str, bool) and not isinstance(x, base):
        raise ValueError(f"{where}: expected a {SCALARS[base]}, got {x!r}")
    if (choices := meta.get("choices")) and x not in choices:
        raise ValueError(f"{where}: {x!r} is not one of {', '.join(map(str, choices))}")
    for key, ok, says in (("low", lambda b: x >= b, ">="), ("high", lambda b: x <= b, "<="),
                          ("above", lambda b: x > b, ">"), ("below", lambda b: x < b, "<")):
        if meta.get(key) is not None and not ok(meta[key]):
            raise ValueError(f"{where}: must be {says} {meta[key]:g}, got {x!r}")
    if meta.get("pattern") and not re.fullmatch(meta["pattern"], x):
        raise ValueError(f"{where}: {x!r} does not match {meta['pattern']}")
    return x


def build(cls: type, data: dict) -> Any:
    """A parsed mapping (`parse`'s output) as the typed objects its declarations name: nested sections, lists and
    mappings of sections built alike; a field the mapping omits keeps its dataclass default."""
    hints = typing.get_type_hints(cls)
    return cls(**{name: _built(hints[name], x) for name, x in data.items()})


def _built(hint, x: Any) -> Any:
    base, _ = _parts(hint)
    if x is None:
        return None
    if dataclasses.is_dataclass(base):
        return build(base, x)
    origin, args = typing.get_origin(base), typing.get_args(base)
    if origin in (list, tuple) and dataclasses.is_dataclass(args[0]):
        return [build(args[0], v) for v in x]
    if origin is dict and dataclasses.is_dataclass(args[1]):
        return {k: build(args[1], v) for k, v in x.items()}
    return x


def check(obj: Any) -> None:
    """Raise at the first field of a built settings object outside its declaration (type, range, choices,
    finiteness), naming the field."""
    hints = typing.get_type_hints(type(obj))
    for f in declared(type(obj)):
        x = getattr(obj, f.name)
        value(hints[f.name], f.metadata, list(x) if isinstance(x, tuple) else x, f.name)


# ------------------------------------------------------------------------------------------ the key table

def rows(cls: type, where: str = "", omit: tuple[str, ...] = ()) -> list[tuple[str, str, str, str]]:
    """(key path, type and what it accepts, default, help) for every key of cls's mapping, nested sections
    expanded (a mapping of sections: its keys as <name>)."""
    hints, out = typing.get_type_hints(cls), []
    for f in declared(cls, omit):
        path, (base, _) = _join(where, f.name), _parts(hints[f.name])
        text = " ".join(f.metadata["help"].split())
        if dataclasses.is_dataclass(base):
            out.append((path, "section", "", text))
            out += rows(base, path, f.metadata.get("omit", ()))
            continue
        item = typing.get_args(base)[-1] if typing.get_origin(base) in (dict, list) else None
        if dataclasses.is_dataclass(item):
            many = typing.get_origin(base) is dict
            out.append((path, "mapping of sections" if many else "list of sections",
                        "required" if f.metadata.get("required") else "{}" if many else "[]", text))
            out += rows(item, f"{path}.<name>" if many else f"{path}[i]", f.metadata.get("omit", ()))
            continue
        shown = "required" if f.metadata.get("required") else repr(_plain(default(f))).replace("None", "null")
        out.append((path, _accepts(hints[f.name], f.metadata), shown, text))
        for k, (h, sub) in (f.metadata.get("keys") or {}).items():
            out.append((f"{path}.{k}", _accepts(h, sub.metadata), "", " ".join(sub.metadata["help"].split())))
    return out


def _accepts(hint, meta) -> str:
    base, nullable = _parts(hint)
    origin = typing.get_origin(base)
    if origin in (list, tuple):
        text = f"list of {_accepts(typing.get_args(base)[0], meta)}"
    elif origin is dict:
        text = "mapping"
    else:
        text = SCALARS[base]
        if meta.get("choices"):
            text = " \\| ".join(map(str, meta["choices"]))
        bounds = [f"{says} {meta[k]:g}" for k, says in (("low", ">="), ("above", ">"), ("high", "<="),
                                                         ("below", "<")) if meta.get(k) is not None]
        text += f" ({', '.join(bounds)})" if bounds else ""
    return text + (" or null" if nullable else "")
