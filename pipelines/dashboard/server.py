"""The dashboard's HTTP server: waitress, with slow and idle connections shed.

waitress's event loop holds any number of connections apart from a fixed pool of worker
threads that run the app. What it does not do by itself: a connection that trickles a
byte every few seconds is never idle, so `channel_timeout` never closes it, and once
`connection_limit` connections are open waitress stops accepting, so a few hundred
trickling clients (a slowloris) keep every new one, /healthz included, waiting in the
kernel's backlog. Here:

- the connection limit is sized to the process's file-descriptor limit (raised to its
  hard limit at start, `raise_open_files_limit`), and the loop uses poll(), which has no
  1,024-descriptor ceiling as select() has;
- a request has `request_timeout_s` from its first byte to its last header (a browser
  sends it at once, a GET has no body), else its connection is closed, however steadily
  it trickles; a connection silent for `channel_timeout_s` between requests likewise;
- at the limit, the connections waiting longest without a request in service are
  closed to make room, rather than new connections left unanswered;
- the checks run every second (`cleanup_interval`), not waitress's default 30 s.
"""

from __future__ import annotations

import heapq
import logging
import resource
import time
from typing import Any

from waitress.adjustments import Adjustments
from waitress.channel import HTTPChannel
from waitress.server import TcpWSGIServer

log = logging.getLogger("seedance.dashboard")

CHANNEL_TIMEOUT_S = 30  # an idle connection (between requests) is closed after this long
REQUEST_TIMEOUT_S = 10  # a request must arrive whole within this long of its first byte
CLEANUP_INTERVAL_S = 1  # how often those two are checked (waitress's smallest interval)
MAX_CONNECTIONS = 10_000  # the connection limit at most, whatever the descriptor limit
RESERVED_FILES = 64  # descriptors kept for the rest (warehouse connections, logs, ...)
FILES_PER_CONNECTION = 2  # its socket, and a temporary file while a big response waits
# a read-only dashboard takes GET and HEAD: no request needs a body, nor headers beyond a
# large cookie, so a connection's input buffer stays small (and never spills to a file)
MAX_HEADER_BYTES = 65_536
MAX_BODY_BYTES = 65_536
SHED_LOG_EVERY_S = 60.0


def raise_open_files_limit(wanted: int = 65_536) -> int:
    """Raise this process's soft limit of open files towards its hard limit (as far as
    `wanted`); the soft limit after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            log.warning("cannot raise the open-files limit from %d to %d", soft, target)
    return soft


def default_connection_limit() -> int:
    """Connections the open-files limit allows (two descriptors each, some kept back)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_CONNECTIONS
    return max(16, min(MAX_CONNECTIONS, (soft - RESERVED_FILES) // FILES_PER_CONNECTION))


class SheddingChannel(HTTPChannel):
    """A connection that remembers when the request it is reading began."""

    request_began = 0.0

    def received(self, data: bytes) -> bool:
        if self.request is None and data:
            self.request_began = time.time()
        return bool(super().received(data))

    def waiting_since(self) -> float:
        """When it last did something useful: began its unfinished request, or was last
        active (opened, or answered) when it has none."""
        return self.request_began if self.request is not None else self.last_activity

    def sheddable(self) -> bool:
        """Nothing in service, queued or being sent: closing it loses no answer."""
        return not (self.requests or self.will_close or self.close_when_flushed
                    or self.total_outbufs_len)


class SheddingServer(TcpWSGIServer):
    """waitress's TCP server with the checks above (one listening address)."""

    channel_class = SheddingChannel

    def __init__(self, app: Any, adj: Adjustments, request_timeout_s: int) -> None:
        self.request_timeout_s = request_timeout_s
        self.shed_count = 0
        self._shed_logged = 0.0
        super().__init__(app, adj=adj, sockinfo=adj.listen[0])

    def maintenance(self, now: float) -> None:
        super().maintenance(now)  # idle for channel_timeout: closed
        cutoff = now - self.request_timeout_s
        for channel in list(self.active_channels.values()):
            if channel.request is not None and channel.request_began < cutoff and \
                    channel.sheddable():
                channel.will_close = True

    def readable(self) -> bool:
        now = time.time()
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        if not self.accepting:
            return False
        if len(self._map) < self.adj.connection_limit:
            return True
        self._shed(now)
        return False  # accepts again once the connections shed are closed (next pass)

    def _shed(self, now: float) -> None:
        """At the limit: close the connections waiting longest (a hundredth of the limit,
        at least one) to make room for new ones."""
        channels = list(self.active_channels.values())
        closing = sum(1 for c in channels if c.will_close or c.close_when_flushed)
        wanted = max(1, self.adj.connection_limit // 100) - closing
        if wanted <= 0:
            return
        oldest = heapq.nsmallest(wanted, (c for c in channels if c.sheddable()),
                                 key=SheddingChannel.waiting_since)
        for channel in oldest:
            channel.will_close = True
        if oldest:  # wake the loop: its next pass closes them (else it waits up to 1 s)
            self.pull_trigger()
        self.shed_count += len(oldest)
        if now - self._shed_logged >= SHED_LOG_EVERY_S:
            self._shed_logged = now
            log.warning("at the connection limit (%d): %d waiting connections closed so far "
                        "to make room for new ones", self.adj.connection_limit,
                        self.shed_count)


def create_shedding_server(app: Any, host: str, port: int, threads: int,
                           connection_limit: int | None = None,
                           channel_timeout_s: int = CHANNEL_TIMEOUT_S,
                           request_timeout_s: int = REQUEST_TIMEOUT_S) -> SheddingServer:
    """A bound, listening server (`run()` serves); connection_limit None: sized to the
    open-files limit (default_connection_limit)."""
    adj = Adjustments(
        host=host, port=port, threads=threads, ident="seedance-dashboard",
        expose_tracebacks=False, asyncore_use_poll=True,
        connection_limit=connection_limit or default_connection_limit(),
        channel_timeout=channel_timeout_s, cleanup_interval=CLEANUP_INTERVAL_S,
        max_request_header_size=MAX_HEADER_BYTES, max_request_body_size=MAX_BODY_BYTES)
    return SheddingServer(app, adj, request_timeout_s)
