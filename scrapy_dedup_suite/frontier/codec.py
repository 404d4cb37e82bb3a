"""Requests in a compact encoding, for a queue kept in Redis.

scrapy-redis stores each request as a pickle of ``request.to_dict()``: every field,
defaults included (about 250 bytes for a 60-character URL before Redis's own overhead).
Here only what differs from a plain ``Request``'s defaults is kept, and the most common
request of a crawl (a GET of a URL, with a callback name, the depth DepthMiddleware
sets and the Referer header RefererMiddleware sets) is a short line of text::

    b"\\x01" + depth + b" " + callback + b" " + encoding + b" " + url [+ b" " + referer]
    (depth, callback: may be empty; encoding: empty for utf-8, else the one
    Request.follow took from the response; the referer, when the header is there, as
    the length of the start it shares with the URL, a comma, and the rest)

Anything else is ``b"\\x02"`` and the serializer's encoding of the fields that differ
(pickle by default; SCHEDULER_SERIALIZER, a module with ``loads`` and ``dumps`` as
scrapy-redis takes it, for a project that needs its own). Decoding restores the defaults
and rebuilds the request as Scrapy's own disk queues do (``request_from_dict``): its
class (FormRequest, JsonRequest...), callback and errback by name on the spider, meta,
cb_kwargs, headers, cookies, body, flags, priority. A request that cannot be stored (a
callback that is not a spider method, a meta value that cannot be serialized) is a
:class:`RequestEncodingError` naming it, never a silent drop.
"""

from __future__ import annotations

import importlib
import pickle
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import Request as PlainRequest
from scrapy.utils.request import request_from_dict

from ..exceptions import DedupConfigError, DedupError

if TYPE_CHECKING:
    from scrapy import Request, Spider

#: What ``Request.to_dict()`` says of a plain ``Request(url)``: left out of an encoding.
DEFAULTS: dict[str, Any] = {
    "callback": None,
    "errback": None,
    "headers": {},
    "body": b"",
    "cookies": {},
    "meta": {},
    "encoding": "utf-8",
    "flags": [],
    "cb_kwargs": {},
    "dont_filter": False,
    "method": "GET",
    "priority": 0,
}

#: The first byte of each encoding.
LINE, SERIALIZED = b"\x01", b"\x02"


class RequestEncodingError(DedupError):
    """A request that cannot be stored in the queue, or an entry that cannot be read."""


class Serializer(Protocol):
    def dumps(self, obj: Any) -> bytes | str: ...

    def loads(self, data: bytes) -> Any: ...


class PickleSerializer:
    """The default: pickle at its highest protocol (as scrapy-redis's picklecompat)."""

    @staticmethod
    def dumps(obj: Any) -> bytes:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    @staticmethod
    def loads(data: bytes) -> Any:
        return pickle.loads(data)


class RequestCodec:
    """Encodes requests for ``spider`` (callbacks by name) with ``serializer``."""

    def __init__(self, spider: Spider | None = None, serializer: Serializer | None = None):
        self.spider = spider
        self.serializer: Serializer = serializer or PickleSerializer()

    def encode(self, request: Request, priority_apart: bool = False) -> bytes:
        """``request`` as stored; ``priority_apart``: without its priority, which the
        queue keeps beside it (give it back to :meth:`decode`)."""
        line = self._quick_line(request, priority_apart)
        if line is not None:
            return line
        try:
            fields = request.to_dict(spider=self.spider)
        except ValueError as exc:  # a callback or errback that is not a spider method
            raise RequestEncodingError(
                f"Cannot queue {request!r} in Redis: {exc}. Give a method of the spider as "
                "callback and errback (a lambda or another function cannot be stored, as "
                "with Scrapy's own disk queues)"
            ) from None
        kept = {k: v for k, v in fields.items() if k not in DEFAULTS or v != DEFAULTS[k]}
        if priority_apart:
            kept.pop("priority", None)
        line = _as_line(kept)
        if line is not None:
            return line
        try:
            data = self.serializer.dumps(kept)
        except Exception as exc:  # pickle raises several kinds; a project's serializer any
            raise RequestEncodingError(
                f"Cannot queue {request!r} in Redis: {sorted(kept)} cannot be serialized "
                f"({type(exc).__name__}: {exc}). Keep values that cannot be pickled out of "
                "meta and cb_kwargs, or set SCHEDULER_SERIALIZER to a module that can"
            ) from None
        return SERIALIZED + (data.encode("utf-8") if isinstance(data, str) else data)

    def _quick_line(self, request: Request, priority_apart: bool) -> bytes | None:
        """The short line of a plain request, read off it without ``to_dict()`` (which a
        crawl would pay for every link, seen or new); None when it may be anything else
        (then :meth:`encode` asks ``to_dict()``, and gives the same line if it is one)."""
        if (
            type(request) is not PlainRequest
            or request.method != "GET"
            or request.body
            or request.errback is not None
            or request.cb_kwargs
            or request.flags
            or request.cookies
            or request.dont_filter
            or (request.priority and not priority_apart)
        ):
            return None
        callback = request.callback
        name = ""
        if callback is not None:
            func = getattr(callback, "__func__", None)
            if getattr(callback, "__self__", None) is not self.spider or func is None:
                return None
            name = func.__name__
            if getattr(self.spider, name, None) != callback:
                return None
        headers = request.headers
        referer = None
        if headers:
            if len(headers) != 1 or b"Referer" not in headers:
                return None
            values = headers.getlist(b"Referer")
            if len(values) != 1:
                return None
            referer = values[0].decode("latin-1")
        meta = request.meta
        depth = meta.get("depth")
        if len(meta) > (depth is not None) or (depth is not None and type(depth) is not int):
            return None
        return _line(depth, name, request.encoding, request.url, referer)

    def fields(self, data: bytes, priority: int | None = None) -> dict[str, Any]:
        """What ``Request.to_dict()`` said of the request ``data`` holds (callbacks by
        name), without rebuilding it (``priority``: the one kept beside it)."""
        kind, rest = data[:1], data[1:]
        try:
            if kind == LINE:
                kept = _from_line(rest)
            elif kind == SERIALIZED:
                kept = self.serializer.loads(rest)
            else:
                raise ValueError(f"it starts with {kind!r}, not a request of this queue")
        except Exception as exc:  # (whatever a damaged or foreign entry makes fail)
            raise RequestEncodingError(
                f"A queued request could not be read ({type(exc).__name__}: {exc}): {data[:120]!r}"
            ) from None
        if priority is not None:
            kept = {**kept, "priority": priority}
        return {**DEFAULTS, **kept}

    def decode(self, data: bytes, priority: int | None = None) -> Request:
        """The request ``data`` holds (``priority``: the one kept beside it)."""
        fields = self.fields(data, priority)
        try:
            return request_from_dict(fields, spider=self.spider)
        except Exception as exc:  # (a callback the spider lacks, a class gone...)
            raise RequestEncodingError(
                f"A queued request could not be rebuilt ({type(exc).__name__}: {exc}): "
                f"{data[:120]!r}"
            ) from None


