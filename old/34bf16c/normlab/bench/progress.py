"""Progress of a sweep, with elapsed time and an ETA: a one-line counter on stderr, a bar in a
notebook, or any callback (the explorer widget passes one that moves its own bar).

A progress hook is a callable ``hook(done: int, total: int, label: str)``, called before each case
(``done`` cases finished) and once more at the end with ``done == total``. ``sweep`` also calls
``hook.plan(seconds)`` first when the hook has that method: the estimated seconds of each case
(on a CPU) or None (on a GPU), so the ETA can weigh a 32768x8192 case above a 64x128 one.

This module imports ipywidgets only when a ``NotebookProgress`` is made inside a kernel.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import TextIO

ProgressHook = Callable[[int, int, str], None]


def format_duration(seconds: float) -> str:
    """``"8 s"``, ``"3 min 05 s"``, ``"2 h 07 min"``, ``"3 d 04 h"``: two units at most."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    return f"{s // 86400} d {s % 86400 // 3600:02d} h"


class Eta:
    """Elapsed time and time left of a run of ``total`` cases. With ``plan(seconds)`` (estimated
    seconds per case) the time left is the estimate of the cases left, scaled by how the finished
    cases compared with their estimate; without it, the mean time of a finished case."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.start: float | None = None
        self.estimates: list[float] | None = None

    def plan(self, seconds: Sequence[float] | None) -> None:
        self.estimates = list(seconds) if seconds is not None else None

    def update(self, done: int, total: int) -> tuple[float, float | None]:
        """(elapsed, left) in seconds at ``done`` of ``total``; left is None when unknown."""
        now = self.clock()
        if self.start is None or done == 0:
            self.start = now
        elapsed = now - self.start
        if done >= total:
            return elapsed, 0.0
        est = self.estimates
        if est is not None and len(est) == total:
            planned_done, planned_left = sum(est[:done]), sum(est[done:])
            if done == 0 or planned_done <= 0:
                return elapsed, planned_left
            return elapsed, planned_left * elapsed / planned_done
        if done == 0:
            return elapsed, None
        return elapsed, elapsed / done * (total - done)

    def text(self, done: int, total: int) -> str:
        elapsed, left = self.update(done, total)
        if done >= total:
            return f"{format_duration(elapsed)} in all"
        if left is None:
            return f"{format_duration(elapsed)} elapsed"
        approx = "~" if done == 0 else ""  # before the first case: the estimate alone
        return f"{format_duration(elapsed)} elapsed, ETA {approx}{format_duration(left)}"


def status_line(done: int, total: int, label: str, timing: str) -> str:
    """``[ 3/44] rms_norm torch 8192x1024 bf16 fwd  (12 s elapsed, ETA 3 min 05 s)``."""
    digits = len(str(total))
    return f"[{done:>{digits}}/{total}] {label}  ({timing})"


class TerminalProgress:
    """The status line rewritten in place (carriage return) on a terminal; one line per case
    when the stream is not a terminal (logs, CI)."""

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.eta = Eta(clock)
        self._width = 0

    def plan(self, seconds: Sequence[float] | None) -> None:
        self.eta.plan(seconds)

    def __call__(self, done: int, total: int, label: str) -> None:
        text = status_line(done, total, label, self.eta.text(done, total))
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad + ("\n" if done == total else ""))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def in_notebook() -> bool:
    """True inside a Jupyter kernel (IPython already imported and running a kernel)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return False
    shell = ipython.get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


class NotebookProgress:
    """In a notebook: an ipywidgets bar and the status line beside it when ipywidgets is
    importable, else the status line alone, updated in place in the cell's output."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        from IPython.display import display

        self.eta = Eta(clock)
        try:
            import ipywidgets as W
        except ImportError:
            W = None
        if W is not None:
            self.bar = W.IntProgress(value=0, min=0, max=1)
            self.line = W.Label(value="")
            self._handle = None
            display(W.HBox([self.bar, self.line]))
        else:
            self.bar = self.line = None
            self._handle = display("", display_id=True)

    def plan(self, seconds: Sequence[float] | None) -> None:
        self.eta.plan(seconds)

    def __call__(self, done: int, total: int, label: str) -> None:
        text = status_line(done, total, label, self.eta.text(done, total))
        if self.bar is not None:
            self.bar.max = max(int(total), 1)
            self.bar.value = int(done)
            self.line.value = text
        else:
            self._handle.update(text)


def resolve(progress: bool | str | ProgressHook | None) -> ProgressHook | None:
    """None/False: silent; "terminal": TerminalProgress on stderr; "notebook": NotebookProgress;
    True or "auto": NotebookProgress inside a Jupyter kernel, else TerminalProgress; a callable:
    itself."""
    if progress is None or progress is False:
        return None
    if progress is True or progress == "auto":
        return NotebookProgress() if in_notebook() else TerminalProgress()
    if progress == "terminal":
        return TerminalProgress()
    if progress == "notebook":
        return NotebookProgress()
    if callable(progress):
        return progress
    raise TypeError(
        f"progress must be None, True, 'auto', 'terminal', 'notebook' or a callable, "
        f"got {progress!r}"
    )
