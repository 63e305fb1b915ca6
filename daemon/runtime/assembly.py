"""The production daemon: ``sightscreen run --config FILE``.

``Daemon`` wires the actors together under one supervisor and owns the process lifecycle:

    Dynamo/Repositories ─┐
    SportMonksClient ── FeedActor ──▶ MatchActor × N ──▶ ApnsSender ──▶ APNs
                          ▲              ▲    (supervised)   ▲  │ rejected
                     Orchestrator ───────┘                   │  ▼
    ShareWorker (shards of other engines' hot matches) ──────┘  Janitor ──▶ DynamoDB
    jobs (fixture sync, reference sync, prematch)
    AdminServer (Unix socket)  ·  sd_notify (READY, STATUS, WATCHDOG, STOPPING)

Start-up: every actor is started with ``nursery.start`` so the process is ready (``READY=1``) only once each
said so. Shutdown (SIGTERM/SIGINT, or the admin ``drain``): stop taking matches, stop every match actor and
release its lock (another instance takes over at once), let the sender finish in-flight pushes within the
grace period, ``STOPPING=1``, exit 0. SIGHUP stops the same way (there is no reload).
"""

from __future__ import annotations

import functools
import io
import signal
import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from actors.cache_reader import CacheReader, LeaderSummary
from actors.delivery import Delivery
from actors.feed import FeedActor
from actors.feed_leader import FeedLeadership, FeedLease, FencedFixtureCache, leader_view
from actors.janitor import Janitor
from actors.lease import RELEASE_S
from actors.livework import LiveWork
from actors.match import MatchActor
from actors.orchestrator import Orchestrator
from actors.ports import DescribedActor, RegionJob
from actors.reconciler import LiveMatchReconciler
from actors.sender import ApnsSender
from actors.settings import with_routine_hold_capped
from actors.share import Sharing
from actors.share_worker import ShareWorker
from daemon import __version__
from daemon.logs import get_logger
from daemon.metrics import EVENT_LOOP_LAG, READY, READY_CHECK, REGISTRY
from daemon.runtime import gctune
from daemon.runtime.admin.handlers import daemon_handlers
from daemon.runtime.admin.protocol import Handler
from daemon.runtime.admin.runtime import runtime_handlers
from daemon.runtime.stalls import StallWatchdog
from daemon.runtime.supervisor import Supervisor
from daemon.sportmonks.client import SportMonksClient
from daemon.store import Repositories
from daemon.store.dynamo import Dynamo
from daemon.store.locks import owner_identity

if TYPE_CHECKING:
    from actors.channels import ChannelSweeper
    from actors.jobs.lease import LeasedJob
    from actors.jobs.prematch import PrematchNotifier
    from daemon.api.server import ApiServer
    from daemon.config import Config
    from daemon.runtime.sdnotify import SdNotifier

log = get_logger("daemon")

# The feed counts as fresh while its newest /livescores poll is at most this many cadences old (and at
# least FEED_STALE_MIN_S: a lease's hand-over of the feed takes about one lease).
FEED_STALE_POLLS = 4
FEED_STALE_MIN_S = 20.0
# Kept from the shutdown grace for the lease releases after the drain (two rounds of ``RELEASE_S``), so the
# whole stop ends within the grace whatever DynamoDB does.
STOP_RESERVE_S = 2 * RELEASE_S + 0.2


