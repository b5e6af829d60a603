"""The node's CSV records: sent, received and commands buffered and flushed every second;
an operator's own (filtered inputs, window outputs) written row by row."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

FLUSH_INTERVAL = 1.0
SENT = ("id", "stream", "source", "t_sent", "dropped")
RECEIVED = ("id", "stream", "source", "sink", "t_sent", "t_received", "hops")
COMMANDS = ("id", "command", "t_received", "t_done", "ok")
# A row per window output (emu.agent.operators): host-clock times of the output and of the
# window's first event, the window's number and extent in seconds (time windows) or events
# (count windows) since the run's epoch, the serial numbers of its first and last events,
# how many it held and its aggregate's value; during a parallel migration, the migration's
# number (-1 outside one) and whether the consistency checker adjusted its SN and count.
WINDOWS = ("t", "operator", "node", "window", "start", "end", "first_sn", "last_sn", "count",
           "value", "t_first", "migration", "adjusted")


class _Table:
    """One CSV file: rows wait in a list until the next flush appends them, in one write."""

    def __init__(self, path: Path, header: tuple[str, ...]) -> None:
        self.path = path
        self.header = header
        self.rows: list[tuple] = []
        self.descriptor: int | None = None

    def flush(self) -> None:
        rows, self.rows = self.rows, []
        if not rows:
            return
        import csv  # at the first row: an idle node never loads it
        import io

        text = io.StringIO()
        writer = csv.writer(text)
        if self.descriptor is None:
            self.descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            if os.fstat(self.descriptor).st_size == 0:
                writer.writerow(self.header)
        writer.writerows(rows)
        data = memoryview(text.getvalue().encode())
        # One write(2) of whole lines: a kill leaves the rows before it intact (a partial
        # write, only on a fatal signal amid a large one, ends in a cut line the reader drops).
        while data:
            data = data[os.write(self.descriptor, data):]

    def close(self) -> None:
        self.flush()
        if self.descriptor is not None:
            os.fsync(self.descriptor)
            os.close(self.descriptor)
            self.descriptor = None


class Records:
    """sent.csv: every message the node's drivers emitted (`dropped` when the access link
    lost it);
    received.csv: every message a sink operator of this node got; commands.csv: every request.

    Rows are added on the scheduler thread; the first row after a flush sets the next one
    `FLUSH_INTERVAL` later through `at` (the scheduler's), so an idle node never wakes for it.

    What a kill costs: each flush hands its rows to the kernel in one write, and the records
    directory is a host folder bind-mounted into the node's container, so what was flushed
    outlives the agent and its container (`docker kill`). A node killed
    without SIGTERM loses at most the rows of its last FLUSH_INTERVAL (plus however late a
    busy scheduler runs the flush); only a host crash loses more (no fsync but at `close`).
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
                 t_received: float, hops: int, now: bool = False) -> None:
        """`now`: written at once, not at the next flush (a checkpointing instance's input:
        a crash must not take the record of what it had processed along with it)."""
        self._received.rows.append((message_id, stream, source, sink, t_sent, t_received, hops))
        self.received_count += 1
        if now:
            self._received.flush()
        elif not self._due:
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


def _csv_field(value: object) -> str:
    text = str(value)
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


class RowLog:
    """A CSV file in a node's records directory written a row at a time, unbuffered, for rows
    an operator writes now and then: the agent ends with os._exit once `Records` are flushed,
    so rows held here would lose the run's last second. Writes the header to a new file."""

    def __init__(self, directory: str, name: str, header: tuple[str, ...]) -> None:
        self.path = os.path.join(directory, name)
        self.header = header
        self.fd: int | None = None

    def write(self, row: tuple) -> None:
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            if os.fstat(self.fd).st_size == 0:
                os.write(self.fd, (",".join(self.header) + "\n").encode())
        os.write(self.fd, (",".join(map(_csv_field, row)) + "\n").encode())

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def trim_cut_lines(directory: str | Path) -> None:
    """Drop a last line cut short in a node's CSV records (an agent killed amid a write):
    before they are read, and before an agent started again appends to them."""
    for path in Path(directory).glob("*.csv"):
        with path.open("rb+") as records:
            size = records.seek(0, 2)
            if size == 0:
                continue
            records.seek(max(0, size - 1))
            if records.read(1) == b"\n":
                continue
            records.seek(0)
            data = records.read()
            records.truncate(data.rfind(b"\n") + 1)
