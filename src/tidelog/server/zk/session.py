"""One ZooKeeper session for the asyncio broker: kazoo's threads bridged to the event loop.

kazoo runs its own threads (a connection thread and a callback thread). This module is the only place
they meet the event loop:

- Requests go out through kazoo's ``*_async`` calls, which only queue the request and wake the
  connection thread; their completion is handed to the loop with ``call_soon_threadsafe`` and awaited as
  an asyncio future. Calls that block in kazoo (``start``, ``stop``, ``close``) run in the loop's default
  executor. Nothing here blocks the loop.
- Watch callbacks and session-state changes arrive on kazoo's threads and are handed to the loop the
  same way; user callbacks always run on the loop.

Invariants:

- A request interrupted by a lost connection (CONNECTIONLOSS) is retried once the connection is back,
  as Kafka's ``retryRequestUntilConnected``. A *write* never spans two sessions: if the session changed
  meanwhile (the old one expired), it raises :class:`ZkSessionExpiredError` instead of being retried, so
  nothing the broker decided under its old session is written under its new one. Reads are retried in
  whatever session is current. Callers of a retried write must expect that the first attempt may have
  been applied (see the checks in :mod:`.client`).
- kazoo replaces an expired session with a new one by itself. Listeners learn of each step in order, on
  the loop: ``expired(old_session_id)``, then ``new_session(new_session_id)``. :meth:`ZkSession.recreate`
  forces the same replacement (a broker that decides its session is as good as expired).
- ``host:port[,host:port]/chroot`` connect strings work as in Kafka: the chroot is created (with its
  parents) if missing before the session starts, and every path is relative to it.
- :meth:`ZkSession.close` ends the session at once (ZooKeeper deletes its ephemeral znodes) and no
  listener is called after it.
- A connection handshake that gets no answer is given up after a third of the session timeout (kazoo,
  like ZooKeeper's Java client, waits the whole session timeout) and the next attempt follows within
  ``max_reconnect_delay_ms``. A ZooKeeper 3.8.0 that is still loading its database when a client
  reconnects leaves that connection open and unanswered; a full-timeout wait let the session, which the
  restarted server tracks again from its start, expire before the client asked again.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import ConnectionLoss, NodeExistsError, NoNodeError, SessionExpiredError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Connect
from kazoo.protocol.states import KeeperState, WatchedEvent, ZnodeStat
from kazoo.retry import KazooRetry

from tidelog.server.zk.errors import ZkError, ZkSessionExpiredError

__all__ = [
    "DataWatchCallback",
    "SessionState",
    "Watch",
    "ZkSession",
    "ZnodeStat",
    "parse_connect_string",
]

_log = logging.getLogger(__name__)
T = TypeVar("T")
DataWatchCallback = Callable[[tuple[bytes, ZnodeStat] | None], None]
SessionListener = Callable[[int], Awaitable[None] | None]


class SessionState(enum.Enum):
    """The session as the loop sees it (kazoo's KazooState, with an expiry told apart from a close)."""

    NOT_STARTED = "not started"
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost; the session may still be alive on the server
    EXPIRED = "expired"  # the server ended the session; kazoo is opening a new one
    CLOSED = "closed"


def parse_connect_string(connect_string: str) -> tuple[str, str | None]:
    """``"h1:2181,h2:2181/kafka"`` → ``("h1:2181,h2:2181", "/kafka")``; no chroot → ``None`` (``"/"`` too)."""
    hosts, slash, chroot = connect_string.partition("/")
    if not hosts:
        raise ValueError(f"no ZooKeeper host in {connect_string!r}")
    if not slash:
        return hosts, None
    chroot = "/" + chroot.rstrip("/")
    if chroot == "/":
        return hosts, None
    if "//" in chroot:
        raise ValueError(f"bad chroot in ZooKeeper connect string {connect_string!r}")
    return hosts, chroot


@dataclass
class Watch:
    """A standing watch (see :meth:`ZkSession.watch_children`): ``cancel()`` stops it."""

    task: asyncio.Task[None]

    def cancel(self) -> None:
        self.task.cancel()


class ZkSession:
    """One ZooKeeper session (a kazoo client) used from one asyncio event loop."""

    def __init__(
        self,
        connect_string: str,
        *,
        session_timeout_ms: int = 18_000,
        connection_timeout_ms: int | None = None,
        max_reconnect_delay_ms: int = 1_000,
    ) -> None:
        self.connect_string = connect_string
        self.hosts, self.chroot = parse_connect_string(connect_string)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.max_reconnect_delay_ms = max_reconnect_delay_ms
        self._client: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._state = SessionState.NOT_STARTED
        self._session_id: int | None = None
        self._connected = asyncio.Event()
        self._state_changed = asyncio.Event()
        self._expired_listeners: list[SessionListener] = []
        self._new_session_listeners: list[SessionListener] = []
        self._tasks: set[asyncio.Future[Any]] = set()
        self._closing = False
        self._expired_since_connected = False

    # ---- lifecycle ----

    async def start(self) -> None:
        """Create the chroot if missing, then open the session; raises :class:`ZkError` when ZooKeeper
        cannot be reached within ``connection_timeout_ms``."""
        if self._client is not None:
            raise RuntimeError("the session is already started")
        self._loop = asyncio.get_running_loop()
        if self.chroot is not None:
            await self._loop.run_in_executor(None, self._ensure_chroot)
        client = self._new_client()
        self._client = client
        await self._start_client(client)

    async def close(self) -> None:
        """End the session (its ephemeral znodes are deleted) and stop kazoo's threads."""
        self._closing = True
        self._state = SessionState.CLOSED
        self._connected.clear()
        self._state_changed.set()
        for task in list(self._tasks):
            task.cancel()
        client, self._client = self._client, None
        if client is not None and self._loop is not None:
            await self._loop.run_in_executor(None, _stop_and_close, client)

    async def recreate(self) -> int:
        """Give up the current session and open a new one (the old one's ephemerals are deleted at once);
        listeners see ``expired`` then ``new_session``. Returns the new session id."""
        client = self._require_client()
        old = self._session_id
        assert self._loop is not None
        self._closing = True  # the stop's LOST is ours, not an expiry
        try:
            await self._loop.run_in_executor(None, client.stop)
        finally:
            self._closing = False
        self._expire(old)
        await self._start_client(client)
        assert self._session_id is not None
        return self._session_id

    @property
    def state(self) -> SessionState:
        return self._state

    @property
    def session_id(self) -> int | None:
        """The current session's id while connected or suspended; None before start and after close."""
        return self._session_id

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """(session id, password): what :meth:`tidelog.testing.ZooKeeper.expire_session` needs."""
        client = self._client
        result = client.client_id if client is not None else None
        return (int(result[0]), bytes(result[1])) if result is not None else None

    def on_expired(self, listener: SessionListener) -> None:
        """Call ``listener(old_session_id)`` on the loop when the session expired (a task if it is async)."""
        self._expired_listeners.append(listener)

    def on_new_session(self, listener: SessionListener) -> None:
        """Call ``listener(new_session_id)`` on the loop when a new session replaced an expired one."""
        self._new_session_listeners.append(listener)

    async def wait_connected(self) -> None:
        """Until the session is connected (wrap in ``asyncio.timeout`` to bound it);
        :class:`ZkSessionExpiredError` once closed."""
        while not self._connected.is_set():
            if self._state is SessionState.CLOSED:
                raise ZkSessionExpiredError("the ZooKeeper session is closed")
            self._state_changed.clear()
            await self._state_changed.wait()

    async def wait_state(self, state: SessionState) -> None:
        """Until the session is in ``state`` (e.g. SUSPENDED: the connection is lost)."""
        while self._state is not state:
            self._state_changed.clear()
            await self._state_changed.wait()

    # ---- requests ----

    async def get(
        self, path: str, watch: Callable[[WatchedEvent], None] | None = None
    ) -> tuple[bytes, ZnodeStat] | None:
        """(data, stat), or None if the znode does not exist. ``watch`` (called on the loop) fires once."""
        client = self._require_client()
        kazoo_watch = self._loop_watch(watch)
        try:
            data, stat = await self._retry(lambda: client.get_async(path, kazoo_watch), write=False)
        except NoNodeError:
            return None
        return (data or b""), stat

    async def exists(
        self, path: str, watch: Callable[[WatchedEvent], None] | None = None
    ) -> ZnodeStat | None:
        client = self._require_client()
        kazoo_watch = self._loop_watch(watch)
        stat: ZnodeStat | None = await self._retry(
            lambda: client.exists_async(path, kazoo_watch), write=False
        )
        return stat

    async def get_children(
        self, path: str, watch: Callable[[WatchedEvent], None] | None = None
    ) -> list[str] | None:
        """The children's names, or None if the znode does not exist."""
        client = self._require_client()
        kazoo_watch = self._loop_watch(watch)
        try:
            children: list[str] = await self._retry(
                lambda: client.get_children_async(path, kazoo_watch), write=False
            )
        except NoNodeError:
            return None
        return children

    async def create(
        self, path: str, data: bytes = b"", *, ephemeral: bool = False, sequence: bool = False
    ) -> tuple[str, ZnodeStat]:
        """Create a znode; returns its real path (with a sequence suffix) and its stat (czxid...).

        Raises kazoo's NodeExistsError / NoNodeError (parent missing) unchanged for the caller to decide.
        """
        client = self._require_client()
        created: tuple[str, ZnodeStat] = await self._retry(
            lambda: client.create_async(
                path, data, ephemeral=ephemeral, sequence=sequence, include_data=True
            ),
            write=True,
        )
        return created

    async def ensure_path(self, path: str) -> None:
        """Create ``path`` and its parents as empty persistent znodes if missing (Kafka's makeSurePersistentPathExists)."""
        client = self._require_client()
        parts = [p for p in path.split("/") if p]
        for depth in range(1, len(parts) + 1):
            prefix = "/" + "/".join(parts[:depth])
            with contextlib.suppress(NodeExistsError):
                await self._retry(functools.partial(client.create_async, prefix, b""), write=True)

    async def set(self, path: str, data: bytes, version: int = -1) -> ZnodeStat:
        """Set data at ``version`` (-1: any); raises kazoo's BadVersionError / NoNodeError unchanged."""
        client = self._require_client()
        stat: ZnodeStat = await self._retry(lambda: client.set_async(path, data, version), write=True)
        return stat

    async def delete(self, path: str, version: int = -1) -> None:
        client = self._require_client()
        await self._retry(lambda: client.delete_async(path, version), write=True)

    async def multi(self, build: Callable[[TransactionRequest], None]) -> list[Any]:
        """Run one ZooKeeper multi built by ``build(transaction)``; returns kazoo's per-op results (a
        result, or an exception instance for the op that failed and the ones rolled back with it)."""
        client = self._require_client()

        def commit() -> Any:
            transaction = client.transaction()
            build(transaction)
            return transaction.commit_async()

        results: list[Any] = await self._retry(commit, write=True)
        return results

    # ---- standing watches ----

    def watch_children(self, path: str, on_change: Callable[[list[str] | None], None]) -> Watch:
        """Call ``on_change(children)`` (None: no znode) now and after every change, until cancelled.

        A change during a disconnection is seen on reconnect (the children are re-read after every
        connection loss, also into a new session); calls with an unchanged list are skipped.
        """
        return self._watch(lambda watch: self.get_children(path, watch), on_change)

    def watch_data(self, path: str, on_change: DataWatchCallback) -> Watch:
        """Call ``on_change((data, stat) or None)`` now and after every change of the znode, until cancelled."""

        async def read(watch: Callable[[WatchedEvent], None]) -> tuple[bytes, ZnodeStat] | None:
            while True:
                found = await self.get(path, watch)
                if found is not None:
                    return found
                if await self.exists(path, watch) is None:  # watch for its creation
                    return None

        return self._watch(read, on_change)

    # ---- internals ----

    def _watch(
        self,
        read: Callable[[Callable[[WatchedEvent], None]], Awaitable[T]],
        on_change: Callable[[T], None],
    ) -> Watch:
        loop = self._require_loop()

        async def run() -> None:
            last: Any = object()
            while True:
                fired: asyncio.Future[None] = loop.create_future()

                def watch(_event: WatchedEvent, fired: asyncio.Future[None] = fired) -> None:
                    if not fired.done():
                        fired.set_result(None)

                try:
                    value = await read(watch)
                except ZkSessionExpiredError:
                    try:
                        await self.wait_connected()  # kazoo opens a new session after an expiry
                    except ZkSessionExpiredError:
                        return  # closed
                    continue
                if value != last:
                    last = value
                    try:
                        on_change(value)
                    except Exception:  # noqa: BLE001 - one bad callback must not end the watch
                        _log.exception("ZooKeeper watch callback failed")
                await fired

        task = loop.create_task(run())
        self._track(task)
        return Watch(task)

    def _new_client(self) -> KazooClient:
        retry = KazooRetry(max_tries=-1, delay=0.05, backoff=2, max_delay=self.max_reconnect_delay_ms / 1000)
        client = KazooClient(
            hosts=self.connect_string, timeout=self.session_timeout_ms / 1000, connection_retry=retry
        )
        _bound_handshake(client, self.session_timeout_ms / 3000)
        client.add_listener(self._kazoo_state_listener(client))
        return client

    async def _start_client(self, client: KazooClient) -> None:
        loop = self._require_loop()
        timeout = self.connection_timeout_ms / 1000
        try:
            await loop.run_in_executor(None, client.start, timeout)
        except KazooTimeoutError:
            raise ZkError(
                f"could not connect to ZooKeeper at {self.connect_string} within {self.connection_timeout_ms} ms"
            ) from None
        session = client.client_id
        if session is None:  # pragma: no cover - start() returned, so it is connected
            raise ZkError(f"ZooKeeper at {self.connect_string} dropped the connection at once")
        self._connected_to(int(session[0]))

    def _ensure_chroot(self) -> None:
        """Kafka's createChrootIfNecessary: a session without the chroot creates it (blocking; executor)."""
        assert self.chroot is not None
        client = KazooClient(hosts=self.hosts, timeout=self.session_timeout_ms / 1000)
        try:
            client.start(timeout=self.connection_timeout_ms / 1000)
        except KazooTimeoutError:
            client.close()
            raise ZkError(
                f"could not connect to ZooKeeper at {self.hosts} within {self.connection_timeout_ms} ms"
            ) from None
        try:
            client.ensure_path(self.chroot)
        finally:
            _stop_and_close(client)

    def _kazoo_state_listener(self, client: KazooClient) -> Callable[[str], None]:
        """Runs on kazoo's thread: read what the state means there, hand it to the loop."""

        def listener(state: str) -> None:
            if state == KazooState.CONNECTED:
                session = client.client_id
                change = (SessionState.CONNECTED, int(session[0]) if session else None)
            elif state == KazooState.SUSPENDED:
                change = (SessionState.SUSPENDED, None)
            elif client.client_state == KeeperState.EXPIRED_SESSION:
                change = (SessionState.EXPIRED, None)
            else:
                return  # closed by us, or an authentication failure (tidelog uses no ZooKeeper auth)
            loop = self._loop
            if loop is None:
                return
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens any more
                loop.call_soon_threadsafe(self._on_kazoo_state, client, *change)

        return listener

    def _on_kazoo_state(self, client: KazooClient, state: SessionState, session_id: int | None) -> None:
        if self._closing or client is not self._client:
            return
        if state is SessionState.CONNECTED:
            if session_id is not None:
                self._connected_to(session_id)
        elif state is SessionState.SUSPENDED:
            if self._state is SessionState.CONNECTED:
                self._set_state(state, self._session_id)  # the session may live on: keep its id
        else:
            self._expire(self._session_id)

    def _connected_to(self, session_id: int) -> None:
        """Connected (kazoo's listener and :meth:`_start_client` both say so; the second call is a no-op)."""
        self._set_state(SessionState.CONNECTED, session_id)
        if self._expired_since_connected:
            self._expired_since_connected = False
            _log.warning("ZooKeeper session 0x%x established after the previous one expired", session_id)
            self._notify(self._new_session_listeners, session_id)

    def _expire(self, old_session_id: int | None) -> None:
        self._set_state(SessionState.EXPIRED, None)
        if old_session_id is not None:
            self._expired_since_connected = True
            _log.warning("ZooKeeper session 0x%x expired", old_session_id)
            self._notify(self._expired_listeners, old_session_id)

    def _set_state(self, state: SessionState, session_id: int | None) -> None:
        self._state = state
        self._session_id = session_id
        if state is SessionState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        self._state_changed.set()

    def _notify(self, listeners: Sequence[SessionListener], session_id: int) -> None:
        for listener in listeners:
            result = listener(session_id)
            if result is not None:
                self._track(asyncio.ensure_future(result))

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._tasks.add(task)

        def done(finished: asyncio.Future[Any]) -> None:
            self._tasks.discard(finished)
            if not finished.cancelled() and finished.exception() is not None:
                _log.error("ZooKeeper session callback failed", exc_info=finished.exception())

        task.add_done_callback(done)

    def _loop_watch(
        self, watch: Callable[[WatchedEvent], None] | None
    ) -> Callable[[WatchedEvent], None] | None:
        """A kazoo watch function that runs ``watch`` on the loop."""
        if watch is None:
            return None
        loop = self._require_loop()

        def on_kazoo_thread(event: WatchedEvent) -> None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(watch, event)

        return on_kazoo_thread

    async def _retry(self, request: Callable[[], Any], *, write: bool) -> Any:
        """Await a kazoo async request; after CONNECTIONLOSS wait for the connection and send it again."""
        session = self._session_id
        if write and session is None:
            raise ZkSessionExpiredError("no live ZooKeeper session: the previous one expired or is closed")
        while True:
            try:
                return await self._await(request())
            except ConnectionLoss:
                await self.wait_connected()
                if write and self._session_id != session:
                    raise ZkSessionExpiredError(
                        "the ZooKeeper session expired while a write was in flight"
                    ) from None
                session = self._session_id
            except SessionExpiredError as exc:  # includes kazoo's ConnectionClosedError
                raise ZkSessionExpiredError(f"the ZooKeeper session ended: {exc!r}") from None

    def _await(self, async_result: Any) -> asyncio.Future[Any]:
        loop = self._require_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(value)

        def on_kazoo_thread(result: Any) -> None:
            try:
                value, error = result.get(block=False), None
            except BaseException as exc:  # noqa: BLE001 - every failure goes to the awaiting coroutine
                value, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody awaits any more
                loop.call_soon_threadsafe(settle, value, error)

        async_result.rawlink(on_kazoo_thread)
        return future

    def _require_client(self) -> KazooClient:
        if self._client is None:
            raise ZkSessionExpiredError("the ZooKeeper session is not started or is closed")
        return self._client

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the session is not started")
        return self._loop


def _stop_and_close(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()


def _bound_handshake(client: KazooClient, timeout_s: float) -> None:
    """Give up a connection handshake (kazoo's ``Connect`` request) unanswered for ``timeout_s``.

    kazoo waits ``session timeout / number of hosts`` for the answer and offers no setting for it, so the
    connection's request call is wrapped (kazoo is pinned in pyproject.toml to the versions whose
    ``ConnectionHandler._invoke(timeout, request, xid)`` this relies on; tests/server/zk/test_session.py
    checks it against a server that never answers).
    """
    connection = client._connection
    invoke = connection._invoke

    def bounded(timeout: float, request: Any, xid: int | None = None) -> Any:
        if isinstance(request, Connect):
            timeout = min(timeout, timeout_s)
        return invoke(timeout, request, xid)

    connection._invoke = bounded
