"""The frontier: the crawl's queue of requests in Redis (in progress: the request
encoding is here; the scheduler that uses it comes next)."""
