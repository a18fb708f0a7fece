"""The removal of acked segments' files, on one background thread of a trainer end.

An ack is the append of its records to the end's ack log (the commit); the files of the
segments it commits then go. Their `unlink` runs on this thread, so that it overlaps the end's
next `get` (the GIL is released in the system call; on ext4 a segment's unlink waits some
120 us of its 170, measured on a 2-core VM). What stays true:
- a segment this end acked is never delivered by it again: it is in `Removals.acked` until its
  file is gone, and the end's listing leaves those out (a removal that failed keeps it there);
- `close` waits for every removal; the first that failed (a file already gone is no failure) is
  raised by the next `ack` or by `close`, once, never swallowed;
- a process that stops between an ack and the removal leaves the file, as before: the next
  trainer end delivers that segment again (at least once; the ack logs keep the first record);
- at most `IN_FLIGHT` acks wait for their removal: a further ack waits for the oldest (memory
  flat, and few files left by a process killed however far the removals lag); the thread is
  made at the first ack and drained when the process exits normally.
"""

from __future__ import annotations

import os
import queue
import threading
import weakref
from typing import Any

IN_FLIGHT = 8
"""Acks whose files wait for the thread, at most (`Removals.submit` waits for the oldest past
it)."""

_Job = tuple[tuple[str, ...], list[str]]
_Done = tuple[tuple[str, ...], list[tuple[str, BaseException]]]


class Removals:
    """A trainer end's removals of acked segments' files (module doc)."""

    def __init__(self) -> None:
        self.acked: set[str] = set()
        """Segments acked here whose files may still be there: never pending for this end."""
        self._error: BaseException | None = None
        self._worker: _Worker | None = None
        self._in_flight = 0

    def submit(self, segments: tuple[str, ...], paths: list[str]) -> None:
        """Remove `paths` (the files of `segments`, just acked) on the thread."""
        worker = self._worker
        if worker is None or not worker.thread.is_alive():  # the first ack, or after a fork
            worker = self._worker = _Worker()
            self._in_flight = 0
        self.acked.update(segments)
        worker.todo.put((segments, paths))
        self._in_flight += 1
        while self._in_flight > IN_FLIGHT:  # wait for the oldest
            self._take(worker.done.get())

    def reap(self) -> None:
        """Take in the removals done: their segments leave `acked`, except those whose file
        could not be removed; the first failure is kept for `raise_error`."""
        worker = self._worker
        if worker is None:
            return
        done = worker.done
        while not done.empty():
            self._take(done.get())

    def _take(self, result: _Done) -> None:
        self._in_flight -= 1
        segments, failed = result
        if failed:
            kept = {segment for segment, _ in failed}
            self.acked.difference_update(s for s in segments if s not in kept)
            if self._error is None:
                self._error = failed[0][1]
        else:
            self.acked.difference_update(segments)

    def raise_error(self) -> None:
        """Raise the first removal that failed and was not raised yet."""
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """Wait for every removal (the thread ends), then take them in."""
        worker = self._worker
        if worker is not None:
            worker.stop()
            self.reap()
            self._worker = None


class _Worker:
    """The thread and what it shares with the end: jobs in, results out, in order. It
    holds no reference to the end (an end dropped without `close` is drained by `stop`, from
    a finaliser, also when the process exits)."""

    def __init__(self) -> None:
        self.todo: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[_Done] = queue.SimpleQueue()
        self.thread = threading.Thread(target=_work, args=(self.todo, self.done),
                                       name="gyre-channel-removals", daemon=True)
        self.thread.start()
        self.stop = weakref.finalize(self, _stop, self.todo, self.thread)


def _stop(todo: queue.SimpleQueue[Any], thread: threading.Thread) -> None:
    if thread.is_alive():
        todo.put(None)
        thread.join()


def _work(todo: queue.SimpleQueue[_Job | None], done: queue.SimpleQueue[_Done]) -> None:
    while (job := todo.get()) is not None:
        segments, paths = job
        failed: list[tuple[str, BaseException]] = []
        for segment, path in zip(segments, paths):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass  # gone already (another end's ack of it, or a hand)
            except Exception as err:  # never lost: raised by the end's next ack or close
                failed.append((segment, err))
        done.put((segments, failed))