def serializer(value: Any) -> Serializer | None:
    """SCHEDULER_SERIALIZER as scrapy-redis takes it: a module (or its dotted path) with
    ``dumps`` and ``loads``; None for pickle."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = importlib.import_module(value)
        except ImportError as exc:
            raise DedupConfigError(
                f"SCHEDULER_SERIALIZER = {value!r} cannot be imported ({exc}); give the dotted "
                "path of a module with dumps() and loads(), or leave it unset for pickle"
            ) from None
    if not callable(getattr(value, "dumps", None)) or not callable(getattr(value, "loads", None)):
        raise DedupConfigError(
            f"SCHEDULER_SERIALIZER must be a module with dumps() and loads() (such as 'json' or "
            f"'pickle'), got {value!r}"
        )
    return value  # type: ignore[no-any-return]


def _as_line(kept: dict[str, Any]) -> bytes | None:
    """``kept`` as the short line, if it is a GET with at most a callback name, a depth
    and a Referer header (what Scrapy's RefererMiddleware gives every link); else None."""
    callback = kept.get("callback") or ""
    meta = kept.get("meta", {})
    headers = kept.get("headers", {})
    referer = headers.get(b"Referer")
    if (
        set(kept) - {"url", "callback", "meta", "headers", "encoding"}
        or set(meta) - {"depth"}
        or set(headers) - {b"Referer"}
        or (referer is not None and (len(referer) != 1 or not isinstance(referer[0], bytes)))
        or (meta.get("depth") is not None and type(meta["depth"]) is not int)
        or not isinstance(callback, str)
    ):
        return None
    text = None if referer is None else referer[0].decode("latin-1")
    encoding = kept.get("encoding", DEFAULTS["encoding"])
    return _line(meta.get("depth"), callback, encoding, kept["url"], text)


def _line(
    depth: int | None, callback: str, encoding: str, url: str, referer: str | None
) -> bytes | None:
    """``depth callback encoding url [referer]`` (the encoding empty for utf-8, which
    Request.follow makes the response's); None when a part could not be read back (a
    space in one, a negative depth)."""
    if (
        (depth is not None and depth < 0)
        or " " in callback
        or not isinstance(encoding, str)
        or " " in encoding
        or " " in url
        or (referer is not None and (" " in referer or not referer))
    ):
        return None
    coded = "" if encoding == DEFAULTS["encoding"] else encoding
    text = f"{'' if depth is None else depth} {callback} {coded} {url}"
    if referer is not None:  # the part it shares with the URL (its parent's) as a length
        shared = _shared(url, referer)
        text += f" {shared},{referer[shared:]}"
    try:
        return LINE + text.encode("utf-8")
    except UnicodeEncodeError:  # (a lone surrogate): the serializer keeps it
        return None


def _shared(a: str, b: str) -> int:
    """The length of the longest prefix ``a`` and ``b`` share (by halving: slices are
    compared in C, where os.path.commonprefix loops over characters in Python)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def _from_line(rest: bytes) -> dict[str, Any]:
    depth, callback, encoding, url, *referer = rest.decode("utf-8").split(" ", 4)
    kept: dict[str, Any] = {"url": url}
    if encoding:
        kept["encoding"] = encoding
    if callback:
        kept["callback"] = callback
    if depth:
        kept["meta"] = {"depth": int(depth)}
    if referer:
        shared, _, tail = referer[0].partition(",")
        value = url[: int(shared)] + tail
        kept["headers"] = {b"Referer": [value.encode("latin-1")]}
    return kept
