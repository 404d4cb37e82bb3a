"""The lowest layer: code with no Redis and no settings table in it.

Filter maths (:mod:`.bloom_math`, :mod:`.native_math`, :mod:`.windows`), request
fingerprints, the checks behind every setting (:mod:`.config`), the one-line refusals
and daemon threads. Imports only :mod:`scrapy_dedup_suite.exceptions` of the package."""
