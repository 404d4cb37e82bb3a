"""The frontier's request encoding: every request comes back as Scrapy's own disk queues
bring it back (its class, callbacks by name, meta, cb_kwargs, headers, cookies, body...),
the common one as a short line, the rest as data (JSON) unless the project names pickle,
and one that cannot be stored is an error naming it. An entry is data: one that is not
what the encoding allows (pickle when pickle is off, a class that is not a Request the
queue may rebuild, a callback that is not the spider's method) is refused, never run.
No Redis: the encoding alone."""

from __future__ import annotations

import json
import pickle

import pytest
import scrapy
from hypothesis import given
from hypothesis import strategies as st
from scrapy.http import FormRequest, JsonRequest

from scrapy_dedup_suite.exceptions import DedupConfigError
from scrapy_dedup_suite.frontier.codec import (
    DATA,
    LINE,
    SERIALIZED,
    PickleSerializer,
    RequestCodec,
    RequestEncodingError,
    request_classes,
    serializer,
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

    @classmethod
    def parse_class(cls, response):
        pass


class ApiRequest(scrapy.Request):
    """A project's own Request class."""


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
        # What JSON has no word for, kept with a tag.
        "data shapes": scrapy.Request(
            URL,
            callback=spider.parse,
            body=bytes(range(256)),
            meta={
                "tuple": (1, "a", (b"b",)),
                "set": {3, 1, 2},
                "frozen": frozenset({"x"}),
                "int keys": {1: "one", (2, 3): b"pair"},
                "looks like a tag": {"$b": "not bytes"},
                "bytes": [b"utf-8 \xc3\xa9", b"\xff\xfe"],
                "numbers": [0, -1, 2**80, 1.5, float("inf"), True, False, None],
                "text": "é \u2603 \x00",
            },
            cb_kwargs={"page": 2, "nested": {"deep": [{"list": []}]}},
            cookies=[{"name": "a", "value": "b", "domain": "example.com"}],
        ),
    }


ALL = ["plain", "callback and depth", "everything", "form", "json", "depth 0"]
ALL += ["non-ASCII URL", "link", "priority", "two headers", "referer with a space"]
ALL += ["followed", "non-ASCII link", "data shapes"]


@pytest.mark.parametrize("chosen", ["data", "pickle"])
@pytest.mark.parametrize("case", [*ALL, "negative depth"])
def test_a_request_comes_back_as_it_went(spider, case, chosen):
    request = requests_of(spider)[case]
    codec = RequestCodec(spider, serializer(None if chosen == "data" else "pickle"))
    data = codec.encode(request)
    back = codec.decode(data)
    assert type(back) is type(request)
    assert back.to_dict(spider=spider) == request.to_dict(spider=spider)
    assert back.callback == request.callback and back.errback == request.errback


def test_the_common_request_is_a_short_line_and_the_rest_is_data(spider):
    codec = RequestCodec(spider)
    made = {case: codec.encode(r) for case, r in requests_of(spider).items()}
    for case in ("plain", "callback and depth", "depth 0", "non-ASCII URL", "link", "followed"):
        assert made[case].startswith(LINE), case
    pickled = RequestCodec(spider, PickleSerializer())
    for case in ("everything", "form", "json", "data shapes"):
        assert made[case].startswith(DATA), case
        assert pickled.encode(requests_of(spider)[case]).startswith(SERIALIZED), case
    # The byte 3 starts what the queue wraps a request given back in (lua/frontier.lua).
    assert {entry[:1] for entry in made.values()} == {LINE, DATA}
    for case in ("everything", "form", "json"):  # (binary bodies grow by a third: base64)
        # smaller than scrapy-redis's pickle of every field of it
        theirs = pickle.dumps(requests_of(spider)[case].to_dict(spider=spider), -1)
        assert len(made[case]) < len(theirs), case
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
        codec.encode(scrapy.Request(URL, meta={"depth": 1, "handle": [1, (x for x in ())]}))
    said = str(raised.value)
    assert "meta['handle'][1] holds a builtins.generator" in said, said
    assert "SCHEDULER_SERIALIZER = 'pickle'" in said and "\n" not in said
    with pytest.raises(RequestEncodingError) as raised:  # the same, pickled
        RequestCodec(spider, PickleSerializer()).encode(
            scrapy.Request(URL, meta={"handle": (x for x in ())})
        )
    said = str(raised.value)
    assert "cannot be serialized" in said and "SCHEDULER_SERIALIZER" in said


