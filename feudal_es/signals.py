"""Ctrl-C and SIGTERM during training: finish the round in progress, checkpoint, stop.

A training loop runs inside :class:`StopOnSignals`; the first SIGINT/SIGTERM only sets
``signum`` (the loop finishes its round, checkpoints and raises
:class:`TrainingInterrupted` with ``graceful=True``); a second one raises it at once
(``graceful=False``: every completed round is kept). Handlers are installed only on the
main thread and only over the defaults, so a handler the caller installed is left alone.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["StopOnSignals", "TrainingInterrupted"]

log = logging.getLogger("feudal_es.trainer")


class TrainingInterrupted(KeyboardInterrupt):
    """Training stopped by SIGINT/SIGTERM. ``graceful``: the round in progress was
    finished and checkpointed; else every completed round was. ``round``: rounds done."""

    def __init__(self, signum: int, round_: int, graceful: bool):
        super().__init__(f"stopped by {signal.Signals(signum).name} after {round_} rounds")
        self.signum, self.round, self.graceful = signum, round_, graceful


class StopOnSignals:
    """Context manager: SIGINT/SIGTERM -> ``signum`` set (a second: stop at once).
    ``rounds_done()`` says how many rounds are complete, for the messages."""

    def __init__(self, rounds_done: Callable[[], int]):
        self.rounds_done = rounds_done
        self.signum: int | None = None
        self._installed: dict[int, Any] = {}

    def _on_signal(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise TrainingInterrupted(signum, self.rounds_done(), graceful=False)
        self.signum = signum
        log.warning("%s: finishing the round in progress (%d done so far), then "
                    "checkpointing and stopping (send it again to stop at once)",
                    signal.Signals(signum).name, self.rounds_done())

    def __enter__(self) -> StopOnSignals:
        self.signum = None
        if threading.current_thread() is not threading.main_thread():
            return self
        defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
        for s, default in defaults.items():
            previous = signal.getsignal(s)
            if previous is default:
                self._installed[s] = previous
                signal.signal(s, self._on_signal)
        return self

    def __exit__(self, *exc: object) -> None:
        for s, previous in self._installed.items():
            signal.signal(s, previous)
        self._installed = {}

    def stop(self, rounds_done: int) -> None:
        """Raise the graceful :class:`TrainingInterrupted` if a signal came (call it once
        the round is complete and checkpointed)."""
        if self.signum is not None:
            raise TrainingInterrupted(self.signum, rounds_done, graceful=True)
