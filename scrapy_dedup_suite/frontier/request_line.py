"""The short line: the most common request of a crawl as a line of text (:mod:`.codec`).

A GET of a URL, with a callback name, the depth DepthMiddleware sets, the response's
encoding Request.follow takes and the Referer header RefererMiddleware sets::

    depth callback encoding url [referer]

(depth, callback: may be empty; encoding: empty for utf-8; the referer, when the header
is there, as the length of the start it shares with the URL, a comma, and the rest).
The codec puts the byte 1 before it.
"""

from __future__ import annotations

from typing import Any

#: What a plain request's encoding is (Request.to_dict()'s default).
UTF8 = "utf-8"


def as_line(kept: dict[str, Any]) -> bytes | None:
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
    encoding = kept.get("encoding", UTF8)
    return line(meta.get("depth"), callback, encoding, kept["url"], text)


def line(
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
    coded = "" if encoding == UTF8 else encoding
    text = f"{'' if depth is None else depth} {callback} {coded} {url}"
    if referer is not None:  # the part it shares with the URL (its parent's) as a length
        common = shared(url, referer)
        text += f" {common},{referer[common:]}"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # (a lone surrogate): not a line
        return None


def shared(a: str, b: str) -> int:
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


def from_line(rest: bytes) -> dict[str, Any]:
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
