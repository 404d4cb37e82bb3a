"""The frontier: the crawl's queue of requests in Redis, leased and acknowledged
(:mod:`.scheduler`), recorded and enqueued in one call (:mod:`.record`), kept in a
compact encoding (:mod:`.codec`) in runs by priority (:mod:`.queue`)."""
