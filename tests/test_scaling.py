"""Scalable Bloom filters: the error rate holds past the initial capacity, layers grow
exactly once per step under concurrency, other parameters are refused."""

from __future__ import annotations

import logging
import re
from collections import Counter

import pytest
from scrapy.settings import Settings

from scrapy_dedup_suite.backends import BloomBackend, WindowedBloomBackend, build_backend
from scrapy_dedup_suite.core.bloom_math import BloomParams, Scaling
from scrapy_dedup_suite.core.windows import WindowSpec
from scrapy_dedup_suite.exceptions import DedupConfigError, FilterMismatchError
from scrapy_dedup_suite.janitor import Janitor
from scrapy_dedup_suite.operations.migrations import SetMigration
from scrapy_dedup_suite.operations.migrations.writers import LayeredBitsWriter
from scrapy_dedup_suite.settings.options import BloomOptions

from .helpers import REQUESTS, all_keys, crawl, fingerprints, run_crowd, settings_for

ON_CLUSTER = True  # tests that use `server` also run on the three-master cluster

CAPACITY, RATE = 3_000, 0.01


def layer_states(server, bases: list[str]) -> list[tuple[int, int]]:
    out = []
    for base in bases:
        n, count = server.hmget(f"{base}:layers", "n", "count")
        out.append((int(n or 1), int(count or 0)))
    return out


def measured_rate(backend, absent: list[str]) -> float:
    return sum(backend.contains_many(absent)) / len(absent)


@pytest.mark.slow
@pytest.mark.single_server  # arithmetic, not topology (the cluster runs the other tests)
def test_error_rate_holds_at_1_2_4_8_times_the_capacity(server):
    scaling = Scaling(expansion=2)
    scalable = BloomBackend(server, "s:grow", scaling.first_layer(CAPACITY, RATE, 2), scaling)
    fixed = BloomBackend(server, "s:fixed", BloomParams.from_capacity(CAPACITY, RATE, 2))
    scalable.open()
    fixed.open()
    absent = fingerprints(20_000, salt="absent")
    inserted: list[str] = []
    rates = {}
    for times in (1, 2, 4, 8):
        batch = fingerprints(CAPACITY * times - len(inserted), salt=f"x{times}")
        scalable.add_many(batch)
        fixed.add_many(batch)
        inserted += batch
        # Never a false negative, in whichever layer a fingerprint went.
        assert all(scalable.contains_many(inserted))
        rates[times] = (measured_rate(scalable, absent), measured_rate(fixed, absent))
    for times, (ours, _fixed) in rates.items():
        # 20,000 queries: 1.3x the designed rate is more than five standard deviations.
        assert ours <= RATE * 1.3, (times, ours)
    assert rates[2][1] > 5 * RATE  # the fixed filter of the same initial size has lost it
    assert rates[8][1] > 0.5
    # Layers: 8x the capacity with expansion 2 is 1 + 2 + 4 (+ part of 8).
    info = scalable.info()
    assert [x["layer"] for x in info["layers"]] == [0, 1, 2, 3]
    assert info["error_rate"] == pytest.approx(RATE)
    assert sum(x["items"] for x in info["layers"]) == scalable_items(server, scalable)
    assert info["estimated_error_rate"] <= RATE * 1.3


def scalable_items(server, backend) -> int:
    """Fingerprints the layer records count: full layers plus the newest one's count."""
    total = 0
    for n, count in layer_states(server, backend.block_keys):
        total += sum(layer.block_capacity for layer in backend.layers[: n - 1]) + count
    return total


def test_another_crawler_sees_the_layers_added(server):
    scaling = Scaling()
    first = scaling.first_layer(200, 0.001, 1)
    reader = BloomBackend(server, "s:shared", first, scaling)
    reader.open()  # opened before anything grew
    writer = BloomBackend(server, "s:shared", first, scaling)
    writer.open()
    fps = fingerprints(1500)
    writer.add_many(fps)
    assert writer.layers_added >= 2
    assert layer_states(server, writer.block_keys)[0][0] == 1 + writer.layers_added
    assert all(reader.contains_many(fps))
    assert all(reader.check_and_add(fp) for fp in fps[-50:])


def test_concurrent_crawlers_add_exactly_one_layer_per_step(redis_url, topology, server):
    """Four processes cross the layer thresholds at the same moments."""
    settings = {
        "DEDUP_BLOOM_EXPANSION": 2,
        "DEDUP_BLOOM_CAPACITY": 300,
        "DEDUP_BLOOM_ERROR_RATE": 0.0001,
    }
    admitted = run_crowd(redis_url, topology, "bloom", REQUESTS, settings)
    assert max(admitted.values()) == 1
    assert REQUESTS - 3 <= sum(admitted.values()) <= REQUESTS
    same = Settings({**settings, "DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_BLOCKS": 6})
    backend = build_backend(same, "crowd", server=server)
    backend.open()
    per_block = Counter(backend.params.block_of(fp) for fp in admitted)
    for block, (n, count) in enumerate(layer_states(server, backend.block_keys)):
        full = sum(layer.block_capacity for layer in backend.layers[: n - 1])
        # Every admission was counted once, in the layer that was newest then;
        # a layer is added only when the one before is exactly full.
        assert full + count == per_block[block], (block, n, count)
        assert 0 < count <= backend.layers[n - 1].block_capacity
    assert sum(n for n, _ in layer_states(server, backend.block_keys)) > 6  # it did grow


