"""Forgetting fingerprints: every exact backend removes them (the table's rows that
declare ``forget``, single server and cluster), the dupefilter forgets from code, the
Bloom filters refuse in one line, and ``scrapy dedup-forget`` checks every input
before it removes anything."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from scrapy import Request
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import HashBackend, build_backend
from scrapy_dedup_suite.backends.expiry import BY_SERVER
from scrapy_dedup_suite.backends.keys import failed_key
from scrapy_dedup_suite.core.fingerprint import scrapy_redis_fingerprint
from scrapy_dedup_suite.dupefilter import RFPDupeFilter
from scrapy_dedup_suite.exceptions import DedupConfigError, WrongKeyTypeError
from scrapy_dedup_suite.server.connection import server_time_ms

from .helpers import ROOT, all_keys, fingerprints

ON_CLUSTER = True  # every test that uses the server also runs on the cluster


def test_forgotten_fingerprints_are_new_again_and_the_others_stay_seen(make_backend):
    backend = make_backend()
    backend.open()
    if not backend.capabilities.forget:
        assert backend.capabilities.probabilistic  # (only a Bloom filter cannot forget)
        pytest.skip(f"{backend.name} is a Bloom filter, which cannot forget: see the refusal test")
    fps = fingerprints(2500)
    assert backend.add_many(fps) == 2500
    never = fingerprints(10, salt="never recorded")
    assert backend.forget_many([*fps[:1000], *never]) == 1000
    assert backend.forget_many(fps[:1000]) == 0  # (forgetting twice does no harm)
    assert backend.contains_many(fps) == [False] * 1000 + [True] * 1500
    assert backend.check_and_add_many(fps) == [False] * 1000 + [True] * 1500


def test_the_first_hash_layout_forgets_too(server):
    backend = HashBackend(server, "t:dedup", shards=4)
    backend.open()
    fps = fingerprints(300)
    backend.add_many(fps)
    assert backend.forget_many(fps[:100]) == 100
    assert backend.contains_many(fps) == [False] * 100 + [True] * 200


def test_the_dupefilter_forgets_a_request_and_its_local_cache_does_too(server, redis_settings):
    settings = Settings({**redis_settings, "DEDUP_BACKEND": "set"})
    backend = build_backend(settings, "s", server=server)
    df = RFPDupeFilter(backend, settings=settings, local_cache=100)
    assert df.known is not None
    df.open()
    page, other = Request("https://example.com/a"), Request("https://example.com/b")
    assert df.request_seen(page) is False
    assert df.request_seen(other) is False
    assert df.request_seen(page) is True  # answered by the local cache
    assert df.forget(page, Request("https://example.com/never")) == 1
    assert df.request_seen(page) is False  # new again, in Redis and in this process
    assert df.request_seen(other) is True


@pytest.mark.parametrize(
    ("backend", "says"),
    [("bloom", "dont_filter=True"), ("windowed-bloom", "leaves the window")],
)
def test_a_bloom_filter_refuses_to_forget_in_one_line(server, redis_settings, backend, says):
    settings = Settings({**redis_settings, "DEDUP_BACKEND": backend})
    df = RFPDupeFilter(build_backend(settings, "s", server=server), settings=settings)
    df.open()
    page = Request("https://example.com/a")
    df.request_seen(page)
    with pytest.raises(DedupConfigError) as raised:
        df.forget(page)
    message = str(raised.value)
    assert "cannot remove a fingerprint" in message and says in message
    assert "\n" not in message
    assert df.request_seen(page) is True  # nothing changed


def test_a_key_of_another_type_is_an_error_and_is_kept(server, redis_settings):
    settings = Settings({**redis_settings, "DEDUP_BACKEND": "set"})
    backend = build_backend(settings, "s", server=server)
    server.set(backend.key, "not a set")
    df = RFPDupeFilter(backend, settings=settings)
    with pytest.raises(WrongKeyTypeError):
        df.forget(Request("https://example.com/a"))
    assert server.get(backend.key) == b"not a set"


# -- the command --------------------------------------------------------------------------


def forget_command(*args: str, stdin: str = "", settings: dict | None = None):
    options = [f"--set={name}={value}" for name, value in (settings or {}).items()]
    return subprocess.run(
        [sys.executable, "-m", "scrapy.cmdline", "dedup-forget", *options, *args],
        cwd=ROOT / "tests",  # (no scrapy.cfg: outside a project)
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def recorded(server, key: str, urls: list[str]) -> list[bool]:
    return [bool(server.sismember(key, scrapy_redis_fingerprint(Request(url)))) for url in urls]


@pytest.mark.single_server
def test_the_command_forgets_urls_from_arguments_and_standard_input(server, redis_url):
    urls = [f"https://example.com/{n}" for n in range(5)]
    server.sadd("site:dupefilter", *(scrapy_redis_fingerprint(Request(u)) for u in urls))
    done = forget_command(
        "--spider", "site", urls[0], "--file", "-",
        stdin=f"# failed yesterday\n{urls[1]}\n\n{urls[2]}\nhttps://example.com/never\n",
        settings={"REDIS_URL": redis_url},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "forgot 3 of 4 page(s) at 'site:dupefilter'" in done.stdout
    assert recorded(server, "site:dupefilter", urls) == [False, False, False, True, True]


@pytest.mark.single_server
def test_the_commands_bad_inputs_are_one_line_each_and_remove_nothing(server, redis_url, tmp_path):
    urls = [f"https://example.com/{n}" for n in range(3)]
    server.sadd("site:dupefilter", *(scrapy_redis_fingerprint(Request(u)) for u in urls))
    listing = tmp_path / "urls.txt"
    listing.write_text(f"{urls[0]}\nnot a url\nftp://example.com/x\n{urls[1]}\n")
    where = {"REDIS_URL": redis_url}
    cases = {
        "junk lines": (["--spider", "site", "--file", str(listing)], where, 2, "not http(s) URLs"),
        "no URL": (["--spider", "site"], where, 2, "Give the URLs to forget"),
        "no spider": ([urls[0]], where, 2, "--spider NAME, or --key KEY"),
        "a file that is not there": (
            ["--spider", "site", "--file", str(tmp_path / "missing.txt")],
            where,
            2,
            "Cannot read the URL list",
        ),
        "a Bloom filter": (
            ["--spider", "site", urls[0]],
            {**where, "DEDUP_BACKEND": "bloom"},
            1,
            "cannot remove a fingerprint",
        ),
        "a key that holds nothing": (
            ["--key", "other:dupefilter", urls[0]],
            where,
            1,
            "holds nothing",
        ),
        "Redis unreachable": (
            ["--spider", "site", urls[0]],
            {"REDIS_URL": "redis://127.0.0.1:1"},
            6,
            "127.0.0.1:1",
        ),
    }
    for case, (args, settings, code, says) in cases.items():
        done = forget_command(*args, settings=settings)
        assert done.returncode == code, (case, done.stderr)
        said = [line for line in done.stderr.splitlines() if line.strip()]
        assert says in said[-1], (case, done.stderr)
        assert recorded(server, "site:dupefilter", urls) == [True] * 3, case
    assert sorted(all_keys(server)) == [b"site:dupefilter"]


def test_clear_deletes_the_record_of_failed_pages_and_keeps_a_key_of_another_type(
    server, redis_settings
):
    settings = Settings({**redis_settings, "DEDUP_BACKEND": "compact"})
    df = RFPDupeFilter(build_backend(settings, "s", server=server), settings=settings)
    df.open()
    df.request_seen(Request("https://example.com/a"))
    record = failed_key(df.backend.key)
    server.hset(record, "fp", "https://example.com/a")
    df.clear()
    assert all_keys(server) == []
    server.set(record, "not a hash")
    with pytest.raises(WrongKeyTypeError):
        df.clear()
    assert server.get(record) == b"not a hash"


def remaining_ms(backend, fingerprint: str) -> int:
    """How long ``fingerprint`` stays seen on a hash filter, by the server's clock."""
    (key,), (field, *_) = backend.layout.contains_call(fingerprint, None)
    if backend.expiry is BY_SERVER:
        return int(backend.server.execute_command("HPTTL", key, "FIELDS", 1, field)[0])
    expiry = int(backend.server.hget(key, field)) * backend.expiry_unit_ms
    return expiry - server_time_ms(backend.server)


