"""The image-build lock: one build of an image at a time across threads and processes, and no lock file left."""

from __future__ import annotations

import threading
import time

from pacore_agents.swe import images


def test_the_lock_file_is_removed_after_the_build(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "LOCK_DIR", tmp_path)
    with images.build_lock("pacore-swe-task:one"):
        assert len(list(tmp_path.iterdir())) == 1  # held: its file is there
    with images.build_lock("pacore-swe-task:one"), images.build_lock("pacore-swe-task:two"):  # names lock apart
        pass
    assert list(tmp_path.iterdir()) == []


def test_builds_of_one_image_never_overlap_while_lock_files_come_and_go(tmp_path, monkeypatch):
    """A waiter that got the lock on a file the holder has just removed must not build beside the next comer."""
    monkeypatch.setattr(images, "LOCK_DIR", tmp_path)
    inside, most, lock = 0, 0, threading.Lock()

    def builds() -> None:
        nonlocal inside, most
        for _ in range(50):
            with images.build_lock("pacore-swe-task:same"):
                with lock:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.001)  # a build takes a while: the others queue on the file meanwhile
                with lock:
                    inside -= 1

    threads = [threading.Thread(target=builds) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1
    assert list(tmp_path.iterdir()) == []
