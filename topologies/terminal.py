"""What foglab's command lines print, and where: a command's result (tables, summaries) on
stdout, its errors, warnings, notes (stdlib logging) and progress on stderr.

Every command line (`experiments.cli`, `emu.cli.main`) prints through this module, so a user's text
(a file path, `KEY=[v1,v2]`, an error from a library) is never read as rich markup, and output
sent to a file is as wide as it needs to be instead of cut at 80 columns. Progress is live bars
on a terminal and a plain line every few seconds in a log or a pipe; `-q` hides it and the
notes, `-v` shows debug lines (`verbosity`). A bad path or value given to a command is refused
here too (file_to_write, folder_to_write, positive, ...): one line naming the option and the
value, exit 3 (bad input), before the command makes anything.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

from rich.console import Console
from rich.highlighter import NullHighlighter
from rich.logging import RichHandler
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from topologies.exit_codes import ExitCode

# Output to a file or a pipe: tables keep every column whole, long lines stay on one line.
LOG_WIDTH = 1000
# How often a long step says where it is when nobody watches a terminal.
LOG_EVERY_S = 5.0

# The command's result: stdout (what `foglab ... > file` keeps).
console = Console(highlight=False)
# Everything else: errors, warnings, notes and progress, on stderr.
messages = Console(stderr=True, highlight=False)
# The packages whose loggers (`logging.getLogger(__name__)`) the command line shows.
LOGGERS = ("experiments", "sim", "emu", "topologies", "workloads", "foglab")
_level = [logging.INFO]  # the command line's verbosity (`verbosity`)
_recorders: list[list[str]] = []  # the errors said inside each open `errors_said` block


def fit_output() -> None:
    """Size the consoles for where their output goes now: a terminal's width, or wide for a
    log.

    Called at the start of each command, because what stdout is can change between calls in
    one process (tests, notebooks)."""
    for each in (console, messages):
        if not each.is_terminal:
            each.width = LOG_WIDTH


class _Prefixed(logging.Formatter):
    """A log record as the command line says it: `warning: ...` above info, the text alone
    below."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.ERROR:
            return f"error: {text}"
        return f"warning: {text}" if record.levelno >= logging.WARNING else text


def verbosity(level: int = logging.INFO) -> None:
    """Show the packages' log records at `level` and above on stderr through rich's handler
    (-q: WARNING, no progress bars; default INFO; -v: DEBUG, with time, level and source)."""
    _level[0] = level
    detailed = level <= logging.DEBUG
    handler = RichHandler(console=messages, show_time=detailed, show_level=detailed,
                          show_path=detailed, markup=False, highlighter=NullHighlighter(),
                          rich_tracebacks=False)
    handler.setFormatter(_Prefixed("%(message)s"))
    handler.set_name("foglab")
    for name in LOGGERS:
        logger = logging.getLogger(name)
        for old in [h for h in logger.handlers if h.get_name() == "foglab"]:
            logger.removeHandler(old)
        logger.addHandler(handler)
        logger.setLevel(level)  # propagated still: a root handler (pytest's caplog) sees them


def quiet() -> bool:
    """Whether -q asked for warnings and errors only (no notes, no progress)."""
    return _level[0] > logging.INFO


def error(message: object, hint: str | None = None) -> None:
    """`error: <message>` in red on stderr, the message as written (no markup read in it)."""
    line = Text.assemble(("error: ", "red"), str(message))
    if hint:
        line.append(f"\n({hint})")
    for recorder in _recorders:
        recorder.append(str(message) + (f" ({hint})" if hint else ""))
    messages.print(line, soft_wrap=True)


def warning(message: object) -> None:
    """`warning: <message>` in yellow on stderr."""
    messages.print(Text.assemble(("warning: ", "yellow"), str(message)), soft_wrap=True)


def note(message: object) -> None:
    """A line about the command's work (not its result): an info record of the `foglab`
    logger, on stderr as written once `verbosity` set it up; none with -q."""
    logging.getLogger("foglab").info("%s", message)


