"""Settings as the command line gives them (strings) are read as a settings.py would."""

from __future__ import annotations

import pytest
from scrapy.settings import Settings

from scrapy_dedup_suite.core.config import check_int
from scrapy_dedup_suite.exceptions import DedupConfigError
from scrapy_dedup_suite.settings.options import BloomOptions


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