def test_a_class_or_callback_the_queue_cannot_rebuild_is_refused_when_enqueued(spider):
    """A request the data encoding could not rebuild is refused when it is enqueued,
    naming what to do, never stored to be set aside later; the advice is accepted."""
    codec = RequestCodec(spider)
    with pytest.raises(RequestEncodingError) as raised:
        codec.encode(ApiRequest(URL, callback=spider.parse))
    said = str(raised.value)
    assert "test_request_codec.ApiRequest" in said and "FRONTIER_REQUEST_CLASSES" in said
    listed = request_classes("tests.test_request_codec.ApiRequest")
    allowed = RequestCodec(spider, classes=listed)
    back = allowed.decode(allowed.encode(ApiRequest(URL, callback=spider.parse)))
    assert type(back) is ApiRequest and back.callback == spider.parse
    with pytest.raises(DedupConfigError, match=r"not a subclass of scrapy\.Request"):
        request_classes(["builtins.dict"])
    with pytest.raises(DedupConfigError, match="cannot be imported"):
        request_classes("tests.nowhere.Api")
    with pytest.raises(RequestEncodingError, match=r"parse_class.*not a method"):
        codec.encode(scrapy.Request(URL, callback=spider.parse_class))
    # A special method of the spider's own is refused on the quick path too (before,
    # it made a short line that the decoding then set aside).
    with pytest.raises(RequestEncodingError, match=r"'__init__' is not a method"):
        codec.encode(scrapy.Request(URL, callback=spider.__init__))


def test_an_entry_that_cannot_be_read_is_an_error_naming_it(spider):
    codec = RequestCodec(spider, read_pickle=True)
    for junk in (b"", b"\x05what", DATA + b"what", SERIALIZED + b"not a pickle", LINE + b"x"):
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
    # Entries written as data before the project named its serializer are still read.
    assert codec.decode(RequestCodec(spider).encode(request)).url == URL
    assert serializer.calls == 2


@given(st.text(alphabet="ab/é", max_size=40), st.text(alphabet="ab/é", max_size=40))
def test_the_part_a_link_shares_with_its_referer_is_the_longest_common_prefix(a, b):
    from os.path import commonprefix

    from scrapy_dedup_suite.frontier.request_line import shared

    assert shared(a, b) == len(commonprefix([a, b]))  # noqa: RUF071 - characters wanted
    assert shared(a, a + b) == len(a)


