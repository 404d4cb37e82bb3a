"""Requests in a compact encoding, for a queue kept in Redis.

scrapy-redis stores each request as a pickle of ``request.to_dict()``: every field,
defaults included (about 250 bytes for a 60-character URL before Redis's own overhead).
Here only what differs from a plain ``Request``'s defaults is kept, and the most common
request of a crawl (a GET of a URL, with a callback name, the depth DepthMiddleware
sets and the Referer header RefererMiddleware sets) is ``b"\\x01"`` and a short line of
text (:mod:`.request_line`).

Anything else is ``b"\\x04"`` and its fields as data only (:mod:`.request_data`: JSON,
read back without running anything), or with SCHEDULER_SERIALIZER (a module with
``loads`` and ``dumps`` as scrapy-redis takes it, ``"pickle"`` for pickle) ``b"\\x02"``
and that serializer's encoding. Pickle runs whatever its bytes ask, so whoever can
write to the queue's keys could run code on every worker: the frontier writes it only
when the project names it, and reads it (an older version's entries, scrapy-redis's
queue taken over) only with FRONTIER_READ_PICKLE.

Decoding restores the defaults and rebuilds the request as Scrapy's own disk queues
do: its class by name among Scrapy's Request classes and FRONTIER_REQUEST_CLASSES
(never imported from a path an entry gives), callback and errback by name among the
spider's methods, meta,
cb_kwargs, headers, cookies, body, flags, priority. A request that cannot be stored (a
callback that is not a spider method, a meta value that has no data encoding) is a
:class:`RequestEncodingError` naming it and its field when it is enqueued, never a
silent drop; an entry that cannot be read or rebuilt is one too (set aside).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pickle
from typing import TYPE_CHECKING, Any, Protocol

from scrapy import Request
from scrapy.http import FormRequest, JsonRequest, XmlRpcRequest
from scrapy.utils.misc import load_object
from scrapy.utils.request import request_from_dict

from ..exceptions import DedupConfigError, DedupError
from . import request_data, request_line

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from scrapy import Spider

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

#: The first byte of each encoding: the short line, a serializer's, data (JSON).
LINE, SERIALIZED, DATA = b"\x01", b"\x02", b"\x04"

#: Scrapy's own Request classes: the data encoding rebuilds them by name.
SCRAPY_CLASSES: tuple[type[Request], ...] = (Request, FormRequest, JsonRequest, XmlRpcRequest)

#: What a request of a class the queue is not told of says to do.
CLASSES_ADVICE = "add it to FRONTIER_REQUEST_CLASSES (a list of Request subclasses)"

#: What an entry written with pickle, and pickle not allowed, says to do.
PICKLE_ADVICE = (
    "pickle is read only when asked (it runs code from Redis): set FRONTIER_READ_PICKLE = "
    "True for a run if only trusted clients write to this Redis"
)


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
    """Encodes requests for ``spider`` (callbacks by name): as data, or with
    ``serializer`` when the project names one. Entries written with a serializer are
    read with it, or with pickle when ``read_pickle`` (FRONTIER_READ_PICKLE); ``classes``:
    the Request subclasses besides Scrapy's that the data encoding rebuilds."""

    def __init__(
        self,
        spider: Spider | None = None,
        serializer: Serializer | None = None,
        read_pickle: bool = False,
        classes: tuple[type[Request], ...] = (),
    ):
        self.spider = spider
        self.serializer = serializer
        #: What reads the serializer's entries (None: they are set aside).
        self.reader: Serializer | None = serializer or (PickleSerializer() if read_pickle else None)
        self.classes = {class_path(cls): cls for cls in (*SCRAPY_CLASSES, *classes)}

    def say_trust(self) -> None:
        """One WARNING when pickle is written or read: what it lets a writer of Redis do."""
        if is_pickle(self.serializer):
            logger.warning(
                "SCHEDULER_SERIALIZER is pickle: requests that are not a plain GET are pickled "
                "in Redis, and whoever can write to the frontier's keys can run code on every "
                "worker; leave it unset for the data encoding (JSON) unless only trusted "
                "clients reach this Redis"
            )
        elif self.serializer is None and self.reader is not None:
            logger.warning(
                "FRONTIER_READ_PICKLE is on: requests written with pickle (scrapy-redis's "
                "queue, the frontier's before its data encoding) are read, and whoever can "
                "write to those keys can run code on this worker; turn it off once they are read"
            )

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
        for part in ("callback", "errback"):
            if kept.get(part) and self._method(kept[part]) is None:
                raise RequestEncodingError(
                    f"Cannot queue {request!r} in Redis: its {part} {kept[part]!r} is not a "
                    "method of the spider's own (a classmethod or a special method cannot be "
                    "rebuilt by name); give an instance method of the spider"
                )
        line = request_line.as_line(kept)
        if line is not None:
            return LINE + line
        if self.serializer is None:
            return DATA + self._data(request, kept)
        try:
            data = self.serializer.dumps(kept)
        except Exception as exc:  # pickle raises several kinds; a project's serializer any
            raise RequestEncodingError(
                f"Cannot queue {request!r} in Redis: {sorted(kept)} cannot be serialized "
                f"({type(exc).__name__}: {exc}). Keep values that cannot be pickled out of "
                "meta and cb_kwargs, or set SCHEDULER_SERIALIZER to a module that can"
            ) from None
        return SERIALIZED + (data.encode("utf-8") if isinstance(data, str) else data)

    def _data(self, request: Request, kept: dict[str, Any]) -> bytes:
        name = kept.get("_class")
        if name is not None and name not in self.classes:
            raise RequestEncodingError(
                f"Cannot queue {request!r} in Redis: its class {name} is not one the frontier "
                f"rebuilds from Redis; {CLASSES_ADVICE}, or set SCHEDULER_SERIALIZER = 'pickle'"
            )
        try:
            return request_data.dumps(kept)
        except request_data.Unstorable as exc:
            where, what = exc.where, f"a {exc.kind.__module__}.{exc.kind.__qualname__}"
        except Exception as exc:  # (a lone surrogate, a cycle: json's ValueError...)
            where = ", ".join(sorted(kept))
            what = f"what JSON cannot hold ({type(exc).__name__}: {exc})"
        raise RequestEncodingError(
            f"Cannot queue {request!r} in Redis: {where} holds {what}, which the frontier "
            "stores as data only (JSON: dicts, lists, tuples, sets, str, bytes, numbers, "
            "bools, None); keep it out of the request (an id to find it again), or set "
            "SCHEDULER_SERIALIZER = 'pickle' if only trusted clients write to this Redis"
        )

    def _method(self, name: Any) -> Any:
        """The spider's own method ``name`` (a callback an entry names), or None: never
        a special method, a classmethod or another attribute."""
        if (
            self.spider is None
            or not isinstance(name, str)
            or not name.isidentifier()
            or (name.startswith("__") and name.endswith("__"))
        ):
            return None
        method = getattr(self.spider, name, None)
        if not inspect.ismethod(method) or method.__self__ is not self.spider:
            return None
        return method

    def _quick_line(self, request: Request, priority_apart: bool) -> bytes | None:
        """The short line of a plain request, read off it without ``to_dict()`` (which a
        crawl would pay for every link, seen or new); None when it may be anything else
        (then :meth:`encode` asks ``to_dict()``, and gives the same line if it is one)."""
        if (
            type(request) is not Request
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
            if self._method(name) != callback:  # (the rule the decoding rebuilds by)
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
        text = request_line.line(depth, name, request.encoding, request.url, referer)
        return None if text is None else LINE + text

    def fields(self, data: bytes, priority: int | None = None) -> dict[str, Any]:
        """What ``Request.to_dict()`` said of the request ``data`` holds (callbacks by
        name), without rebuilding it (``priority``: the one kept beside it)."""
        kind, rest = data[:1], data[1:]
        if kind == SERIALIZED and self.reader is None:
            raise RequestEncodingError(
                "A queued request was written with pickle (before the data encoding, or with "
                f"SCHEDULER_SERIALIZER = 'pickle') and is not read: {PICKLE_ADVICE}: "
                f"{data[:120]!r}"
            )
        try:
            if kind == LINE:
                kept = request_line.from_line(rest)
            elif kind == DATA:
                kept = request_data.loads(rest)
                name = kept.get("_class")
                if name is not None and name not in self.classes:
                    raise ValueError(f"its class {name!r} is not one to rebuild ({CLASSES_ADVICE})")
            elif kind == SERIALIZED:
                assert self.reader is not None
                kept = self.reader.loads(rest)
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
            if data[:1] == SERIALIZED:  # (the serializer the project named: as Scrapy does)
                return request_from_dict(fields, spider=self.spider)
            return self._rebuild(fields)
        except Exception as exc:  # (a callback the spider lacks, a class gone...)
            raise RequestEncodingError(
                f"A queued request could not be rebuilt ({type(exc).__name__}: {exc}): "
                f"{data[:120]!r}"
            ) from None

    def _rebuild(self, fields: dict[str, Any]) -> Request:
        """``request_from_dict`` without its imports: the class among :attr:`classes`,
        the callbacks among the spider's methods."""
        cls = self.classes[fields["_class"]] if "_class" in fields else Request
        kwargs = {key: value for key, value in fields.items() if key in cls.attributes}
        for part in ("callback", "errback"):
            name = fields.get(part)
            kwargs[part] = self._method(name) if name else None
            if name and kwargs[part] is None:
                raise ValueError(f"its {part} {name!r} is not a method of the spider")
        return cls(**kwargs)


def class_path(cls: type) -> str:
    """The name ``Request.to_dict()`` gives a request's class."""
    return f"{cls.__module__}.{cls.__name__}"


def request_classes(value: Any) -> tuple[type[Request], ...]:
    """FRONTIER_REQUEST_CLASSES: Request subclasses (or their dotted paths; a string
    may list several, comma-separated)."""
    if not value:
        return ()
    items = value.split(",") if isinstance(value, str) else list(value)
    found: list[type[Request]] = []
    for item in items:
        try:
            cls = load_object(item.strip()) if isinstance(item, str) else item
        except (ImportError, NameError, ValueError, AttributeError) as exc:
            raise DedupConfigError(
                f"FRONTIER_REQUEST_CLASSES names {item!r}, which cannot be imported ({exc}); "
                "give the dotted paths of Request subclasses, such as 'myproject.requests.Api'"
            ) from None
        if not (isinstance(cls, type) and issubclass(cls, Request)):
            raise DedupConfigError(
                f"FRONTIER_REQUEST_CLASSES names {item!r}, which is not a subclass of "
                "scrapy.Request; list only Request classes"
            )
        found.append(cls)
    return tuple(found)


def is_pickle(chosen: Serializer | None) -> bool:
    """Whether SCHEDULER_SERIALIZER's ``chosen`` serializer is pickle (or scrapy-redis's
    picklecompat)."""
    return isinstance(chosen, PickleSerializer) or "pickle" in getattr(chosen, "__name__", "")


def serializer(value: Any) -> Serializer | None:
    """SCHEDULER_SERIALIZER as scrapy-redis takes it: a module (or its dotted path) with
    ``dumps`` and ``loads``, ``"pickle"`` for pickle; None for the data encoding."""
    if value is None or value == "":
        return None
    if value == "pickle" or value is pickle:
        return PickleSerializer()
    if isinstance(value, str):
        try:
            value = importlib.import_module(value)
        except ImportError as exc:
            raise DedupConfigError(
                f"SCHEDULER_SERIALIZER = {value!r} cannot be imported ({exc}); give the dotted "
                "path of a module with dumps() and loads(), or leave it unset (data only)"
            ) from None
    if not callable(getattr(value, "dumps", None)) or not callable(getattr(value, "loads", None)):
        raise DedupConfigError(
            f"SCHEDULER_SERIALIZER must be a module with dumps() and loads() (such as 'json' or "
            f"'pickle'), got {value!r}"
        )
    return value  # type: ignore[no-any-return]
