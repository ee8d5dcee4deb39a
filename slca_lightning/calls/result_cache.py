"""The simulator's observation cache: in memory, optionally backed by one SQLite file.

A key is a tuple of strings (the simulator uses tool name, canonical arguments, canonical
schema and, with ``cache_scope="task"``, the task id); it is stored as its sha256 hex digest
of the JSON of the tuple. The SQLite file is opened in WAL mode with one connection per
thread, so rollout worker threads and several processes (or two simulators in one process)
can share it; entries survive a process restart, so an identical rerun makes no backend
call. A broken or unwritable file never stops a run: the error is counted in
:attr:`SimulatorCache.stats` (``disk_errors``) and the memory cache keeps working.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections import OrderedDict

__all__ = ["SimulatorCache", "cache_digest"]

_SCHEMA = "CREATE TABLE IF NOT EXISTS observations (key TEXT PRIMARY KEY, value TEXT NOT NULL)"


def cache_digest(key: tuple[str, ...]) -> str:
    """The sha256 hex digest that stands for ``key`` in memory and on disk."""
    text = json.dumps(list(key), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class SimulatorCache:
    """Observation text per key, in an LRU memory layer over an optional SQLite file.

    Args:
        path: SQLite file (created with its folder); None keeps the cache in memory only.
        max_memory_entries: LRU bound of the memory layer (the file is unbounded).
        timeout_s: how long a writer waits for the SQLite lock.

    :attr:`stats` counts ``memory_hits``, ``disk_hits``, ``misses``, ``writes`` and
    ``disk_errors``.
    """

    def __init__(
        self,
        path: str | os.PathLike | None = None,
        max_memory_entries: int = 100_000,
        timeout_s: float = 30.0,
    ) -> None:
        self.path = None if path is None else os.fspath(path)
        self.max_memory_entries = max(1, int(max_memory_entries))
        self.timeout_s = timeout_s
        self._memory: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self._local = threading.local()
        self.stats = dict.fromkeys(
            ("memory_hits", "disk_hits", "misses", "writes", "disk_errors"), 0
        )
        if self.path is not None:
            folder = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(folder, exist_ok=True)
            self._connection()  # fail early on an unusable path

    def _connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, timeout=self.timeout_s, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
            conn.commit()
            self._local.conn = conn
        return conn

    def _bump(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def _remember(self, digest: str, value: str) -> None:
        with self._lock:
            self._memory[digest] = value
            self._memory.move_to_end(digest)
            while len(self._memory) > self.max_memory_entries:
                self._memory.popitem(last=False)

    def get(self, key: tuple[str, ...]) -> str | None:
        """The cached observation for ``key``, or None."""
        digest = cache_digest(key)
        with self._lock:
            value = self._memory.get(digest)
            if value is not None:
                self._memory.move_to_end(digest)
                self.stats["memory_hits"] += 1
                return value
        if self.path is not None:
            try:
                row = (
                    self._connection()
                    .execute("SELECT value FROM observations WHERE key = ?", (digest,))
                    .fetchone()
                )
            except sqlite3.Error:
                self._bump("disk_errors")
                row = None
            if row is not None:
                self._remember(digest, row[0])
                self._bump("disk_hits")
                return row[0]
        self._bump("misses")
        return None

    def put(self, key: tuple[str, ...], value: str) -> None:
        """Store ``value`` under ``key`` (in memory, and on disk when a path is set)."""
        digest = cache_digest(key)
        self._remember(digest, value)
        self._bump("writes")
        if self.path is None:
            return
        try:
            conn = self._connection()
            conn.execute(
                "INSERT OR REPLACE INTO observations (key, value) VALUES (?, ?)", (digest, value)
            )
            conn.commit()
        except sqlite3.Error:
            self._bump("disk_errors")

    def clear(self) -> None:
        """Forget every entry, in memory and on disk."""
        with self._lock:
            self._memory.clear()
        if self.path is not None:
            try:
                conn = self._connection()
                conn.execute("DELETE FROM observations")
                conn.commit()
            except sqlite3.Error:
                self._bump("disk_errors")

    def __len__(self) -> int:
        """Entries on disk when a path is set, else in memory."""
        if self.path is not None:
            try:
                return int(
                    self._connection().execute("SELECT COUNT(*) FROM observations").fetchone()[0]
                )
            except sqlite3.Error:
                self._bump("disk_errors")
        return len(self._memory)