def say(message: object, style: str | None = None) -> None:
    """A line of the command's result on stdout, printed as written."""
    console.print(Text(str(message), style=style or ""), soft_wrap=True)


@contextlib.contextmanager
def errors_said() -> Iterator[list[str]]:
    """The messages `error` says while inside, in order (a --json document's error)."""
    said: list[str] = []
    _recorders.append(said)
    try:
        yield said
    finally:
        _recorders.remove(said)


@contextlib.contextmanager
def results_withheld() -> Iterator[None]:
    """Nothing printed on stdout through `console` while inside (a --json command prints its
    one document there instead); stderr is left as it is."""
    console.file = io.StringIO()
    try:
        yield
    finally:
        console.file = None  # stdout again, whatever sys.stdout is then


def bars(counted: bool = True, every: float = LOG_EVERY_S) -> Progress:
    """The progress of a long command, on stderr: bars that vanish when done on a terminal;
    elsewhere a line per running task every `every` seconds; nothing with -q."""
    columns = [TextColumn("{task.description}", markup=False), BarColumn()]
    if counted:
        columns.append(MofNCompleteColumn())
    columns.append(TimeElapsedColumn())
    if quiet():
        return Progress(*columns, console=messages, disable=True)
    if messages.is_terminal:
        return Progress(*columns, console=messages, transient=True)
    return LogProgress(*columns, console=messages, every=every)


def refuse(message: object) -> NoReturn:
    """A bad option or argument: its one-line error, and exit 3 (bad input) before anything is
    made."""
    import typer  # the command line's; the rest of this module is used without it too

    error(message)
    raise typer.Exit(ExitCode.BAD_INPUT)


