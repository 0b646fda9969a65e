"""A pool of warm sandboxes created from one source, handed out one at a time.

Rollouts want a fresh sandbox *now*; creating one costs a copy or a mount. `SandboxPool` keeps up
to `size` sandboxes created ahead of time from one source (a host directory or a snapshot id) on
any `SandboxProvider` (bwrap, process, remote), and refills in the background with at most
`max_concurrent_creates` creations in flight:

    async with SandboxPool(provider, "task/workspace", size=8) as pool:
        async with pool.acquire() as sb:
            await sb.exec("pytest -q")

A sandbox that was handed out is never handed out again dirty: on return it is closed, or, with
`recycle=True`, restored to the source snapshot (cheap on copy-on-write backends) and put back;
if that restore fails it is closed. `close()` (also run when the `async with` body is cancelled)
cancels the refill, and closes every idle and every handed-out sandbox.

What this does NOT protect against: the pool adds no isolation of its own (that is the backend's
job), and a recycled sandbox is only as clean as the backend's `restore` makes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from inhabit.errors import SandboxError
from inhabit.log import get_logger
from inhabit.sandbox.base import Sandbox, SandboxLimits, SandboxProvider, create_sandbox

log = get_logger(__name__)

# How many creation latencies the stats keep (enough for stable p50/p99, bounded memory).
_LATENCY_WINDOW = 1024
# Backoff between failed background creations, so a broken source does not spin the CPU.
_FAILURE_BACKOFF_S = (0.05, 0.2, 1.0, 2.0)


@dataclass
class PoolStats:
    """Counters of one pool's life; `hits + misses` is the number of `acquire()` calls served."""

    hits: int = 0
    """Acquisitions served by an already warm sandbox."""
    misses: int = 0
    """Acquisitions that had to wait for a creation."""
    created: int = 0
    create_failures: int = 0
    recycled: int = 0
    """Sandboxes restored to the source snapshot and put back instead of closed."""
    closed: int = 0
    create_latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))

    def summary(self) -> dict[str, float | int]:
        """Plain numbers for logs and benchmarks (latencies in milliseconds)."""
        lat = sorted(self.create_latencies_s)
        out: dict[str, float | int] = {
            "hits": self.hits,
            "misses": self.misses,
            "created": self.created,
            "create_failures": self.create_failures,
            "recycled": self.recycled,
            "closed": self.closed,
        }
        if lat:
            out["create_p50_ms"] = 1000 * statistics.median(lat)
            out["create_p99_ms"] = 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))]
            out["create_mean_ms"] = 1000 * statistics.fmean(lat)
        return out


