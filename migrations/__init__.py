"""Data migrations of scrapy_dedup_suite: converting what scrapy-redis stored.

- :mod:`scrapy_dedup_suite.migrations.set_to_bloom`: a scrapy-redis fingerprint set into the bits
  of a ``bloom`` or ``windowed-bloom`` filter (``scrapy migrate-set-to-bloom``).
"""
