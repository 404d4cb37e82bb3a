"""What the dupefilter tells an operator at start-up and as a crawl ages: texts only,
built from what Redis holds, so that ``dedup-info`` can say the same."""

from __future__ import annotations

from typing import Any

from ..backends import MIGRATION_SOURCE, MIGRATION_TARGETS, find_other_filters


def other_filters_warning(
    server: Any, others: dict[str, str], chosen: str, key: str, spider: str
) -> str | None:
    """When the ``chosen`` filter at ``key`` holds nothing: if another backend holds
    this spider's fingerprints (``others``: backend -> key), what the crawl would lose
    (every page they recorded is fetched again) and how to keep them; else None."""
    found = find_other_filters(server, others, chosen)
    if not found:
        return None
    advice = []
    for name, _key, _what in found:
        if name == MIGRATION_SOURCE and chosen in MIGRATION_TARGETS:
            advice.append(
                f"convert the set with `scrapy migrate-set-to-bloom --spider {spider} --to "
                f"{chosen}`, or set DEDUP_BACKEND = 'set' to go on with it"
            )
        else:
            advice.append(f"set DEDUP_BACKEND = {name!r} to go on with it")
    return (
        f"The {chosen} dupefilter at {key!r} holds nothing yet, but this spider's fingerprints "
        f"are elsewhere: {'; '.join(what for _, _, what in found)}. This crawl does not see "
        f"them, so it fetches every page they recorded again. To keep them: "
        f"{'; or '.join(dict.fromkeys(advice))}."
    )


def age_warning(expire: float) -> str:
    """Said once, when a crawl has run longer than its filter's expiry."""
    return (
        f"This crawl has run longer than DEDUP_EXPIRE ({expire:g} s): the fingerprints it "
        "recorded first have expired, so their pages count as new again, and a site whose "
        "pages link to each other is crawled again and again. Raise DEDUP_EXPIRE above the "
        "crawl's length (or use request.meta['dedup_expire'] for the pages that should come "
        "back sooner)."
    )
