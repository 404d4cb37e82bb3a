"""A request's fields as data only: JSON, read back without running anything.

The frontier's default encoding of a request that is not the short line
(:mod:`.codec`): what ``Request.to_dict()`` says of it, as JSON. Reading it back
parses text; nothing in it is imported or called (pickle, scrapy-redis's default,
runs whatever the bytes ask: whoever can write to the queue's keys could run code on
every worker). What JSON has no word for is kept with a tag, a dict of one key:

- bytes: ``{"$b": text}`` when they are UTF-8, else ``{"$x": base64}``;
- a tuple ``{"$t": [...]}``, a set ``{"$s": [...]}``, a frozenset ``{"$f": [...]}``;
- a dict whose keys are not all strings, or that could be read as a tag:
  ``{"$d": [[key, value], ...]}``.

Headers (bytes to lists of bytes) are kept as text, each byte one character
(latin-1: exact both ways). A subclass of one of these types is kept as the type it
extends (lxml's strings in a CrawlSpider's ``link_text``, an IntEnum, a namedtuple, an
OrderedDict), as JSON would. Anything else (an object, an Item, a function) cannot be
stored as data: :class:`Unstorable` names where it is, and the request is refused
when it is enqueued, never dropped later.
"""

from __future__ import annotations

import base64
import json
from typing import Any

#: The tags, and the types kept plainly by JSON.
TAGS = frozenset(("$b", "$x", "$t", "$s", "$f", "$d"))
_PLAIN = (str, int, float, bool, type(None))
_COLLECTIONS: dict[type, str] = {tuple: "$t", set: "$s", frozenset: "$f"}
#: What a value of another type may extend, kept as that type (checked in this order).
_SCALARS: dict[type, Any] = {str: str.__str__, int: int.__int__, float: float.__float__}
_BASES = (*_SCALARS, bytes, list, tuple, set, frozenset, dict)
_BACK: dict[str, Any] = {"$t": tuple, "$s": set, "$f": frozenset}


class Unstorable(ValueError):
    """A value with no data encoding, at ``where`` (such as ``meta['item']``)."""

    def __init__(self, where: str, value: Any):
        super().__init__(where)
        self.where = where
        self.kind = type(value)


def dumps(fields: dict[str, Any]) -> bytes:
    """``fields`` (a request's, as ``to_dict()`` gives them) as JSON text."""
    kept = dict(fields)
    if "headers" in kept:
        kept["headers"] = _headers_as_text(kept["headers"])
    out = {name: _encode(value, name) for name, value in kept.items()}
    return json.dumps(out, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def loads(data: bytes) -> dict[str, Any]:
    """The fields :func:`dumps` wrote (ValueError, TypeError or KeyError for anything
    else: a damaged or foreign entry)."""
    raw = json.loads(data.decode("utf-8"))
    if not isinstance(raw, dict) or not isinstance(raw.get("url"), str):
        raise ValueError("not the fields of a request (no URL)")
    fields = {name: _decode(value) for name, value in raw.items()}
    if "headers" in fields:
        fields["headers"] = _headers_from_text(fields["headers"])
    return fields


def _encode(value: Any, where: str) -> Any:
    kind = type(value)
    if kind in _PLAIN:
        return value
    base = next((b for b in _BASES if isinstance(value, b)), None)
    if base is None:
        raise Unstorable(where, value)
    if base in _SCALARS:  # a subclass (lxml's strings, an IntEnum): the value it extends
        return _SCALARS[base](value)
    if base is bytes:
        try:
            return {"$b": value.decode("utf-8")}
        except UnicodeDecodeError:
            return {"$x": base64.b64encode(value).decode("ascii")}
    if base is list:
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if base in _COLLECTIONS:
        items = value if base is tuple else _sorted(value)
        return {_COLLECTIONS[base]: [_encode(v, f"{where}[{i}]") for i, v in enumerate(items)]}
    if all(type(k) is str for k in value) and not (len(value) == 1 and set(value) <= TAGS):
        return {k: _encode(v, f"{where}[{k!r}]") for k, v in value.items()}
    pairs = [[_encode(k, f"{where} key"), _encode(v, f"{where}[{k!r}]")] for k, v in value.items()]
    return {"$d": pairs}


def _sorted(items: Any) -> list[Any]:
    """A set's members in a stable order where they have one (the same set, the
    same text); else as they come."""
    try:
        return sorted(items)
    except TypeError:
        return list(items)


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if not isinstance(value, dict):
        return value
    if len(value) == 1:
        ((tag, inner),) = value.items()
        if tag == "$b":
            return _text(inner).encode("utf-8")
        if tag == "$x":
            return base64.b64decode(_text(inner), validate=True)
        if tag in _BACK:
            return _BACK[tag](_decode(v) for v in _list(inner))
        if tag == "$d":
            pairs = [_list(pair) for pair in _list(inner)]
            return {_decode(k): _decode(v) for k, v in pairs}
    return {k: _decode(v) for k, v in value.items()}


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a tag holds {type(value).__name__}, not text")
    return value


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"a tag holds {type(value).__name__}, not a list")
    return value


def _headers_as_text(headers: Any) -> Any:
    """``{b"Name": [b"value", ...]}`` as ``{"Name": ["value", ...]}`` (latin-1);
    anything else as it is (then encoded as any value)."""
    if type(headers) is not dict or not all(
        type(k) is bytes and type(vs) is list and all(type(v) is bytes for v in vs)
        for k, vs in headers.items()
    ):
        return headers
    return {k.decode("latin-1"): [v.decode("latin-1") for v in vs] for k, vs in headers.items()}


def _headers_from_text(headers: Any) -> dict[bytes, list[bytes]]:
    if not isinstance(headers, dict):
        raise TypeError("the headers are not a mapping")
    return {_as_bytes(k): [_as_bytes(v) for v in _list(vs)] for k, vs in headers.items()}


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else _text(value).encode("latin-1")