class WritesAFile:
    """What a hostile pickle holds: unpickled, it creates ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def hostile_entries(tmp_path):
    """Entries another client could write into the queue, each not what the data
    encoding allows."""
    made = tmp_path / "pickle-ran"
    url = json.dumps(URL)
    return made, {
        "pickle": SERIALIZED + pickle.dumps({"url": URL, "meta": {"x": WritesAFile(made)}}),
        "garbage": DATA + b"\x00\xff{not json",
        "not a dict": DATA + b"[1, 2, 3]",
        "no URL": DATA + b'{"callback": "parse"}',
        "a tag that lies": DATA + b'{"url": %s, "body": {"$x": "!!"}}' % url.encode(),
        "deep": DATA + b'{"url": %s, "meta": %s}' % (url.encode(), b"[" * 100_000),
        "class not a Request": DATA + b'{"url": %s, "_class": "os.system"}' % url.encode(),
        "class never imported": DATA
        + b'{"url": %s, "_class": "email.mime.audio.MIMEAudio"}' % url.encode(),
        "callback a special method": DATA + b'{"url": %s, "callback": "__class__"}' % url.encode(),
        "callback a classmethod": DATA + b'{"url": %s, "callback": "from_crawler"}' % url.encode(),
        "callback an attribute": DATA + b'{"url": %s, "callback": "name"}' % url.encode(),
        "callback a staticmethod": DATA + b'{"url": %s, "errback": "close"}' % url.encode(),
        "callback not a name": DATA + b'{"url": %s, "callback": "a.b"}' % url.encode(),
        "callback in a line": LINE + f" __init__  {URL}".encode(),
        "callback a list": DATA + b'{"url": %s, "callback": ["parse"]}' % url.encode(),
    }


def test_an_entry_is_data_never_an_action(spider, tmp_path):
    """Each hostile entry is an error (the scheduler sets it aside with one line),
    never run: the pickle's file never appears, no module is imported, no method
    other than the spider's own is given as a callback."""
    import sys

    made, entries = hostile_entries(tmp_path)
    assert "email.mime.audio" not in sys.modules
    codec = RequestCodec(spider)
    for case, entry in entries.items():
        with pytest.raises(RequestEncodingError) as raised:
            codec.decode(entry, 0)
        assert "\n" not in str(raised.value), case
    assert not made.exists()
    assert "email.mime.audio" not in sys.modules
    with pytest.raises(RequestEncodingError) as raised:
        codec.decode(entries["pickle"])
    said = str(raised.value)
    assert "written with pickle" in said and "FRONTIER_READ_PICKLE = True" in said
    # Pickle read when asked for (FRONTIER_READ_PICKLE): it runs, as it always did.
    RequestCodec(spider, read_pickle=True).decode(entries["pickle"])
    assert made.exists()


def test_pickle_is_named_to_be_used_and_says_what_it_allows(spider, caplog):
    import logging

    assert serializer(None) is None and serializer("") is None
    assert isinstance(serializer("pickle"), PickleSerializer)
    codec = RequestCodec(spider, serializer("pickle"))
    with caplog.at_level(logging.WARNING):
        codec.say_trust()
        RequestCodec(spider).say_trust()  # the default: nothing to say
        RequestCodec(spider, serializer("json")).say_trust()  # a project's own module
    assert len(caplog.records) == 1
    assert "run code on every worker" in caplog.records[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        RequestCodec(spider, read_pickle=True).say_trust()
    assert [r.getMessage() for r in caplog.records if "FRONTIER_READ_PICKLE" in r.getMessage()]


def test_a_subclass_of_a_data_type_is_kept_as_the_type_it_extends(spider):
    """A CrawlSpider's links carry lxml's string class in meta['link_text']; an IntEnum,
    a namedtuple, an OrderedDict are as common: each comes back as the value it extends
    (its __str__ not asked), where a refusal would drop every link of a CrawlSpider."""
    import collections
    import enum

    from scrapy.http import HtmlResponse
    from scrapy.linkextractors import LinkExtractor

    class Level(enum.IntEnum):
        HIGH = 3

    class Shouting(str):
        def __str__(self):
            return "NOT THE VALUE"

    pair = collections.namedtuple("pair", "a b")
    page = HtmlResponse(URL, body=b"<a href='/x'>the text</a>", encoding="utf-8")
    link_text = LinkExtractor().extract_links(page)[0].text
    assert type(link_text) is not str  # (lxml's own)
    meta = {
        "link_text": link_text,
        "level": Level.HIGH,
        "shout": Shouting("value"),
        "pair": pair(1, 2),
        "ordered": collections.OrderedDict(b=1, a=2),
    }
    codec = RequestCodec(spider)
    back = codec.decode(codec.encode(scrapy.Request(URL, callback=spider.parse, meta=meta)))
    assert back.meta == {
        "link_text": "the text", "level": 3, "shout": "value", "pair": (1, 2),
        "ordered": {"b": 1, "a": 2},
    }  # fmt: skip
    assert [type(v) for v in back.meta.values()] == [str, int, str, tuple, dict]
