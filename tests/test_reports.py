"""A Bloom filter's fill report in words: one line for the janitor, dedup-info and
the summary alike. No Redis."""

from __future__ import annotations

import json

from scrapy_dedup_suite.reports import FilterFill, LayerFill


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