class Daemon:
    def __init__(
        self,
        config: Config,
        *,
        on_delivery: Callable[[Delivery], None] | None = None,
        notifier: SdNotifier | None = None,
        with_jobs: bool = True,
        extra_handlers: Mapping[str, Handler] | None = None,
    ) -> None:
        self.config = config
        self.instance_id: str = config.instance.id  # for people: logs, status
        # what this process writes on locks and active-matches: unique per process even where the id is
        # configured (a restart, or two processes from one configuration, never share a lease)
        self.owner_id: str = owner_identity(self.instance_id)
        self._on_delivery = on_delivery
        self._notifier = notifier
        self._with_jobs = with_jobs
        # admin commands of the embedding program (the demo's replay controls)
        self._extra_handlers = dict(extra_handlers or {})
        self.started_at = time.time()
        self.dynamo = Dynamo(config.dynamodb)
        self.repos = Repositories(self.dynamo)
        self.client = SportMonksClient(config.sportmonks)
        # One fleet per region: the feed polls only while this instance leads the region (the lease
        # feed:{region}); elsewhere the cache reader serves the match actors from cricket-fixture-cache.
        self.region = config.instance.region or "default"
        # The feed's collaborators come first, so it is built whole: the lease its cache writes carry (the
        # leadership renews the same one) and the leader's summary it answers livescores() from elsewhere.
        orch = config.orchestrator
        self.feed_lease = FeedLease(
            self.repos.locks,
            self.region,
            self.owner_id,
            lease_s=orch.lease_s,
            renew_every_s=orch.renew_every_s,
            clock_skew_bound_s=orch.clock_skew_bound_s,
        )
        self.fixture_cache = FencedFixtureCache(self.feed_lease, self.repos)
        self.leader_summary = LeaderSummary(
            self.repos.fixture_cache, region=self.region, stale_after_s=2 * orch.lease_s
        )
        self.feed = FeedActor(
            self.client,
            config.feed,
            fixture_cache=self.fixture_cache,
            leader_summary=self.leader_summary,
            leading=False,
        )
        self.leadership = FeedLeadership(
            feed=self.feed,
            lease=self.feed_lease,
            repos=self.repos,
            marquee_leagues=config.feed.marquee_leagues,
        )
        self.cache_reader = CacheReader(
            self.feed, self.repos.fixture_cache, config.feed, region=self.region, summary=self.leader_summary
        )
        # roles: an "api"-only instance takes no match, polls nothing and pushes nothing (no APNs key needed);
        # the API runs where it is listed and [api].listen is set
        self.runs_engine = config.runs("engine")
        self.runs_api = config.runs("api") and bool(config.api.listen)
        self.janitor = Janitor(self.repos)
        # an instance without the engine role has no sender (nothing it runs pushes)
        self.sender: ApnsSender | None = (
            ApnsSender(config.apns, janitor=self.janitor.send_channel) if self.runs_engine else None
        )
        # match actors' fan-outs in progress and how many run: the prematch job gives way to them, and is
        # paced while any runs
        self.live = LiveWork(matches=lambda: len(self.orchestrator.owned) if self.orchestrator else 0)
        self.match_settings = with_routine_hold_capped(config.match, self.feed.fastest_cadence_s())
        # said when it overrides the operator's own value (the default is capped on the standard plan's
        # sub-second cadence every start, which is no news)
        asked = "routine_after_s" in config.match.model_fields_set
        if asked and self.match_settings.routine_after_s != config.match.routine_after_s:
            log.info(
                "routine_hold_capped",
                configured_s=config.match.routine_after_s,
                used_s=self.match_settings.routine_after_s,
            )
        # a hot match's fan-outs are shared by every engine of the region ([fanout]): the match actors publish
        # them, the share worker delivers other engines' shards here
        self.share_worker: ShareWorker | None = (
            ShareWorker(
                region=self.region,
                owner_id=self.owner_id,
                stores=self.repos,
                sender=self.sender,
                live=self.live,
                topic=config.apns.topic,
                match_settings=self.match_settings,
                settings=config.fanout,
                claim_hold_s=orch.lease_s,
                clock_skew_bound_s=orch.clock_skew_bound_s,
            )
            if self.sender is not None and config.fanout.share_above > 0
            else None
        )
        worker = self.share_worker
        self.sharing = Sharing(
            region=self.region,
            settings=config.fanout,
            cadence_s=lambda marquee: self.feed.cadence_for(marquee=marquee),
            # a hot match is shared only while another engine says it helps (the share worker reads it)
            helpers=worker.helpers if worker is not None else lambda: 0,
        )
        self.api: ApiServer | None = None
        self.supervisor: Supervisor | None = None
        self.orchestrator: Orchestrator | None = None
        self.jobs: dict[str, DescribedActor] = {}
        self._shutdown = trio.Event()
        self.finished = trio.Event()
        self.exit_code = 0
        self.stopping = False

    # ------------------------------------------------------------------ assembly
    @property
    def engine_sender(self) -> ApnsSender:
        """The sender, on an instance with the engine role (the only one whose parts push)."""
        assert self.sender is not None, "only an instance with the engine role has a sender"
        return self.sender

    def _match_actor(self, match_id: str, epoch: int, marquee: bool) -> MatchActor:
        return MatchActor(
            match_id,
            instance_id=self.owner_id,
            epoch=epoch,
            repos=self.repos,
            feed=self.feed,
            sender=self.engine_sender,
            channel_requests=self.engine_sender.channels,
            topic=self.config.apns.topic,
            marquee=marquee,
            engine_settings=self.config.engine,
            settings=self.match_settings,
            lease=self.config.orchestrator,
            on_delivery=self._on_delivery,
            live=self.live,
            sharing=self.sharing,
        )

    def _channel_sweeper(self) -> ChannelSweeper:
        """Deletes broadcast channels no active match records (see ``actors.channels.ChannelSweeper``)."""
        from actors.channels import ChannelSweeper

        async def active() -> list[str]:
            items = await self.repos.active_matches.get_all_active_matches()
            return [str(i["matchId"]) for i in items if i.get("status") != "ended"]

        channels = self.engine_sender.channels
        assert channels is not None, "the channel sweeper runs only where the sender manages channels"
        return ChannelSweeper(
            bundle=self.config.apns.topic.removesuffix(".push-type.liveactivity"),
            request=channels.request,
            fixtures=self.repos.fixtures,
            active_matches=active,
            interval_s=self.config.match.channel_sweep_s,
        )

    def _build_jobs(self) -> dict[str, DescribedActor]:
        if not self._with_jobs:
            return {}
        jobs: dict[str, DescribedActor] = {
            name: self._leased(name, job, sportmonks=True) for name, job in self._region_jobs().items()
        }
        # prematch keeps its per-match lock (any instance works through a match's followers)
        jobs["prematch"] = self._prematch()
        return jobs

    def _leased(self, name: str, job: RegionJob, *, sportmonks: bool) -> LeasedJob:
        """Once per region: the job runs under the lease job:{name}:{region}; a job that calls SportMonks
        runs only where the feed leader is, so the region's calls share one client and one budget."""
        from actors.jobs.lease import LeasedJob

        orch = self.config.orchestrator
        return LeasedJob(
            name,
            job,
            locks=self.repos.locks,
            region=self.region,
            owner=self.owner_id,
            lease_s=orch.lease_s,
            renew_every_s=orch.renew_every_s,
            clock_skew_bound_s=orch.clock_skew_bound_s,
            may_run=(lambda: self.leadership.leading) if sportmonks else (lambda: True),
        )

    def _region_jobs(self) -> dict[str, RegionJob]:
        from actors.jobs.fixture_sync import FixtureSyncJob
        from actors.jobs.reference_sync import ReferenceSyncJob

        jobs_cfg = self.config.jobs
        return {
            # the job reads /livescores through the feed (fresh within 30 s), so it costs that budget nothing
            "fixture-sync": FixtureSyncJob(
                self.client,
                self.repos,
                jobs_cfg.fixture_sync,
                livescores=lambda: self.feed.livescores(max_age_s=30),
            ),
            "reference-sync": ReferenceSyncJob(self.client, self.repos, jobs_cfg.reference_sync),
        }

    def _prematch(self) -> PrematchNotifier:
        from actors.jobs.prematch import PrematchNotifier

        return PrematchNotifier(
            self.repos,
            self.engine_sender,
            self.config.jobs.prematch,
            topic=self.config.apns.topic,
            owner=self.owner_id,
            live=self.live,
        )

    async def run(self, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
        from daemon.runtime.admin.server import AdminServer

        orch_cfg = self.config.orchestrator
        self._leases_left = REGISTRY.get_sample_value("sightscreen_leases_left_to_expire_total") or 0.0
        try:
            async with trio.open_nursery() as nursery:
                self.supervisor = supervisor = Supervisor(
                    nursery,
                    max_restarts=orch_cfg.max_restarts,
                    window_s=orch_cfg.restart_window_s,
                    backoff_s=orch_cfg.restart_backoff_s,
                )
                if self.runs_engine:
                    self.orchestrator = Orchestrator(
                        instance_id=self.owner_id,
                        repos=self.repos,
                        feed=self.feed,
                        supervisor=supervisor,
                        actor_factory=self._match_actor,
                        settings=orch_cfg,
                        marquee_leagues=self.config.feed.marquee_leagues,
                        quarantine_s=orch_cfg.quarantine_s,
                    )
                    await supervisor.start("janitor", lambda: self.janitor, kind="janitor")
                    sender_guard = _FatalOnConfigError(self, self.engine_sender)
                    await supervisor.start("sender", lambda: sender_guard, kind="sender")
                    await supervisor.start("feed", lambda: self.feed, kind="feed")
                    await supervisor.start("feed-leader", lambda: self.leadership, kind="feed")
                    await supervisor.start("cache-reader", lambda: self.cache_reader, kind="feed")
                if self.config.admin.socket_path:
                    admin = AdminServer(
                        self.config.admin.socket_path,
                        {
                            **daemon_handlers(self, self.repos.active_matches),
                            **runtime_handlers(self),
                            **self._extra_handlers,
                        },
                        mode=self.config.admin.mode,
                        max_line_bytes=self.config.admin.max_line_bytes,
                        client_timeout_s=self.config.admin.client_timeout_s,
                        max_clients=self.config.admin.max_clients,
                    )
                    await supervisor.start("admin", lambda: admin, kind="admin")
                if self.config.metrics.listen:
                    from daemon.runtime.metrics_http import MetricsHttpServer

                    metrics_http = MetricsHttpServer(self.config.metrics.listen)
                    await supervisor.start("metrics-http", lambda: metrics_http, kind="admin")
                if self.runs_api:
                    # imported here: an engine-only instance never loads the API
                    from daemon.api.server import ApiServer

                    self.api = api = ApiServer(self.repos, self.config.api, self.config.auth)
                    await supervisor.start("api", lambda: api, kind="api")
                if self.runs_engine:
                    self.jobs = self._build_jobs()
                    for name, job in self.jobs.items():
                        await supervisor.start(name, functools.partial(_same, job), kind="job")
                    orchestrator = self.orchestrator
                    assert orchestrator is not None  # built above when the engine runs
                    await supervisor.start("orchestrator", lambda: orchestrator, kind="orchestrator")
                    if self.share_worker is not None:
                        worker = self.share_worker
                        await supervisor.start("share-worker", lambda: worker, kind="share")
                    reconciler = self._leased(
                        # where the feed leader is: it compares the leader's own fresh /livescores, never
                        # a cached summary that may be a leader change old
                        "reconciler",
                        LiveMatchReconciler(self.repos, self.feed, cycle_s=orch_cfg.cycle_s),
                        sportmonks=True,
                    )
                    self.jobs["reconciler"] = reconciler
                    await supervisor.start("reconciler", lambda: reconciler, kind="job")
                    if self.config.match.broadcast_channels and self.engine_sender.channels is not None:
                        sweeper = self._leased("channel-sweep", self._channel_sweeper(), sportmonks=False)
                        self.jobs["channel-sweep"] = sweeper
                        await supervisor.start("channel-sweep", lambda: sweeper, kind="job")
                nursery.start_soon(self._watchdog)
                nursery.start_soon(watch_event_loop, self.config.instance.stall_dump_s)
                nursery.start_soon(self._readiness_monitor)
                instance = self.config.instance
                if instance.gc_sweep_s:
                    nursery.start_soon(gctune.sweep, instance.gc_sweep_s, instance.gc_full_every_s)
                if self._notifier is not None:
                    self._notifier.ready()
                log.info(
                    "daemon_ready", instance_id=self.instance_id, owner=self.owner_id, version=__version__
                )
                task_status.started(self)
                await self._shutdown.wait()
                await self._graceful_stop()
                nursery.cancel_scope.cancel()
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(1.0):
                await self.client.aclose()
            left = (
                REGISTRY.get_sample_value("sightscreen_leases_left_to_expire_total") or 0.0
            ) - self._leases_left
            log.info("daemon_stopped", leases_left_to_expire=int(left))
            self.finished.set()

    async def _graceful_stop(self) -> None:
        self.stopping = True
        READY.set(0)
        if self._notifier is not None:
            self._notifier.stopping()
        grace = self.config.instance.shutdown_grace_s
        log.info("daemon_stopping", grace_s=grace)
        if self.api is not None:
            self.api.stop()  # stops accepting at once; requests in flight get [api].shutdown_grace_s
        # The drain gets the grace less two rounds of lease releases: the match locks the drain lets go of
        # (shielded, at most RELEASE_S past its budget), then the feed's and the jobs' as the nursery closes.
        drained_by = trio.current_time() + max(0.5, grace - STOP_RESERVE_S)
        with trio.move_on_at(drained_by):
            if self.orchestrator is not None:
                await self.orchestrator.drain()  # every match actor stopped, every lock released
            if self.sender is not None:
                await self.sender.drain(max(0.0, drained_by - trio.current_time()))
        if self.api is not None:
            with trio.move_on_at(drained_by):
                await self.api.stopped.wait()
        log.info("daemon_drained")

    def shutdown(self) -> None:
        self._shutdown.set()

    async def _watchdog(self) -> None:
        notifier = self._notifier
        interval = notifier.watchdog_interval() if notifier is not None else None
        period = min(interval or 10.0, 10.0)
        while True:
            if notifier is not None:
                if interval:
                    notifier.watchdog()
                owned = len(self.orchestrator.owned) if self.orchestrator else 0
                notifier.status(f"{owned} matches owned")
            await trio.sleep(period)

    # ------------------------------------------------------------------ what the admin socket reads
    async def readiness(self) -> dict[str, Any]:
        """DynamoDB reachable; engine: APNs connected, SportMonks breaker not open; API: signing keys loaded;
        not stopping. Exported as the ``sightscreen_ready`` and ``sightscreen_ready_check`` gauges as well as
        returned."""
        checks: dict[str, Any] = {}
        try:
            with trio.fail_after(3):
                await self.repos.locks.get("health:probe")
            checks["dynamodb"] = True
        except Exception as exc:
            checks["dynamodb"] = f"unreachable: {exc!r}"
        if self.sender is not None:
            apns_ok, apns_why = self.sender.health()
            checks["apns"] = apns_ok or apns_why
            checks["feed"] = self._feed_fresh()
        if self.api is not None:
            checks["api_keys"] = self.api.keys.loaded or "no signing keys loaded from the JWKS"
        ready = all(v is True for v in checks.values()) and not self.stopping
        for name, value in checks.items():
            READY_CHECK.labels(name).set(1 if value is True else 0)
        READY.set(1 if ready else 0)
        return {"ready": ready, "checks": checks}

    def _feed_fresh(self) -> bool | str:
        """The region's feed as this instance sees it: the newest ``/livescores`` poll, this instance's own
        (it leads) or the leader's (from the cache's summary), no older than a few cadences."""
        if self.feed.breaker_open:
            return "SportMonks circuit breaker is open"
        seen = [t for t in (self.leadership.last_poll_wall, self.cache_reader.last_poll_at) if t is not None]
        bound = max(FEED_STALE_MIN_S, FEED_STALE_POLLS * self.feed.cadence_s())
        if not seen:
            started = time.time() - self.started_at
            return True if started < bound else f"no /livescores poll seen in {started:.0f} s"
        age = time.time() - max(seen)
        return (
            True if age <= bound else f"the newest /livescores poll is {age:.0f} s old (bound {bound:.0f} s)"
        )

    async def _readiness_monitor(self, interval_s: float = 5.0) -> None:
        """Keep the readiness gauges current for scrapers, which cannot ask the admin socket."""
        while True:
            await self.readiness()
            await trio.sleep(interval_s)

    def health(self) -> dict[str, Any]:
        return {
            "alive": True,
            "instance_id": self.instance_id,
            "owner": self.owner_id,
            "stopping": self.stopping,
        }

    def status(self) -> dict[str, Any]:
        orch = self.orchestrator
        return {
            "instance_id": self.instance_id,
            "owner": self.owner_id,
            "version": __version__,
            "uptime_s": round(time.time() - self.started_at, 1),
            "owned_matches": sorted(orch.owned) if orch else [],
            "draining": bool(orch and orch.draining),
            "gc": gctune.snapshot(),
            "live_fanouts": {"in_progress": self.live.active, "begun": self.live.fanouts},
            "orchestrator": {
                "cycles": orch.cycles if orch else 0,
                "last_cycle_at": orch.last_cycle_at if orch else None,
                "last_error": orch.last_cycle_error if orch else None,
            },
        }

    def owned_matches(self) -> Mapping[str, MatchActor]:
        return self.orchestrator.actors() if self.orchestrator else {}

    def sender_stats(self) -> dict[str, Any] | None:
        return self.sender.stats() if self.sender is not None else None

    def apns_connections(self) -> dict[str, int] | None:
        """Open APNs connections per pool (push; broadcast when it has its own host; management once used)."""
        if self.sender is None:
            return None
        stats = self.sender.stats()
        out = {"push": int(stats["connections"])}
        if "broadcast_pool" in stats:
            out["broadcast"] = int(stats["broadcast_pool"]["connections"])
        if self.sender.channels is not None:
            management = self.sender.channels.stats()["connections"]
            out["management"] = management if isinstance(management, int) else 0
        return out

    def backlogs(self) -> dict[str, int]:
        """What waits in this process's memory channels and queues (see ``daemon.runtime.admin.runtime``)."""
        out = {"janitor_inbox": self.janitor.send_channel.statistics().current_buffer_used}
        if self.sender is not None:
            stats = self.sender.stats()
            out.update({f"sender_inbox_{lane}": int(n) for lane, n in stats["inbox"].items()})
            out.update({f"sender_queued_{lane}": int(n) for lane, n in stats["queued"].items()})
        out.update(self.feed.backlog())
        return out

    async def feed_view(self) -> dict[str, Any]:
        out: dict[str, Any] = dict(self.feed.stats())
        try:
            with trio.fail_after(3):
                item = await self.repos.locks.read(self.leadership.key)
            out["region"] = leader_view(item, self.owner_id, time.time())
        except Exception as exc:  # noqa: BLE001 - the rest of the answer still helps
            out["region"] = {"error": f"cricket-locks unreachable: {exc!r}"}
        out["region"]["name"] = self.region
        out["leadership"] = self.leadership.describe()
        out["cache_reader"] = self.cache_reader.describe()
        out["jobs"] = self.jobs_view()
        return out

    async def shares_view(self) -> dict[str, Any]:
        """The region's hot matches as DynamoDB shows them (the hot list, each board and its shards), this
        instance's own hot matches and its share worker's help."""
        from daemon.runtime.share_view import region_shares

        out: dict[str, Any] = {"region": self.region}
        try:
            with trio.fail_after(3):
                out.update(await region_shares(self.repos.locks, self.region, now=time.time()))
        except Exception as exc:  # noqa: BLE001 - the rest of the answer still helps
            out["error"] = f"cricket-locks unreadable: {exc!r}"
        out["owned_here"] = {m: a.share.describe() for m, a in self.owned_matches().items() if a.share.hot}
        out["helping_here"] = self.share_worker.describe() if self.share_worker is not None else None
        return out

    def jobs_view(self) -> dict[str, Any]:
        return {name: dict(job.describe()) for name, job in self.jobs.items()}

    def drain(self) -> dict[str, Any]:
        self.shutdown()
        return {
            "draining": True,
            "owned_matches": sorted(self.orchestrator.owned) if self.orchestrator else [],
        }


async def watch_event_loop(stall_dump_s: float, interval_s: float = 1.0) -> None:
    """Measure how late the loop wakes a short sleep; past ``stall_dump_s`` (0: never) without a turn of the
    loop, a watchdog thread writes every thread's stack (``daemon.runtime.stalls``), so a stall shows what
    held the loop."""
    watchdog: StallWatchdog | None = None
    if stall_dump_s and sys.__stderr__ is not None:  # without a stderr there is nowhere to write the stacks
        try:
            watchdog = StallWatchdog(stall_dump_s + interval_s, sys.__stderr__).start()
        except (ValueError, OSError, AttributeError, io.UnsupportedOperation) as exc:
            log.warning("stall_dump_unavailable", error=repr(exc))  # no stderr file descriptor
    try:
        while True:
            if watchdog is not None:
                watchdog.beat()
            started = trio.current_time()
            await trio.sleep(interval_s)
            lag = max(0.0, trio.current_time() - started - interval_s)
            EVENT_LOOP_LAG.observe(lag)
            if lag >= 1.0:
                log.warning("event_loop_stalled", seconds=round(lag, 2))
    finally:
        if watchdog is not None:
            watchdog.stop()


A = TypeVar("A")


def _same(actor: A) -> A:
    """The supervisor's factory for an actor built once: every (re)start runs the same object."""
    return actor


class _FatalOnConfigError:
    """Runs the APNs sender; an APNs configuration error (403: bad key, team or topic) stops the daemon.

    Restarting the sender cannot fix a wrong key, and a daemon that keeps polling and diffing while no push
    can leave would only hide the problem: it exits with EX_CONFIG (78) and one loud log line, and systemd's
    restart policy (or the operator) takes it from there.
    """

    def __init__(self, daemon: Daemon, sender: ApnsSender) -> None:
        self._daemon = daemon
        self._sender = sender

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        from daemon.apns.types import ApnsConfigurationError

        try:
            await self._sender.run(task_status=task_status)
        except ApnsConfigurationError as exc:
            log.critical("apns_configuration_error_stopping_daemon", error=str(exc))
            self._daemon.exit_code = 78
            self._daemon.shutdown()
            await trio.sleep_forever()


async def serve(daemon: Daemon, *, task_status: trio.TaskStatus[Daemon] = trio.TASK_STATUS_IGNORED) -> None:
    """Run ``daemon`` until SIGTERM, SIGINT or SIGHUP (or an admin drain), then stop gracefully.

    SIGHUP is a graceful stop like SIGTERM, not a reload: the configuration is read once, at start. Its
    default action would end the process at once with its match locks held (other instances would wait out
    each lease); a closed terminal or ``systemctl kill -s HUP`` instead hands every match over."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                async for signum in signals:
                    log.info("signal_received", signal=signal.Signals(signum).name)
                    daemon.shutdown()
                    return

            nursery.start_soon(watch_signals)
            await nursery.start(daemon.run)
            if daemon.config.instance.gc_freeze_at_ready:
                frozen = gctune.freeze_startup_heap()
                log.info("gc_startup_heap_frozen", objects=frozen)
            task_status.started(daemon)
            await daemon.finished.wait()  # the graceful stop is done inside run()
            nursery.cancel_scope.cancel()
