"""`pin` / `unpin`: CPU pinning reaches every thread of the process and is undone afterwards.

Linux `sched_setaffinity(0)` moves only the calling thread; a thread started earlier (the asyncio
to_thread pool that prepared the run, and the sandbox children it spawns) kept every core, and a
second run in the same process (bench/pipeline.py's async after sync) found only the rollout core
left and put its trainer there too.
"""

from __future__ import annotations

import os
import threading

import pytest

from inhabit.placement.trainer_local import pin, unpin

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


def test_pin_moves_threads_started_earlier_and_unpin_restores_them():
    everything = os.sched_getaffinity(0)
    first = min(everything)
    release = threading.Event()
    worker = threading.Thread(target=release.wait)
    worker.start()
    try:
        before = pin([first], None)
        assert before == everything
        assert os.sched_getaffinity(0) == {first}
        assert os.sched_getaffinity(worker.native_id) == {first}
        unpin(before)
        assert os.sched_getaffinity(0) == everything
        assert os.sched_getaffinity(worker.native_id) == everything
    finally:
        unpin(everything)
        release.set()
        worker.join()


def test_pin_without_cpus_changes_nothing():
    everything = os.sched_getaffinity(0)
    assert pin(None, None) == everything
    assert os.sched_getaffinity(0) == everything
