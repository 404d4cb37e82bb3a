"""The dupefilter's backend, held in one place (:class:`BackendHandle`).

The dupefilter, its batch path, its recovery and its forgetting all call the same
backend, and one of them replaces it: a filter converted under a running worker (its
stamps switched to another layout) is opened again as its record now says. The handle
owns that replacement (:meth:`BackendHandle.reopen`); the parts hold the handle and read
:attr:`BackendHandle.current` when they call, so none sets another's attribute.
:class:`HandleAttributes` gives the dupefilter its ``backend``, ``settings`` and
``spider_name`` from the handle, and scrapy-redis's ``server`` and ``key``, which code
written for its RFPDupeFilter reads and sets.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..backends import build_backend
from ..server.connection import failure_text, without_retries

if TYPE_CHECKING:
    from scrapy.settings import BaseSettings

    from ..backends import DedupBackend

logger = logging.getLogger(__name__)


class BackendHandle:
    """The backend in use (:attr:`current`), the settings it was built from and the
    spider it is for (to build it again)."""

    def __init__(self, backend: DedupBackend, settings: BaseSettings | None = None) -> None:
        self.current = backend
        self.settings = settings
        self.spider_name = ""

    def reopen(self) -> bool:
        """Build the backend again from the settings and what the filter's record says
        now (a conversion switched its layout under this worker): whether it changed."""
        old = self.current
        if self.settings is None:
            return False
        try:
            new = build_backend(self.settings, self.spider_name, server=old.server, key=old.key)
            new.open()
        except Exception as exc:
            logger.error(
                "The %s filter at %r refused this worker's layout, and opening it again failed: %s",
                old.name,
                old.key,
                failure_text(exc),
            )
            return False
        if type(new) is type(old):
            return False
        new.server = without_retries(new.server)
        self.current = new
        logger.warning(
            "The filter at %r was converted under this worker (its stamps say another layout): "
            "reopened it as %s and went on; other workers do the same on their next request",
            old.key,
            type(new).__name__,
        )
        return True


class HandleAttributes:
    """The dupefilter's attributes kept in its :class:`BackendHandle` (see the module)."""

    handle: BackendHandle

    @property
    def backend(self) -> DedupBackend:
        return self.handle.current

    @backend.setter
    def backend(self, backend: DedupBackend) -> None:
        self.handle.current = backend

    @property
    def settings(self) -> BaseSettings | None:
        return self.handle.settings

    @property
    def spider_name(self) -> str:
        return self.handle.spider_name

    @spider_name.setter
    def spider_name(self, name: str) -> None:
        self.handle.spider_name = name

    # scrapy-redis's RFPDupeFilter exposes these; code written for it reads and sets them.
    @property
    def server(self) -> Any:
        return self.backend.server

    @server.setter
    def server(self, server: Any) -> None:
        self.backend = self.backend.rebind(server=without_retries(server))

    @property
    def key(self) -> str:
        return self.backend.key

    @key.setter
    def key(self, key: str) -> None:
        self.backend = self.backend.rebind(key=key)
