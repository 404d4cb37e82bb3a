"""A Bloom filter's fill report in words: one line for the janitor, dedup-info and
the summary alike. No Redis."""

from __future__ import annotations

import json

from scrapy_dedup_suite.backends.reports import (
    BloomSizing,
    ExpirySample,
    FilterFill,
    FilterInfo,
    Fingerprints,
    HashFields,
    LayerFill,
    ServerFilters,
    TimeWindow,
    as_json,
)


def test_filter_info_is_typed_and_reads_as_the_json_it_prints():
    # What every backend says is read by attribute (the summary, dedup-info); a
    # backend's own figures are details; both read as one mapping, as printed.
    info = FilterInfo("compact", "s:c", 3, 2048, details={"fields": 10, "buckets": 2})
    assert (info.backend, info.key, info.key_count, info.memory_bytes) == (
        "compact",
        "s:c",
        3,
        2048,
    )
    assert info["keys"] == 3 and info["fields"] == 10 and "nodes" not in info
    assert json.loads(json.dumps(dict(info))) == {
        "backend": "compact",
        "key": "s:c",
        "keys": 3,
        "memory_bytes": 2048,
        "fields": 10,
        "buckets": 2,
    }
    on_cluster = FilterInfo("set", "s:s", 1, 90, nodes={"127.0.0.1:7000": 1})
    assert on_cluster["nodes"] == {"127.0.0.1:7000": 1} and len(on_cluster) == 5


def test_a_fixed_filter_in_one_line():
    fill = FilterFill(0.25, 1234.4, 0.0004, False, capacity=10_000, error_rate=0.001)
    assert fill.describe() == (
        "filter: fill 25.00%, about 1,234 items, false-positive rate now 0.0004"
    )
    assert not fill.past_capacity


def test_a_bucket_says_its_label_and_expiry():
    fill = FilterFill(0.5, 10, 0.01, False, 100, 0.001, label="20260310", ttl_ms=7_200_000)
    assert fill.describe().startswith("filter bucket 20260310 (expires in 7,200 s): fill 50.00%")
    # Its false-positive rate passed the designed one: past capacity, and said so.
    assert fill.past_capacity
    warning = fill.warning("s:w")
    assert "'s:w' (bucket 20260310)" in warning and "past its capacity of 100" in warning


def test_a_scalable_filter_lists_its_layers():
    layers = (LayerFill(0, 500, 500, 0.5, 0.0005, 2), LayerFill(1, 1000, 120, 0.07, 1e-6, 2))
    fill = FilterFill(0.5, 620, 0.0005, False, 500, 0.001, layers=layers)
    assert fill.describe() == (
        "scalable filter: about 620 items in 2 layer(s) (layer 0 holds 500 of 500 items "
        "(50% of its bits set), layer 1 holds 120 of 1,000 items (7% of its bits set)), "
        "false-positive rate now 0.0005"
    )


def test_from_a_report_and_back_to_json():
    report = {
        "fill_ratio": 0.1,
        "estimated_items": 5.0,
        "estimated_error_rate": 1e-9,
        "over_capacity": 0,
        "set_bits": 99,
        "layers": [
            {
                "layer": 0,
                "capacity": 50,
                "items": 5,
                "fill_ratio": 0.1,
                "estimated_error_rate": 1e-9,
                "blocks_using": 1,
                "bits": 1000,
            }
        ],
    }
    fill = FilterFill.of(report, 50, 0.001, label="x")
    assert fill.over_capacity is False and fill.layers[0].items == 5 and fill.label == "x"
    assert json.loads(json.dumps(fill.as_dict()))["layers"][0]["capacity"] == 50


def test_what_a_filter_holds_says_itself_and_goes_to_json():
    fields = HashFields(3000, 16, "janitor", 604800.0, ExpirySample(3000, 100, 3600.4))
    assert fields.describe() == [
        "3,000 fields in 16 shard(s) (the janitor purges expired ones)",
        "of 3,000 sampled, 100 expired; the last expires in 3,600 s",
        "each field keeps the expiry it was written with; new ones get 604800 s "
        "(DEDUP_EXPIRE as configured now, or meta['dedup_expire'])",
    ]
    by_server = HashFields(5, 2, "server", 60.0)
    assert "the server frees expired ones itself" in by_server.describe()[0]
    assert len(by_server.describe()) == 2  # no sample to speak of
    assert BloomSizing(1000, 0.001, 2, per_bucket=True).describe() == [
        "capacity 1,000 per bucket at error rate 0.001, 2 block(s)"
    ]
    assert (
        ServerFilters(0, 1, 500)
        .describe()[0]
        .startswith("the server's own Bloom filters (BF.*), NONSCALING: up to 1 sub-filter(s)")
    )
    assert TimeWindow(7, "day", "UTC").describe() == ["7 buckets of one day (UTC)"]
    assert Fingerprints(3).describe() == ["3 fingerprints (exact)"]
    assert json.loads(json.dumps([fields], default=as_json)) == [
        {
            "kind": "HashFields",
            "in_buckets": False,
            "counted": False,
            "fields": 3000,
            "shards": 16,
            "expired_by": "janitor",
            "expire": 604800.0,
            "sample": {"sampled": 3000, "expired": 100, "last_expiry_s": 3600.4},
        }
    ]
