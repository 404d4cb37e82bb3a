"""The dupefilter (:mod:`.dupefilter`) and its parts: the per-request step, the batch
middleware, recovery, forgetting, counts, failed pages, and the checks of a crawl's
settings. Built on :mod:`..backends`; the frontier and the operations build on it."""
