"""Settings as the command line gives them (strings) are read as a settings.py would."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from scrapy_dedup_suite.core.config import check_int
from scrapy_dedup_suite.exceptions import DedupConfigError
from scrapy_dedup_suite.settings.options import BloomOptions
from scrapy_dedup_suite.settings.table import read


@pytest.mark.parametrize(
    ("text", "number"), [("1e6", 1_000_000), ("1_000_000", 1_000_000), (" 2.0E3 ", 2000)]
)
def test_a_whole_number_written_as_a_float_is_accepted(text, number):
    assert check_int("DEDUP_BLOOM_CAPACITY", text, minimum=1) == number


@pytest.mark.parametrize("text", ["1.5e0", "1e-3", "ten", "", "nan", "inf"])
def test_what_is_not_a_whole_number_is_refused(text):
    with pytest.raises(DedupConfigError, match="DEDUP_BLOOM_CAPACITY must be"):
        check_int("DEDUP_BLOOM_CAPACITY", text, minimum=1)


def test_capacity_from_the_command_line():
    given = BloomOptions.from_settings(Settings({"DEDUP_BLOOM_CAPACITY": "1e6"}))
    written = BloomOptions.from_settings(Settings({"DEDUP_BLOOM_CAPACITY": 1_000_000}))
    assert given.params == written.params


@pytest.mark.parametrize(("text", "groups"), [("auto", None), ("None", None), ("8", 8)])
def test_the_groups_are_a_number_or_unset_for_the_filter_s_own(text, groups):
    assert read(Settings({"DEDUP_HASH_SHARDS": text}), "DEDUP_HASH_SHARDS") == groups


@pytest.mark.parametrize("text", ["0", "many", "4097"])
def test_groups_that_are_no_number_of_them_are_refused_naming_what_is_accepted(text):
    with pytest.raises(DedupConfigError) as info:
        read(Settings({"DEDUP_HASH_SHARDS": text}), "DEDUP_HASH_SHARDS")
    said = str(info.value)
    assert "from 1 to 4,096" in said and "or None for the filter's own" in said
    assert read(Settings({"DEDUP_HASH_SHARDS": None}), "DEDUP_HASH_SHARDS") is None  # (advice)