def file_to_write(option: str, path: Path) -> Path:
    """`path`, checked as a file a command will write (`--out x.json`): in a folder that
    exists and can be written, and not a folder itself; else refused (exit 3)."""
    parent = path.parent  # "." for a bare name
    if path.is_dir():
        refuse(f"{option} {path}: is a folder; give a file's path")
    if not parent.exists():
        refuse(f"{option} {path}: folder {parent} does not exist")
    if not parent.is_dir():
        refuse(f"{option} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK):
        refuse(f"{option} {path}: folder {parent} cannot be written (permission denied)")
    return path


def folder_to_write(option: str, path: Path) -> Path:
    """`path`, checked as a folder a command writes into, made if need be (`--out results`):
    a folder, or nothing yet under a folder that can be written; else refused (exit 3)."""
    if path.exists() and not path.is_dir():
        refuse(f"{option} {path}: is a file; give a folder")
    existing = next(p for p in (path, *path.parents) if p.exists() or p == Path("."))
    if existing != path and not existing.is_dir():
        refuse(f"{option} {path}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK):
        refuse(f"{option} {path}: folder {existing} cannot be written (permission denied)")
    return path


def folder_to_read(option: str, path: Path) -> Path:
    """`path`, checked as a folder that exists (`--root results`); else refused (exit 3)."""
    if not path.exists():
        refuse(f"{option} {path}: the folder does not exist")
    if not path.is_dir():
        refuse(f"{option} {path}: is a file; give a folder")
    return path


def positive(option: str, value: float) -> float:
    """A quantity that must be above zero (`--seconds`, `--timeout`); else refused (exit 3)."""
    if not value > 0:  # NaN too
        refuse(f"{option} {value:g}: must be above 0")
    return value


def one_of(option: str, value: str, known) -> str:
    """A value from a known set (`--dataset city`); else refused naming them (exit 3)."""
    if value not in known:
        refuse(f"{option} {value!r}: expected one of {', '.join(known)}")
    return value


class LogProgress(Progress):
    """Progress for a log: no live display, but every `every` seconds one line with each
    visible task, as live bars would show them (`[   35s] runs: 0/1 (0%) | run p0 r0: 35/600
    (6%)`), and nothing when no task is visible."""

    def __init__(self, *columns, console: Console, every: float = LOG_EVERY_S):
        super().__init__(*columns, console=console, disable=True)
        self.every = every
        self._started = time.monotonic()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._started = time.monotonic()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._tell, name="progress-log", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _tell(self) -> None:
        while not self._stopping.wait(self.every):
            line = self.line()
            if line:
                self.console.print(Text(line), soft_wrap=True)
                self.console.file.flush()

    def line(self) -> str | None:
        """What a progress line says now, or None when no task is visible."""
        with self._lock:
            tasks = [t for t in self._tasks.values() if t.visible]
        parts = []
        for task in tasks:
            part = task.description
            if task.total is not None and task.total > 0:
                part += (f": {_number(task.completed)}/{_number(task.total)} "
                         f"({_percent(task.completed / task.total)})")
            parts.append(part)
        if not parts:
            return None
        return f"[{time.monotonic() - self._started:6.0f}s] " + " | ".join(parts)


class Stop(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread as Ctrl-C is, so that whatever cleans up
    after a Ctrl-C cleans up after them too; `signal` says which."""

    def __init__(self, number: int | str = signal.SIGINT):
        # A name too: SimPy rebuilds an exception raised inside a process from its args.
        which = signal.Signals[number] if isinstance(number, str) else signal.Signals(number)
        super().__init__(which.name)
        self.signal = which


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_blocks: list[list[int]] = []  # the stop signals each open stop_on_signals block received


def stop_requested() -> KeyboardInterrupt | None:
    """The interrupt the innermost stop_on_signals block was sent, if any. A handler's
    KeyboardInterrupt can be lost: raised inside a callback the interpreter runs and swallows
    (an import lock's weakref callback: "Exception ignored in ..."), and later signals are
    ignored as the clean-up's; a loop that waits (emu.cluster.hold) asks this."""
    if not _blocks or not _blocks[-1]:
        return None
    number = _blocks[-1][0]
    return KeyboardInterrupt() if number == signal.SIGINT else Stop(number)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP interrupt the main thread as Ctrl-C does, while inside; so does
    SIGINT, even in a process started with it ignored (a shell's background job). Only the
    first signal interrupts: what it starts is the clean-up (containers, networks, relays),
    which a second one (a supervisor's TERM after the shell's, a second Ctrl-C) must not cut
    short, so later ones are noted and ignored until the block is left. Outside the main
    thread (signals cannot be set there) it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopping: list[int] = []

    def stop(number: int, frame: object) -> None:
        if stopping:
            warning(f"{signal.Signals(number).name} again: still cleaning up after the first, "
                    "please wait")
            return
        stopping.append(number)
        if number == signal.SIGINT:
            raise KeyboardInterrupt  # as Python's own handler: "interrupted by the user"
        raise Stop(number)

    previous = {number: signal.signal(number, stop) for number in STOP_SIGNALS}
    _blocks.append(stopping)
    try:
        yield
    finally:
        _blocks.remove(stopping)
        for number, handler in previous.items():
            signal.signal(number, handler)


def exit_code(interrupt: KeyboardInterrupt) -> int:
    """The shell's code for a process ended by the signal: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + int(getattr(interrupt, "signal", signal.SIGINT))


def _percent(share: float) -> str:
    """`25%`, `6.3%`: a tenth of a per cent where the share has one (a long run moves by 0.1 %)."""
    return f"{100 * share:.1f}".removesuffix(".0") + "%"


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 10 or value == int(value) else f"{value:.2f}"


__all__ = ["LOGGERS", "LOG_EVERY_S", "LogProgress", "Stop", "bars", "console", "error",
           "errors_said", "escape", "exit_code", "file_to_write", "fit_output",
           "folder_to_read", "folder_to_write", "messages", "note", "one_of", "positive",
           "quiet", "refuse", "results_withheld", "say", "stop_on_signals", "verbosity",
           "warning"]
