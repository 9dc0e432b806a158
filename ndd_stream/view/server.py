"""The view's web server (aiohttp, already installed with Faust) and its threads.

``ViewServer.start()`` starts the Kafka follower, the lag probe and the web server on its
own event loop in a background thread, so ``ndd-stream view`` and the demo embed it the
same way. Pages are rendered from copies taken under the state's lock (queries.py).
"""

from __future__ import annotations

import asyncio
import threading
import time
from importlib import resources
from typing import Any

from aiohttp import web

from ndd_stream.core.items import compose_text
from ndd_stream.settings import Settings
from ndd_stream.view import pages, queries, story_pages
from ndd_stream.view.auth import basic_auth
from ndd_stream.view.follow import Follower, LagProbe, fetch_text, output_topics
from ndd_stream.view.guard import add_headers, host_rule
from ndd_stream.view.highlight import mark_pair, unmarked
from ndd_stream.view.html import EMPTY, Html, html
from ndd_stream.view.model import Limits, ViewState
from ndd_stream.view.rings import StoredText
from ndd_stream.view.stories import ORDERS, STORY_SPANS, StoryList, stories, story

STATIC = {"view.css": "text/css", "view.js": "application/javascript"}
HTML = "text/html"


class ViewServer:
    """Follower + lag probe + web server; ``start`` returns once the port listens."""

    def __init__(self, settings: Settings, *, host: str = "127.0.0.1", port: int = 6067,
                 limits: Limits | None = None, from_beginning: bool = False,
                 backfill: int = 500, lag_interval: float = 3.0) -> None:
        self.settings = settings
        self.host = host
        self.port = port
        self.state = ViewState(settings.item_format(), limits or Limits(),
                               rows_from_outputs=not settings.decisions_topic)
        self.follower = Follower(settings, self.state, from_beginning=from_beginning,
                                 backfill=backfill)
        self.probe = LagProbe(settings, self.state, interval=lag_interval)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._footer = pages.footer(sorted(output_topics(settings)), settings.app_id,
                                    self.state.started)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}/"

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> str:
        """Start everything; the page's URL. Raises OSError if the port cannot be bound."""
        ready = threading.Event()
        failure: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                loop.run_until_complete(self._serve())
            except BaseException as exc:  # reported to start(): bind errors and the like
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._shutdown())
            loop.close()

        self._thread = threading.Thread(target=main, name="view-web", daemon=True)
        self._thread.start()
        if not ready.wait(timeout):
            raise OSError(f"the view did not start listening within {timeout:g} s")
        if failure:
            raise OSError(f"the view cannot listen on {self.host}:{self.port}: {failure[0]}")
        self.follower.start()
        self.probe.start()
        return self.url

    async def _serve(self) -> None:
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        if self.port == 0 and server is not None and server.sockets:
            self.port = int(server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop everything; a second call does nothing."""
        self.follower.stop(timeout)
        self.probe.stop(timeout)
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)

    # --- routes ------------------------------------------------------------------------------
    def make_app(self) -> web.Application:
        """The routes, behind the login (a password set) or the Host rule (none: guard.py);
        every response gets the security headers."""
        password = self.settings.view_password
        app = web.Application(middlewares=[
            host_rule(self.host, self.settings.view_allowed_hosts) if password is None
            else basic_auth(self.settings.view_user, password.get_secret_value())])
        app.on_response_prepare.append(add_headers)
        app.add_routes([
            web.get("/", self.now), web.get("/fragment/now", self.now_fragment),
            web.get("/decisions", self.decisions),
            web.get("/fragment/decisions", self.decisions_fragment),
            web.get("/stories", self.stories),
            web.get("/fragment/stories", self.stories_fragment),
            web.get("/story", self.story),
            web.get("/pair", self.pair), web.get("/dlq", self.dlq),
            web.get("/fragment/dlq", self.dlq_fragment),
            web.get("/static/{name}", self.static), web.get("/api/status", self.status),
        ])
        return app

    def _now(self, request: web.Request) -> tuple[queries.Now, str]:
        key = request.query.get("span", "15m")
        key = key if key in queries.SPANS else "15m"
        return queries.now(self.state, time.time(), queries.SPANS[key],
                           self.settings.shards), key

    async def now(self, request: web.Request) -> web.Response:
        data, key = self._now(request)
        return web.Response(text=pages.now_page(data, key, self._footer), content_type=HTML)

    async def now_fragment(self, request: web.Request) -> web.Response:
        return web.Response(text=pages.now_fragment(self._now(request)[0]), content_type=HTML)

    def _decisions(self, request: web.Request) -> tuple[queries.DecisionList, queries.Filter]:
        flt = queries.Filter.parse(request.query)
        return queries.decisions(self.state, flt), flt

    async def decisions(self, request: web.Request) -> web.Response:
        data, flt = self._decisions(request)
        query = {k: v for k, v in request.query.items() if v}
        return web.Response(text=pages.decisions_page(data, flt, query, self._footer),
                            content_type=HTML)

    async def decisions_fragment(self, request: web.Request) -> web.Response:
        return web.Response(text=pages.decisions_fragment(self._decisions(request)[0]),
                            content_type=HTML)

    def _stories(self, request: web.Request) -> tuple[StoryList, str, str]:
        key = request.query.get("span", "1h")
        key = key if key in STORY_SPANS else "1h"
        order = request.query.get("order", "largest")
        order = order if order in ORDERS else "largest"
        return stories(self.state, time.time(), STORY_SPANS[key], order), key, order

    async def stories(self, request: web.Request) -> web.Response:
        data, key, order = self._stories(request)
        return web.Response(text=story_pages.stories_page(data, key, order, self._footer),
                            content_type=HTML)

    async def stories_fragment(self, request: web.Request) -> web.Response:
        return web.Response(text=story_pages.stories_fragment(self._stories(request)[0]),
                            content_type=HTML)

    async def story(self, request: web.Request) -> web.Response:
        found = story(self.state, request.query.get("id", ""))
        if found is None:
            return web.Response(text=pages.not_found(html(
                "no decision the view holds belongs to this story"), self._footer),
                status=404, content_type=HTML)
        return web.Response(text=story_pages.story_page(found, self._footer), content_type=HTML)

    async def pair(self, request: web.Request) -> web.Response:
        key = request.query.get("key", "")
        found = queries.pair(self.state, key)
        if found is None:
            return web.Response(text=pages.not_found(html(
                "no decision {} is held by the view (it keeps the newest {})", key,
                self.state.limits.decisions), self._footer), status=404, content_type=HTML)
        found = await self._settle(key, found)
        missing = EMPTY
        if found.matched is not None and found.old is None:
            missing = await self._read_back(found)
        loop = asyncio.get_running_loop()
        body = await loop.run_in_executor(None, self._render_pair, found, missing)
        return web.Response(text=body, content_type=HTML)

    async def _settle(self, key: str, found: queries.Pair, within: float = 2.0) -> queries.Pair:
        """A decision arrives on the audit topic and its text on an output topic, read in
        any order: give a text not read yet a moment (bounded) before showing it missing."""
        deadline = time.monotonic() + within
        while (found.new is None or (found.matched is not None and found.old is None)) \
                and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            found = queries.pair(self.state, key) or found
        return found

    async def _read_back(self, found: queries.Pair) -> Html:
        """Fetch the matched text from Kafka when the view still knows where it is; else
        why it is missing (the identity and channel come from the record: escaped)."""
        with self.state.lock:
            loc = self.state.locators.get(found.matched or "")
        if loc is None:
            return html("the matched item {} ({}) is no longer held by the view: it was routed "
                        "before the view's first record or more than {} items ago. Look it up "
                        "in {} or {} by its ndd-identity header.", found.matched,
                        found.row.matched_channel or "?", self.state.limits.locators,
                        self.settings.unique_topic, self.settings.duplicate_topic)
        loop = asyncio.get_running_loop()
        text = await loop.run_in_executor(None, fetch_text, self.settings, self.state, loc)
        if text is None:
            return html("the matched item {} was at {}[{}]@{} but could not be read back "
                        "(retention removed it, or the broker did not answer)", found.matched,
                        loc.topic, loc.partition, loc.offset)
        found.old = text
        return EMPTY

    def _render_pair(self, found: queries.Pair, missing: Html) -> str:
        mode = self.state.fmt.extract

        def compared(t: StoredText | None) -> str | None:
            if t is None:
                return None
            return compose_text([p for p in (t.title, t.text) if p], mode)

        new, old = compared(found.new), compared(found.old)
        novel = found.row.novel or {}
        only_new = novel.get("only_new") if isinstance(novel.get("only_new"), list) else None
        only_old = novel.get("only_old") if isinstance(novel.get("only_old"), list) else None
        marked_new = marked_old = None
        from_decision = only_new is not None or only_old is not None
        if new is not None and old is not None:
            marked_new, marked_old, from_decision = mark_pair(new, old, only_new, only_old)
        else:  # nothing to compare with: each text held alone
            marked_new = None if new is None else unmarked(new)
            marked_old = None if old is None else unmarked(old)
        return pages.pair_page(found, marked_new, marked_old, from_decision, missing,
                               self._footer)

    async def dlq(self, request: web.Request) -> web.Response:
        reason = request.query.get("reason", "")
        rows, reasons = queries.dead_letters(self.state, reason)
        return web.Response(text=pages.dlq_page(rows, dict(reasons), reason, self._footer),
                            content_type=HTML)

    async def dlq_fragment(self, request: web.Request) -> web.Response:
        rows, _ = queries.dead_letters(self.state, request.query.get("reason", ""))
        return web.Response(text=pages.dlq_fragment(rows), content_type=HTML)

    async def static(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in STATIC:
            raise web.HTTPNotFound()
        body = resources.files("ndd_stream.view").joinpath("static", name).read_bytes()
        return web.Response(body=body, content_type=STATIC[name],
                            headers={"Cache-Control": "no-cache"})

    async def status(self, request: web.Request) -> web.Response:
        with self.state.lock:
            body: dict[str, Any] = {
                "decisions": len(self.state.decisions), "dlq": len(self.state.dlq),
                "texts": len(self.state.texts), "read": dict(self.state.read),
                "lag_updated": self.state.lag_updated}
        body.update(follower_error=self.follower.error, lag_error=self.probe.error,
                    following=self.follower.assigned)
        return web.json_response(body)
