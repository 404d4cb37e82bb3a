"""The frontier's request encoding: every request comes back as Scrapy's own disk queues
bring it back (its class, callbacks by name, meta, cb_kwargs, headers, cookies, body...),
the common one as a short line, and one that cannot be stored is an error naming it.
No Redis: the encoding alone."""

from __future__ import annotations

import pickle

import pytest
import scrapy
from hypothesis import given
from hypothesis import strategies as st
from scrapy.http import FormRequest, JsonRequest

from scrapy_dedup_suite.frontier.codec import (
    LINE,
    SERIALIZED,
    RequestCodec,
    RequestEncodingError,
)

URL = "https://example.com/catalogue/category/books/travel_2/index.html?page=2"


class Spider(scrapy.Spider):
    name = "codec"

    def parse(self, response):
        pass

    def parse_item(self, response, **kwargs):
        pass

    def on_error(self, failure):
        pass


class Renamed(scrapy.Spider):
    name = "codec"

    def parse(self, response):
        pass


@pytest.fixture
def spider():
    return Spider()


def requests_of(spider):
    return {
        "plain": scrapy.Request(URL),
        "callback and depth": scrapy.Request(URL, callback=spider.parse_item, meta={"depth": 3}),
        "everything": scrapy.Request(
            URL,
            callback=spider.parse_item,
            errback=spider.on_error,
            method="PUT",
            headers={"X-Token": "abc", "Accept": ["a", "b"]},
            body=b"\x00\xff binary",
            cookies={"session": "1"},
            meta={"depth": 1, "nested": [1, {"x": b"y"}], "none": None},
            encoding="latin-1",
            priority=-7,
            dont_filter=True,
            flags=["retried"],
            cb_kwargs={"page": 2},
        ),
        "form": FormRequest(URL, formdata={"q": "travel", "p": "2"}, callback=spider.parse),
        "json": JsonRequest(URL, data={"q": [1, 2]}, callback=spider.parse_item),
        "depth 0": scrapy.Request(URL, meta={"depth": 0}),
        "non-ASCII URL": scrapy.Request("https://example.com/über café?q=ß"),
        # What a link of a crawl is: RefererMiddleware and DepthMiddleware have seen it.
        "link": scrapy.Request(
            URL,
            callback=spider.parse,
            meta={"depth": 2},
            headers={"Referer": URL + "x"},
            encoding="cp1252",  # (Request.follow takes the response's)
        ),
        "priority": scrapy.Request(URL, callback=spider.parse, priority=3),
        "non-ASCII link": scrapy.Request(
            "https://example.com/über/€?q=ß", headers={"Referer": "https://example.com/über/€"}
        ),
        "two headers": scrapy.Request(URL, headers={"Referer": URL, "X-A": "1"}),
        "referer with a space": scrapy.Request(URL, headers={"Referer": "a b"}),
        "negative depth": scrapy.Request(URL, callback=spider.parse, meta={"depth": -1}),
        "followed": scrapy.http.HtmlResponse(URL, body=b"<a href='/x'>x</a>").follow(
            "/x", callback=spider.parse
        ),
    }


ALL = ["plain", "callback and depth", "everything", "form", "json", "depth 0"]
ALL += ["non-ASCII URL", "link", "priority", "two headers", "referer with a space"]
ALL += ["followed", "non-ASCII link"]


@pytest.mark.parametrize("case", [*ALL, "negative depth"])
def test_a_request_comes_back_as_it_went(spider, case):
    request = requests_of(spider)[case]
    codec = RequestCodec(spider)
    data = codec.encode(request)
    back = codec.decode(data)
    assert type(back) is type(request)
    assert back.to_dict(spider=spider) == request.to_dict(spider=spider)
    assert back.callback == request.callback and back.errback == request.errback


def test_the_common_request_is_a_short_line_and_the_rest_is_serialized(spider):
    codec = RequestCodec(spider)
    made = {case: codec.encode(r) for case, r in requests_of(spider).items()}
    for case in ("plain", "callback and depth", "depth 0", "non-ASCII URL", "link", "followed"):
        assert made[case].startswith(LINE), case
    for case in ("everything", "form", "json"):
        assert made[case].startswith(SERIALIZED), case
    line = made["callback and depth"]
    assert line == LINE + f"3 parse_item  {URL}".encode()
    assert made["link"] == LINE + f"2 parse cp1252 {URL} {len(URL)},x".encode()
    # scrapy-redis's entry for the same request: a pickle of every field.
    theirs = pickle.dumps(requests_of(spider)["callback and depth"].to_dict(spider=spider), -1)
    assert len(line) < len(theirs) / 2


@pytest.mark.parametrize("apart", [False, True], ids=["with priority", "priority apart"])
def test_the_quick_line_is_the_line_to_dict_gives(spider, apart):
    """encode() reads a plain request's line off it without to_dict(): byte for byte
    what the general path gives, for every case (and None where that is no line)."""
    quick, general = RequestCodec(spider), RequestCodec(spider)
    general._quick_line = lambda request, priority_apart: None  # type: ignore[method-assign]
    for case, request in requests_of(spider).items():
        assert quick.encode(request, apart) == general.encode(request, apart), case


def test_a_request_that_cannot_be_stored_is_an_error_naming_it(spider):
    codec = RequestCodec(spider)
    with pytest.raises(RequestEncodingError) as raised:
        codec.encode(scrapy.Request(URL, callback=lambda response: None))
    said = str(raised.value)
    assert URL in said and "Give a method of the spider as callback" in said
    assert "\n" not in said
    with pytest.raises(RequestEncodingError) as raised:
        codec.encode(scrapy.Request(URL, meta={"handle": (x for x in ())}))
    said = str(raised.value)
    assert "cannot be serialized" in said and "SCHEDULER_SERIALIZER" in said


def test_an_entry_that_cannot_be_read_is_an_error_naming_it(spider):
    codec = RequestCodec(spider)
    for junk in (b"", b"\x03what", SERIALIZED + b"not a pickle", LINE + b"no-spaces"):
        with pytest.raises(RequestEncodingError, match="could not be read"):
            codec.decode(junk)
    queued = codec.encode(scrapy.Request(URL, callback=spider.parse_item))
    renamed = RequestCodec(Renamed())  # a deploy that renamed the callback
    with pytest.raises(RequestEncodingError, match="parse_item"):
        renamed.decode(queued)


class CountingSerializer:
    """SCHEDULER_SERIALIZER as scrapy-redis takes it: an object with loads and dumps."""

    def __init__(self):
        self.calls = 0

    def dumps(self, obj):
        self.calls += 1
        return pickle.dumps(obj, protocol=2)

    def loads(self, data):
        self.calls += 1
        return pickle.loads(data)


def test_a_projects_serializer_is_used_for_what_is_not_a_line(spider):
    serializer = CountingSerializer()
    codec = RequestCodec(spider, serializer)
    request = requests_of(spider)["everything"]
    back = codec.decode(codec.encode(request))
    assert serializer.calls == 2
    assert back.to_dict(spider=spider) == request.to_dict(spider=spider)


@given(st.text(alphabet="ab/é", max_size=40), st.text(alphabet="ab/é", max_size=40))
def test_the_part_a_link_shares_with_its_referer_is_the_longest_common_prefix(a, b):
    from os.path import commonprefix

    from scrapy_dedup_suite.frontier.codec import _shared

    assert _shared(a, b) == len(commonprefix([a, b]))  # noqa: RUF071 - characters wanted
    assert _shared(a, a + b) == len(a)
