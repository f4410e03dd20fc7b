"""Space out CPython's full garbage collections while PaCoRe runs are in flight.

Why: every in-flight trajectory holds about 200 GC-tracked objects (LangGraph's task machinery, the
HTTP request). CPython starts a full collection whenever the objects promoted to its oldest generation
have grown by a quarter, and each full pass walks every tracked object with the event loop stopped.
At 1024 trajectories in flight that is a 150-300 ms stall every few hundred trajectories, during which
finished responses wait to be read (measured with ``pacore bench overhead``: about 5% more wall time
and 0.3 ms more CPU per trajectory at [32, 4]).

While at least one run is in flight, the oldest generation's threshold is raised so that full passes
are about ten times rarer; young collections are unchanged, so short-lived cycles are still freed
promptly. The previous thresholds come back when the last run ends, unless someone else changed them
meanwhile. The thresholds are process-wide state, so this is opt-in: ``PaCoReConfig(spaced_gc=True)``
(the ``pacore`` command and the benchmarks set it); by default the collector is left alone.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

FULL_PASS_THRESHOLD = 100  # young-generation passes between full ones; CPython's default is 10

_lock = threading.Lock()
_active_runs = 0
_restore: tuple[int, ...] | None = None  # the thresholds to put back when the last run ends
_applied: tuple[int, ...] | None = None  # what we set, to notice when someone else changed it


@contextmanager
def spaced_full_collections(enabled: bool = True) -> Iterator[None]:
    """Hold for the duration of one run; nesting and concurrent runs (any thread) are counted."""
    if not enabled:
        yield
        return
    global _active_runs, _restore, _applied
    with _lock:
        if _active_runs == 0:
            current = gc.get_threshold()
            if current[0] > 0 and current[2] < FULL_PASS_THRESHOLD:
                _restore, _applied = current, (current[0], current[1], FULL_PASS_THRESHOLD)
                gc.set_threshold(*_applied)
        _active_runs += 1
    try:
        yield
    finally:
        with _lock:
            _active_runs -= 1
            if _active_runs == 0 and _restore is not None:
                if gc.get_threshold() == _applied:
                    gc.set_threshold(*_restore)
                _restore = _applied = None
