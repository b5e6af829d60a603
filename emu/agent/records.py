"""The node's CSV records (sent, received, commands), buffered and flushed every second."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

FLUSH_INTERVAL = 1.0
SENT = ("id", "stream", "source", "t_sent", "dropped")
RECEIVED = ("id", "stream", "source", "sink", "t_sent", "t_received", "hops")
COMMANDS = ("id", "command", "t_received", "t_done", "ok")


class _Table:
    """One CSV file: rows wait in a list until the next flush appends them."""

    def __init__(self, path: Path, header: tuple[str, ...]) -> None:
        self.path = path
        self.header = header
        self.rows: list[tuple] = []
        self.file: Any = None
        self.writer: Any = None

    def flush(self) -> None:
        rows, self.rows = self.rows, []
        if self.file is None:
            if not rows:
                return
            fresh = not self.path.exists() or self.path.stat().st_size == 0
            import csv  # at the first row: an idle node never loads it

            self.file = self.path.open("a", newline="")
            self.writer = csv.writer(self.file)
            if fresh:
                self.writer.writerow(self.header)
        self.writer.writerows(rows)
        self.file.flush()

    def close(self) -> None:
        self.flush()
        if self.file is not None:
            os.fsync(self.file.fileno())
            self.file.close()
            self.file = None


class Records:
    """sent.csv: every message the node's drivers emitted (`dropped` when the access link
    lost it);
    received.csv: every message a sink operator of this node got; commands.csv: every request.

    Rows are added on the scheduler thread; the first row after a flush sets the next one
    `FLUSH_INTERVAL` later through `at` (the scheduler's), so an idle node never wakes for it.
    """

    def __init__(self, directory: str | Path, at: Callable[..., None],
                 clock: Callable[[], float]) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        if not os.access(self.directory, os.W_OK):
            raise PermissionError(f"records directory {self.directory} is not writable")
        self._sent = _Table(self.directory / "sent.csv", SENT)
        self._received = _Table(self.directory / "received.csv", RECEIVED)
        self._commands = _Table(self.directory / "commands.csv", COMMANDS)
        self._tables = (self._sent, self._received, self._commands)
        self._at = at
        self._clock = clock
        self._due = False
        self.sent_count = 0
        self.received_count = 0

    def sent(self, message_id: int, stream: str, source: str, t_sent: float,
             dropped: bool) -> None:
        self._sent.rows.append((message_id, stream, source, t_sent, int(dropped)))
        self.sent_count += 1
        if not self._due:
            self._arm()

    def received(self, message_id: int, stream: str, source: str, sink: str, t_sent: float,
                 t_received: float, hops: int) -> None:
        self._received.rows.append((message_id, stream, source, sink, t_sent, t_received, hops))
        self.received_count += 1
        if not self._due:
            self._arm()

    def command(self, request_id: str | None, command: str | None, t_received: float,
                t_done: float, ok: bool) -> None:
        self._commands.rows.append((request_id, command, t_received, t_done, int(ok)))
        if not self._due:
            self._arm()

    def _arm(self) -> None:
        self._due = True
        self._at(self._clock() + FLUSH_INTERVAL, self._timed_flush)

    def _timed_flush(self) -> None:
        self._due = False
        self.flush()

    def flush(self) -> None:
        for table in self._tables:
            table.flush()

    def close(self) -> None:
        """Flush everything to disk; call once the scheduler has stopped."""
        for table in self._tables:
            table.close()
