"""The API as an actor of the daemon's supervisor: hypercorn's trio server plus the JWKS refresher.

``ApiServer.run`` fetches the JWKS (the first attempt, successful or not: readiness tells), then serves the
ASGI app with hypercorn on ``[api].listen`` (``daemon.api.transport.serve``: hypercorn's protocol code on
connections bounded by ``[api]``'s timeouts) inside the caller's nursery, and reports ready
with the address it bound (a port of 0 binds a free one: the demo and the tests use that). ``stop()`` is
the graceful stop: hypercorn stops accepting at once and gives requests in flight
``[api].shutdown_grace_s`` to finish; then the refresher is cancelled and ``run`` returns.
"""

from __future__ import annotations

import logging

import trio
from hypercorn.config import Config as HypercornConfig

from daemon.api.app import build_app
from daemon.api.auth import Authenticator, JwksKeys
from daemon.api.errors import ApiConfigError
from daemon.api.settings import ApiSettings, AuthSettings
from daemon.api.state import ApiState
from daemon.api.transport import hypercorn_config, serve
from daemon.logs import get_logger
from daemon.store import Repositories

log = get_logger("daemon.api")


class ApiServer:
    def __init__(
        self,
        repos: Repositories,
        api: ApiSettings,
        auth: AuthSettings,
        *,
        listen: str | None = None,
    ) -> None:
        problems = auth.problems()
        if problems:
            raise ApiConfigError("; ".join(f"{f}: {r}" for f, r in problems))
        self.settings = api
        self.listen = listen or api.listen
        if not self.listen:
            raise ApiConfigError("api.listen: empty; the API needs a host:port to listen on")
        self.keys = JwksKeys(
            auth.effective_jwks_url(),
            refresh_s=auth.jwks_refresh_s,
            refetch_cooldown_s=auth.jwks_refetch_cooldown_s,
            timeout_s=auth.jwks_timeout_s,
            retry_s=auth.jwks_retry_s,
        )
        self.state = ApiState(repos=repos, auth=Authenticator(self.keys, auth), keys=self.keys, settings=api)
        self.app = build_app(self.state)
        self.url = ""
        self._stop = trio.Event()
        self.stopped = trio.Event()

    def _hypercorn_config(self) -> HypercornConfig:
        cfg = hypercorn_config(self.listen, self.settings)
        cfg.errorlog = logging.getLogger("hypercorn.error")
        return cfg

    def stop(self) -> None:
        """Stop accepting; requests in flight get the grace period."""
        self._stop.set()

    async def run(self, *, task_status: trio.TaskStatus[ApiServer] = trio.TASK_STATUS_IGNORED) -> None:
        served = trio.Event()
        config = self._hypercorn_config()

        async def serving(*, task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
            try:
                # returns once the trigger fired and requests in flight finished (or the grace ran out)
                await serve(
                    self.app, config, self.settings, shutdown_trigger=self._stop.wait, task_status=task_status
                )
            finally:
                served.set()

        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(self.keys.run)
                binds = await nursery.start(serving)
                self.url = binds[0] if binds else ""
                log.info("api_listening", url=self.url, keys_loaded=self.keys.loaded, jwks_url=self.keys.url)
                task_status.started(self)
                await served.wait()
                nursery.cancel_scope.cancel()  # the JWKS refresher
        finally:
            self.stopped.set()
            log.info("api_stopped", in_flight=self.state.in_flight.value)