class SandboxPool:
    """Warm sandboxes from one source; see the module docstring."""

    def __init__(
        self,
        provider: SandboxProvider,
        source: str | Path,
        *,
        size: int = 4,
        max_concurrent_creates: int = 4,
        limits: SandboxLimits | None = None,
        recycle: bool = False,
        env: str | Path | None = None,
    ) -> None:
        if size < 0:
            raise SandboxError(f"pool size must be >= 0, got {size}")
        if max_concurrent_creates < 1:
            raise SandboxError(f"max_concurrent_creates must be >= 1, got {max_concurrent_creates}")
        self.provider = provider
        self.source = source
        self.size = size
        self.limits = limits
        self.env = env  # the task environment every sandbox of the pool mounts (None: none)
        self.recycle = recycle
        self.stats = PoolStats()
        self._create_slots = asyncio.Semaphore(max_concurrent_creates)
        self._idle: deque[Sandbox] = deque()
        self._leased: set[Sandbox] = set()
        self._waiters: deque[asyncio.Future[Sandbox]] = deque()  # borrowers waiting on a miss
        self._tasks: set[asyncio.Task[None]] = set()  # creations in flight (refill and leftovers)
        self._closing: set[asyncio.Task[None]] = set()  # background closes: awaited, never cancelled
        self._wake = asyncio.Event()  # set when the refill loop should look again
        self._refill_task: asyncio.Task[None] | None = None
        self._filling = 0  # background creations in flight
        self._failures = 0
        self._closed = False
        # The snapshot recycled sandboxes return to: the source itself when it is a snapshot id,
        # else a snapshot of the first sandbox, taken before anyone touched it.
        self._base_snapshot: str | None = None if self._source_is_dir() else str(source)
        self._base_lock = asyncio.Lock()

    def _source_is_dir(self) -> bool:
        return isinstance(self.source, Path) or Path(str(self.source)).is_dir()

    # ---- life cycle -------------------------------------------------------------------------

    async def start(self) -> SandboxPool:
        """Begin filling the pool in the background (idempotent)."""
        self._check_open()
        if self._refill_task is None:
            self._refill_task = asyncio.create_task(self._refill_loop(), name="sandbox-pool-refill")
            self._wake.set()
        return self

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop refilling and close every sandbox this pool holds or has handed out. Idempotent."""
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._refill_task, *self._tasks) if t is not None]
        self._refill_task = None
        for t in tasks:
            t.cancel()
        for w in self._waiters:
            if not w.done():
                w.set_exception(SandboxError("the sandbox pool was closed"))
        self._waiters.clear()
        # Shielded so that a cancellation arriving during close still lets every close finish.
        await asyncio.shield(self._close_all(tasks))

    async def _close_all(self, tasks: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*self._closing, return_exceptions=True)
        doomed = list(self._idle) + list(self._leased)
        self._idle.clear()
        self._leased.clear()
        await asyncio.gather(*(self._discard(sb) for sb in doomed), return_exceptions=True)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("this sandbox pool is closed; create a new SandboxPool")

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    @property
    def leased_count(self) -> int:
        return len(self._leased)

    # ---- handing out ------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[Sandbox]:
        """Lend a clean sandbox for the body of an `async with`; it is never reused dirty."""
        self._check_open()
        if self._refill_task is None:
            await self.start()  # a pool used without `async with`/start() still refills
        sb = await self._take()
        self._leased.add(sb)
        try:
            yield sb
        finally:
            if sb in self._leased:  # else close() already took care of it
                self._leased.discard(sb)
                # Shielded: a cancelled borrower still gives its sandbox back (closed or clean).
                await asyncio.shield(self._give_back(sb))

    async def _take(self) -> Sandbox:
        if self._idle:
            self.stats.hits += 1
            self._wake.set()
            return self._idle.popleft()
        self.stats.misses += 1
        self._wake.set()
        # Take whichever comes first: a sandbox that becomes idle, or our own creation. Creating
        # our own keeps a burst from waiting for the refill loop to notice it.
        own = asyncio.ensure_future(self._create())
        waiter: asyncio.Future[Sandbox] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait({own, waiter}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            own.cancel()
            if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                self._push_idle(waiter.result())  # handed to us but we are leaving: pass it on
            waiter.cancel()
            await asyncio.shield(self._settle(own))
            raise
        if waiter.done():
            if waiter.exception() is not None:  # the pool closed while we waited
                own.cancel()
                await asyncio.shield(self._settle(own))
                return waiter.result()  # raises the SandboxError
            # Handed a warm one first: our own creation goes on to the idle queue.
            self._track_leftover(own)
            return waiter.result()
        waiter.cancel()
        return own.result()

    async def _settle(self, own: asyncio.Future[Sandbox]) -> None:
        """After a cancelled take: a creation that finished anyway is closed, never leaked."""
        with contextlib.suppress(BaseException):
            sb = await own
            await self._discard(sb)

    def _track_leftover(self, own: asyncio.Future[Sandbox]) -> None:
        async def adopt() -> None:
            try:
                sb = await own
            except Exception:
                return
            self._keep_or_discard(sb)

        self._spawn(adopt())

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _keep_or_discard(self, sb: Sandbox) -> None:
        if self._closed or (len(self._idle) >= self.size and not self._waiters):
            task = asyncio.ensure_future(self._discard(sb))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
        else:
            self._push_idle(sb)

    def _push_idle(self, sb: Sandbox) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(sb)
                return
        self._idle.append(sb)

    async def _give_back(self, sb: Sandbox) -> None:
        base = self._base_snapshot
        if self.recycle and base is not None and not self._closed and len(self._idle) < self.size:
            try:
                await sb.restore(base)
            except Exception as e:  # a failed restore means dirty: close it instead
                log.warning("pool: restoring %s failed (%s); closing it", sb.sandbox_id, e)
            else:
                if not self._closed:
                    self.stats.recycled += 1
                    self._push_idle(sb)
                    return
        await self._discard(sb)
        self._wake.set()

    async def _discard(self, sb: Sandbox) -> None:
        try:
            await sb.close()
        except Exception as e:  # closing is best effort; the backend logs its own details
            log.warning("pool: closing sandbox %s failed: %s", getattr(sb, "sandbox_id", "?"), e)
        self.stats.closed += 1

    # ---- creation ---------------------------------------------------------------------------

    async def _create(self) -> Sandbox:
        async with self._create_slots:
            self._check_open()
            t0 = time.perf_counter()
            try:
                sb = await create_sandbox(self.provider, self.source, limits=self.limits, env=self.env)
            except Exception:
                self.stats.create_failures += 1
                raise
            self.stats.create_latencies_s.append(time.perf_counter() - t0)
            self.stats.created += 1
        try:
            if self.recycle and self._base_snapshot is None:
                await self._take_base_snapshot(sb)
            self._check_open()
        except BaseException:
            await asyncio.shield(self._discard(sb))
            raise
        return sb

    async def _take_base_snapshot(self, fresh: Sandbox) -> None:
        async with self._base_lock:
            if self._base_snapshot is None:
                try:
                    self._base_snapshot = await fresh.snapshot()
                except Exception as e:
                    log.warning("pool: cannot snapshot the source (%s); recycling disabled", e)
                    self.recycle = False

    async def _refill_loop(self) -> None:
        while not self._closed:
            await self._wake.wait()
            self._wake.clear()
            while not self._closed and self._warm_or_coming() < self.size:
                self._filling += 1
                self._spawn(self._fill_one())

    def _warm_or_coming(self) -> int:
        # Recycled sandboxes come back after use, so count them as on their way.
        coming = len(self._leased) if self.recycle else 0
        return len(self._idle) + self._filling + coming

    async def _fill_one(self) -> None:
        try:
            sb = await self._create()
        except Exception as e:
            self._failures += 1
            log.warning("pool: creating a sandbox from %s failed: %s", self.source, e)
            # Hold the slot for a while so a broken source does not spin the CPU.
            await asyncio.sleep(_FAILURE_BACKOFF_S[min(self._failures, len(_FAILURE_BACKOFF_S)) - 1])
        else:
            self._failures = 0
            self._keep_or_discard(sb)
        finally:
            self._filling -= 1
            self._wake.set()