ON = {"DEDUP_BLOOM_SCALING": True}


@pytest.mark.parametrize(
    ("created", "opened", "message"),
    [
        ({"DEDUP_BLOOM_EXPANSION": 2}, {"DEDUP_BLOOM_EXPANSION": 4}, "expansion"),
        (ON, {**ON, "DEDUP_BLOOM_TIGHTENING": 0.8}, "tightening"),
        (ON, {}, "scaling"),
        ({}, ON, "scaling"),
        (ON, {**ON, "DEDUP_BLOOM_ERROR_RATE": 0.01}, "compound_error_rate"),
        (ON, {**ON, "DEDUP_BLOOM_MAX_LAYERS": 3}, "max_layers"),
    ],
)
def test_reopen_with_other_scaling_parameters_is_refused(server, created, opened, message):
    base = {"DEDUP_BACKEND": "bloom", "DEDUP_BLOOM_CAPACITY": 1000}
    first = build_backend(Settings({**base, **created}), "s", server=server)
    first.open()
    first.add_many(fingerprints(100))
    before = {k: server.dump(k) for k in all_keys(server)}
    with pytest.raises(FilterMismatchError, match=message):
        build_backend(Settings({**base, **opened}), "s", server=server).open()
    assert {k: server.dump(k) for k in all_keys(server)} == before


def test_a_scalable_filter_keeps_its_first_layer(server, caplog):
    scaling = Scaling()
    BloomBackend(server, "s:first", scaling.first_layer(5000, 0.001), scaling).open()
    other = BloomBackend(server, "s:first", scaling.first_layer(100, 0.001), scaling)
    with caplog.at_level(logging.INFO, logger="scrapy_dedup_suite.backends.bloom"):
        other.open()
    assert other.params.capacity == 5000
    assert "using the stored one" in caplog.text


def test_past_the_last_layer_it_warns_once_and_keeps_no_false_negative(server, caplog):
    scaling = Scaling(expansion=1, max_layers=2)
    backend = BloomBackend(server, "s:last", scaling.first_layer(100, 0.01), scaling)
    backend.open()
    fps = fingerprints(600)
    with caplog.at_level(logging.WARNING, logger="scrapy_dedup_suite.backends.bloom"):
        backend.add_many(fps)
    assert caplog.text.count("is past its last layer") == 1
    assert all(backend.contains_many(fps))
    info = backend.info()
    assert info["over_capacity"] is True
    report = Janitor(backend).run_pass()
    assert any("past its capacity" in w for w in report.warnings)


def test_janitor_reports_each_layer(server):
    scaling = Scaling()
    backend = BloomBackend(server, "s:jan", scaling.first_layer(500, 0.001, 2), scaling)
    backend.open()
    backend.add_many(fingerprints(2000))
    report = Janitor(backend).run_pass()
    (entry,) = report.filters
    assert [x.layer for x in entry.layers] == [0, 1, 2]
    assert entry.layers[0].fill_ratio == pytest.approx(0.5, abs=0.05)
    assert 0 < entry.layers[2].fill_ratio < 0.5
    assert "scalable filter: about" in report.summary()
    assert re.search(
        r"layer 0 holds [0-9,]+ of 500 items \(\d+% of its bits set\)", report.summary()
    )


def test_windowed_buckets_grow_and_expire_with_their_layers(server):
    scaling = Scaling()
    clock = [1_800_000_000.0]
    backend = WindowedBloomBackend(
        server,
        "s:win",
        scaling.first_layer(200, 0.001, 2),
        # Hour-long buckets on an injected clock: the keys' real TTLs (hours) cannot
        # run out while the test runs, however slow the machine.
        WindowSpec.parse(3600, 2),
        scaling=scaling,
        clock=lambda: clock[0],
    )
    backend.open()
    fps = fingerprints(1000)
    assert backend.add_many(fps) >= 998
    assert backend.layers_added >= 4
    current = [keys[0] for keys in backend.live_keys()]
    layer_keys = [k for base in current for k in backend.layer_keys(base)]
    assert any(server.exists(k) for k in layer_keys[1:])
    # Every key of the bucket carries the bucket's expiry: layers and records too.
    for key in [*current, *(f"{b}:layers" for b in current), *layer_keys]:
        if server.exists(key):
            assert server.pttl(key) > 0, key
    assert backend.info()["buckets"][0]["layers"][1]["items"] > 0
    # A layer that lost its expiry (a restore, say) gets it back from the janitor.
    lost = next(k for k in layer_keys[1:] if server.exists(k))
    server.persist(lost)
    report = Janitor(backend).run_pass()
    assert lost in report.restored_expiry and server.pttl(lost) > 0
    assert report.filters[0].layers
    # The next bucket still sees them; two buckets later they are gone.
    clock[0] += 3600
    assert all(backend.contains_many(fps))
    clock[0] += 3600
    assert not any(backend.contains_many(fps))
    assert backend.check_and_add(fps[0]) is False
    assert backend.clear() > 4
    assert not [k for k in all_keys(server) if k.startswith(b"{s:win")]


