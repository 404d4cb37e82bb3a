"""Benchmarks of scrapy_dedup_suite (not part of the installed package): ``python -m bench``."""
