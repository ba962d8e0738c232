"""Progress of a sweep: a one-line counter on stderr, or any callback (a notebook passes one that
moves an ipywidgets bar; this module never imports ipywidgets).

A progress hook is a callable ``hook(done: int, total: int, label: str)``, called before each case
(``done`` cases finished) and once more at the end with ``done == total``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TextIO

ProgressHook = Callable[[int, int, str], None]


class TerminalProgress:
    """``[ 3/44] rms_norm torch 8192x1024 fwd`` rewritten in place on a terminal, one line per
    case when the stream is not a terminal (logs, CI)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._width = 0

    def __call__(self, done: int, total: int, label: str) -> None:
        digits = len(str(total))
        text = f"[{done:>{digits}}/{total}] {label}"
        if self.tty:
            pad = max(0, self._width - len(text))
            self.stream.write("\r" + text + " " * pad + ("\n" if done == total else ""))
            self._width = len(text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()


def resolve(progress: bool | str | ProgressHook | None) -> ProgressHook | None:
    """None/False: silent; True or "terminal": TerminalProgress on stderr; a callable: itself."""
    if progress is None or progress is False:
        return None
    if progress is True or progress == "terminal":
        return TerminalProgress()
    if callable(progress):
        return progress
    raise TypeError(f"progress must be None, True, 'terminal' or a callable, got {progress!r}")
