"""What runs beside a crawl: the janitor, the closing summary, the migrations, and the
settings docs' generator. Built on :mod:`..dedup` and :mod:`..backends`; the commands
build on it."""