def test_migration_into_a_scalable_filter_sizes_its_first_layer(server):
    members = fingerprints(12_000)
    pipe = server.pipeline(transaction=False)
    for i in range(0, len(members), 4000):
        pipe.sadd("src", *members[i : i + 4000])
    pipe.execute()
    scaling = Scaling()
    target = BloomBackend(server, "s:mig", scaling.first_layer(1000, 0.001, 3), scaling)
    report = SetMigration(target, "src", batch=1000, round_size=5000, verify="all").run()
    assert report.migrated == 12_000 and report.verified == 12_000
    # Sized from the source, with room for the members per block to vary: all of
    # them went into the first layer (the bulk path), each block counting its own.
    capacity = target.params.capacity
    assert 12_000 < capacity < 14_000
    states = layer_states(server, target.block_keys)
    assert [n for n, _ in states] == [1, 1, 1]
    per_block = Counter(target.params.block_of(fp) for fp in members)
    assert [count for _, count in states] == [per_block[b] for b in range(3)]
    crawler = BloomBackend(server, "s:mig", scaling.first_layer(1000, 0.001, 3), scaling)
    crawler.open()
    assert crawler.params.capacity == capacity
    assert all(crawler.contains_many(members))
    # A second set into the existing filter grows layers instead of being refused.
    more = fingerprints(15_000, salt="more")
    server.sadd("src2", *more)
    again = SetMigration(crawler, "src2", batch=1000, verify="sample").run()
    assert again.migrated == 15_000
    assert layer_states(server, crawler.block_keys)[0][0] >= 2


class Killed(Exception):
    """Stands for a kill -9 between two blocks of one round's merge."""


def test_a_resumed_migration_counts_each_round_once(server, monkeypatch):
    """Killed after merging some blocks of a round, resumed: the round is merged again
    (bits are idempotent) and its counts are not added a second time."""
    members = fingerprints(12_000, salt="resume")
    server.sadd("src", *members)
    scaling = Scaling()
    target = BloomBackend(server, "s:res", scaling.first_layer(1000, 0.001, 3), scaling)

    merge = LayeredBitsWriter._merge
    merges = []

    def dies_mid_round(self, maps, counts, token):
        # Merge the first block of the second round, then die before the others.
        if len(merges) == 1:
            merge(self, dict(list(maps.items())[:1]), counts, token)
            raise Killed
        merges.append(token)
        merge(self, maps, counts, token)

    with monkeypatch.context() as patch:
        patch.setattr(LayeredBitsWriter, "_merge", dies_mid_round)
        with pytest.raises(Killed):
            SetMigration(target, "src", batch=1000, round_size=5000).run()
    assert server.exists("s:res:migration")
    report = SetMigration(target, "src", batch=1000, round_size=5000, verify="all").run(resume=True)
    assert report.resumed and report.verified == 12_000
    per_block = Counter(target.params.block_of(fp) for fp in members)
    counts = [count for _, count in layer_states(server, target.block_keys)]
    # SSCAN may return a member twice while the set's table is resized, so a count
    # can exceed the truth by a few; the round merged twice would add its whole
    # share for block 0 (about 1,300) a second time.
    for block, count in enumerate(counts):
        assert per_block[block] <= count <= per_block[block] * 1.01, (block, counts)


def test_a_scalable_filter_created_meanwhile_is_not_swamped(server):
    """A crawler creates the scalable filter (first layer: 1,000) between the
    migration's plan and its open: the migration must not pour 6,000 members into
    that layer, or every new request would then look seen."""
    members = fingerprints(6_000, salt="swamp")
    server.sadd("src", *members)
    scaling = Scaling()
    small = scaling.first_layer(1000, 0.001, 2)

    class CrawlerOpensFirst(SetMigration):
        def plan(self):
            plan = super().plan()
            BloomBackend(server, "s:swamp", small, scaling).open()
            return plan

    target = BloomBackend(server, "s:swamp", small, scaling)
    report = CrawlerOpensFirst(target, "src", batch=1000, verify="all").run()
    assert report.verified == 6_000
    crawler = BloomBackend(server, "s:swamp", small, scaling)
    crawler.open()
    assert crawler.params.capacity == 1000
    assert layer_states(server, crawler.block_keys)[0][0] >= 3  # it grew layers
    new = fingerprints(5_000, salt="brand-new")
    assert sum(crawler.check_and_add(fp) for fp in new) < 25  # about 0.1%, not all