@pytest.mark.parametrize("layout", ["buckets", "shards"])
def test_a_failed_page_on_hash_stays_seen_for_a_short_expiry_only(server, redis_settings, layout):
    """DEDUP_FAILED_EXPIRE: within the run, a page that failed for good on a hash filter
    stays seen (no storm at every link to it) for that long, not DEDUP_EXPIRE."""
    settings = Settings({**redis_settings, "DEDUP_BACKEND": "hash", "DEDUP_EXPIRE": 86400})
    if layout == "shards":
        backend: Any = HashBackend(server, "s:dupefilter", expire=86400, shards=4)
    else:
        backend = build_backend(settings, "s", server=server)
    df = RFPDupeFilter(backend, settings=settings)
    df.open()
    page, other = Request("https://example.com/failed"), Request("https://example.com/ok")
    assert df.request_seen(page) is False
    assert df.request_seen(other) is False
    fp = df.fingerprint_of(page)
    assert remaining_ms(df.backend, fp) > 3_600_000  # a day
    df.forgetting.expire_failed = 60.0
    df.forgetting.failed_for_good(page, "http_503")
    assert 0 < remaining_ms(df.backend, fp) <= 61_000
    assert remaining_ms(df.backend, df.fingerprint_of(other)) > 3_600_000
    assert df.request_seen(page) is True  # still seen, for the minute
