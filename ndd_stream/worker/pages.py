"""The worker's web pages, served by Faust's web server: ``/metrics`` and ``/health``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import faust

from ndd_stream.worker.delivery import StallWatch
from ndd_stream.worker.metrics import WorkerMetrics


def add_pages(app: faust.App, metrics: WorkerMetrics, stall: StallWatch,
              deciders: Mapping[int, Any], shards: Mapping[int, Any]) -> None:
    """``/metrics`` (Prometheus) and ``/health`` (503 while the fetch is stalled) on
    ``app``; ``deciders`` and ``shards``: the pools' open partitions (live mappings)."""

    async def metrics_page(web: Any, request: Any) -> Any:
        return web.bytes(metrics.render(), content_type="text/plain; version=0.0.4")

    async def health_page(web: Any, request: Any) -> Any:
        problem = stall.problem()
        return web.json({"status": problem or "ok", "partitions": sorted(deciders),
                         "shards": sorted(shards),
                         "window_documents": sum(d.window_documents() for d in [
                             *deciders.values(), *shards.values()])},
                        status=503 if problem else 200)

    # Faust binds a page's handler to its view (the ``web`` argument): plain functions
    app.page("/metrics")(_page(metrics_page))
    app.page("/health")(_page(health_page))


def _page(handler: Callable[[Any, Any], Awaitable[Any]]
          ) -> Callable[[Any, Any], Awaitable[Any]]:
    """A page handler Faust can bind to its view: a function, not a bound method."""
    async def page(web: Any, request: Any) -> Any:
        return await handler(web, request)
    return page