def test_settings(server):
    scaling = BloomOptions.scaling_from_settings
    assert scaling(Settings({})) is None
    assert scaling(Settings({"DEDUP_BLOOM_EXPANSION": 4})).expansion == 4
    assert scaling(Settings({"DEDUP_BLOOM_SCALING": "true"})).expansion == 2
    # As `-s NAME=VALUE` passes them: strings.
    given = Settings({"DEDUP_BLOOM_EXPANSION": "3", "DEDUP_BLOOM_TIGHTENING": "0.8"})
    assert scaling(given) == Scaling(expansion=3, tightening=0.8)
    for settings, message in [
        ({"DEDUP_BLOOM_SCALING": False, "DEDUP_BLOOM_EXPANSION": 2}, "Remove one"),
        ({"DEDUP_BLOOM_EXPANSION": 0}, "DEDUP_BLOOM_EXPANSION must be"),
        ({"DEDUP_BLOOM_EXPANSION": "two"}, "DEDUP_BLOOM_EXPANSION must be"),
        ({"DEDUP_BLOOM_SCALING": True, "DEDUP_BLOOM_TIGHTENING": 1}, "DEDUP_BLOOM_TIGHTENING"),
        ({"DEDUP_BLOOM_SCALING": True, "DEDUP_BLOOM_MAX_LAYERS": 0}, "DEDUP_BLOOM_MAX_LAYERS"),
        ({"DEDUP_BLOOM_SCALING": "maybe"}, "DEDUP_BLOOM_SCALING must be True or False"),
        ({"DEDUP_BLOOM_SCALING": True, "BLOOMFILTER_BIT": 20}, "remove BLOOMFILTER_BIT"),
    ]:
        with pytest.raises(DedupConfigError, match=message):
            build_backend(Settings({"DEDUP_BACKEND": "bloom", **settings}), "s", server=server)


@pytest.mark.single_server
@pytest.mark.parametrize("backend", ["bloom", "windowed-bloom"])
def test_crawl_past_the_initial_capacity(tmp_path, site, redis_server, redis_settings, server,
                                         backend):  # fmt: skip
    settings = settings_for(
        redis_settings, backend, "scrapy", redis_server.url,
        DEDUP_BLOOM_EXPANSION=2, DEDUP_BLOOM_CAPACITY=20, DEDUP_BLOOM_BLOCKS=1,
        DEDUP_BLOOM_ERROR_RATE=1e-6,
    )  # fmt: skip
    result = crawl(tmp_path, site, settings)
    stats = result["stats"]
    crawled = stats["downloader/response_status_count/200"]
    # Layers of a few hundred bits are where double hashing is at its worst (docs/backends.md:
    # "Scalable filters"); a page may, rarely, be taken for a duplicate.
    assert site.pages - 2 <= crawled <= site.pages
    assert stats["dedup/added"] == crawled
    assert stats["bloomfilter/filtered"] == stats["dedup/filtered"]
    assert stats["dedup/added"] + stats["dedup/filtered"] <= site.offered()
    assert "added a layer" in result["log"]
    # 200 pages over layers of 20, 40, 80, 160: four layers.
    key = "site:bloomfilter" if backend == "bloom" else "site:windowed-bloom"
    if backend == "bloom":
        assert int(server.hget("{site:bloomfilter:0}:layers", "n")) == 4
    else:
        (layers,) = [k for k in all_keys(server) if k.endswith(b":layers")]
        assert int(server.hget(layers, "n")) == 4
    assert server.hget(f"{key}:meta", "scaling") == b"1"


def test_layer_offsets_are_distinct_and_match_the_reference(server):
    """Scheme dh48p-v1: the script sets exactly the k distinct offsets the Python
    reference computes, in a prime-sized layer."""
    scaling = Scaling()
    first = scaling.first_layer(50, 0.001, 1)
    assert first.scheme == "dh48p-v1"
    backend = BloomBackend(server, "s:ref", first, scaling)
    backend.open()
    for fp in fingerprints(20, salt="ref"):
        server.delete(backend.block_keys[0])
        backend.check_and_add(fp)
        _, offsets = first.positions(fp)
        assert len(set(offsets)) == first.hashes
        data = server.get(backend.block_keys[0])
        got = {i for i in range(first.block_bits) if data[i // 8] & (0x80 >> (i % 8))}
        assert got == set(offsets), fp
