"""The node's CSV records: sent, received and commands buffered and flushed every second;
an operator's own (filtered inputs, window outputs) written row by row."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

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
        self.sent_by_stream: dict[str, int] = {}  # what a ping tells a run's re-placement
        self.received_count = 0

    def sent(self, message_id: int, stream: str, source: str, t_sent: float,
             dropped: bool) -> None:
        self._sent.rows.append((message_id, stream, source, t_sent, int(dropped)))
        self.sent_count += 1
        self.sent_by_stream[stream] = self.sent_by_stream.get(stream, 0) + 1
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


class UnsafeRecord(OSError):
    """A name in a node's records folder that the host will not open: a symbolic link (to a
    file or a folder), or anything but a regular file (a FIFO, a device, a socket)."""


class UnsafeRecordWarning(UserWarning):
    """A records file the host skipped (UnsafeRecord); the message names the node and file."""


# Host side. A node's records folder is writable from its container, where anything the
# experiment runs may plant a link there (`sent.csv -> /etc/passwd`) or a FIFO; the host
# works there as root, so it opens every name without following a link, at each folder on
# the way (O_NOFOLLOW), and works only on a regular file (fstat): a FIFO is opened without
# waiting for a writer (O_NONBLOCK) and refused.
_SAFE = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
TAIL_BLOCK = 64 * 1024


def open_record(directory: str | Path, name: str | Path, flags: int = os.O_RDONLY,
                mode: int = 0o644) -> int:
    """A descriptor of `directory`/`name` (name may hold folders: `op/progress.jsonl`), each
    step opened without following a link; raises UnsafeRecord naming the path when a step is
    a link or the file is no regular file (the descriptor is then closed; `flags` never hold
    O_TRUNC: truncate after the check). FileNotFoundError when it is not there."""
    if flags & os.O_TRUNC:
        raise ValueError("open_record truncates nothing before its check: ftruncate after")
    parts = Path(name).parts
    folder = _open_folder(directory, directory, ".")
    try:
        for part in parts[:-1]:
            inner = _open_folder(part, directory, name, folder)
            os.close(folder)
            folder = inner
        try:
            descriptor = os.open(parts[-1], flags | _SAFE, mode, dir_fd=folder)
        except OSError as error:
            if error.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise _unsafe(error.errno, directory, name, "a link or no regular file"
                              ) from None
            raise
    finally:
        os.close(folder)
    kind = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(kind):
        os.close(descriptor)
        raise _unsafe(errno.EINVAL, directory, name,
                      f"no regular file ({stat.filemode(kind)})")
    os.set_blocking(descriptor, True)
    return descriptor


def _open_folder(step: str | Path, directory: str | Path, name: str | Path,
                 folder: int | None = None) -> int:
    try:
        return os.open(step, os.O_RDONLY | os.O_DIRECTORY | _SAFE, dir_fd=folder)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _unsafe(error.errno, directory, name,
                          f"behind {Path(step).name!r}, a link or no folder") from None
        raise


def _unsafe(number: int, directory: str | Path, name: str | Path, what: str) -> UnsafeRecord:
    """The error naming the node (its records folder's name), the file and the folder."""
    path = Path(directory) / name
    return UnsafeRecord(number, f"node {Path(directory).name}: {str(name)!r} in its records "
                        f"({path}) is {what}; not opened", str(path))


def write_record(directory: str | Path, name: str, data: bytes) -> None:
    """Write a whole file into a node's records folder as the host: into a new file of a
    random name (O_EXCL, never a link), then renamed over `name`, which replaces a link or
    file planted there rather than following it."""
    import secrets

    folder = _open_folder(directory, directory, name)
    temporary = f".{name}.{secrets.token_hex(6)}"
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _SAFE, 0o644,
                             dir_fd=folder)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(descriptor, view):]
        finally:
            os.close(descriptor)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
    finally:
        os.close(folder)


def warn_unsafe(error: UnsafeRecord) -> None:
    """Say what was skipped: a planted link must not be read into the results, nor end the
    reading of everyone else's."""
    warnings.warn(f"records skipped: {error.strerror}", UnsafeRecordWarning, stacklevel=3)


def read_record(directory: str | Path, name: str | Path) -> BinaryIO | None:
    """A node's records file opened to read, or None when it is missing or unsafe (a link,
    no regular file: skipped with an UnsafeRecordWarning)."""
    try:
        return os.fdopen(open_record(directory, name), "rb")
    except FileNotFoundError:
        return None
    except UnsafeRecord as error:
        warn_unsafe(error)
        return None


def record_names(directory: str | Path, suffix: str = "") -> list[str]:
    """The regular files directly in a node's records folder whose names end in `suffix`,
    listed without following the folder or any entry if it is a link; any other entry of
    such a name (a link, a FIFO) is skipped with a warning."""
    folder = _open_folder(directory, directory, ".")
    try:
        with os.scandir(folder) as entries:
            found = {e.name: e.stat(follow_symlinks=False).st_mode for e in entries
                     if e.name.endswith(suffix)}
    finally:
        os.close(folder)
    for name, kind in found.items():
        if not stat.S_ISREG(kind):
            warn_unsafe(_unsafe(errno.EINVAL, directory, name,
                                f"no regular file ({stat.filemode(kind)})"))
    return sorted(name for name, kind in found.items() if stat.S_ISREG(kind))


def trim_cut_lines(directory: str | Path) -> None:
    """Drop a last line cut short in a node's CSV records (an agent killed amid a write):
    before they are read, and before an agent started again appends to them. A link or any
    other file that is not regular is left alone, with a warning (UnsafeRecord); the last
    newline is looked for backwards from the end, a block at a time, never the whole file."""
    try:
        names = record_names(directory, ".csv")
    except UnsafeRecord as error:
        warn_unsafe(error)
        return
    for name in names:
        try:
            descriptor = open_record(directory, name, os.O_RDWR)
        except UnsafeRecord as error:  # replaced by a link since it was listed
            warn_unsafe(error)
            continue
        try:
            end = _after_last_newline(descriptor)
            if end is not None:
                os.ftruncate(descriptor, end)
        finally:
            os.close(descriptor)


def _after_last_newline(descriptor: int) -> int | None:
    """Where the file's last whole line ends (0: none), or None when it ends in a newline
    (or is empty): read backwards from the end, TAIL_BLOCK bytes at a time."""
    end = os.fstat(descriptor).st_size
    if end == 0 or os.pread(descriptor, 1, end - 1) == b"\n":
        return None
    while end > 0:
        start = max(0, end - TAIL_BLOCK)
        block = os.pread(descriptor, end - start, start)
        cut = block.rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0
