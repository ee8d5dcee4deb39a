"""Task sources: where a run's train and held-out tasks come from (chosen by ``class_path``)."""

from __future__ import annotations

import functools
import random
from abc import ABC, abstractmethod

from slca_lightning.data.suite import builtin_suite
from slca_lightning.data.synthetic import SyntheticTaskGenerator
from slca_lightning.data.tasks import load_jsonl_tasks
from slca_lightning.data.toucan import load_toucan_rl
from slca_lightning.types import Task


class TaskSource(ABC):
    """Provides the train and held-out task lists, and the local tool functions, if any."""

    @abstractmethod
    def train(self) -> list[Task]:
        """Tasks to train on."""

    def heldout(self) -> list[Task]:
        """Tasks to evaluate on (default: none)."""
        return []

    def functions(self) -> dict:
        """Real local implementations of the tools, for the PythonBackend (default: none)."""
        return {}


class SyntheticTasks(TaskSource):
    """The built-in synthetic tool suite (see :mod:`slca_lightning.data.synthetic`).

    Args:
        n_train: train tasks.
        n_heldout: held-out tasks (never overlapping the train tasks).
        seed: generator seed.
        families: tool families (None = all).
        irrelevant_fraction, parallel_fraction, multistep_fraction: task-kind mix.
    """

    def __init__(
        self,
        n_train: int = 256,
        n_heldout: int = 64,
        seed: int = 0,
        families: list[str] | None = None,
        irrelevant_fraction: float = 0.15,
        parallel_fraction: float = 0.3,
        multistep_fraction: float = 0.2,
    ) -> None:
        self.n_train, self.n_heldout = n_train, n_heldout
        self.generator = SyntheticTaskGenerator(
            seed=seed,
            families=families,
            irrelevant_fraction=irrelevant_fraction,
            parallel_fraction=parallel_fraction,
            multistep_fraction=multistep_fraction,
        )

    @functools.cached_property
    def _splits(self) -> tuple[list[Task], list[Task]]:
        return self.generator.splits(self.n_train, self.n_heldout)

    def train(self) -> list[Task]:
        return self._splits[0]

    def heldout(self) -> list[Task]:
        return self._splits[1]

    def functions(self) -> dict:
        return dict(builtin_suite().functions)


class _FileTasks(TaskSource):
    def __init__(
        self,
        path: str,
        heldout_path: str | None = None,
        heldout_fraction: float = 0.0,
        seed: int = 0,
    ):
        if not 0.0 <= heldout_fraction < 1.0:
            raise ValueError(f"heldout_fraction must be in [0, 1), got {heldout_fraction}")
        self.path, self.heldout_path = path, heldout_path
        self.heldout_fraction, self.seed = heldout_fraction, seed

    def _load(self, path: str) -> list[Task]:
        raise NotImplementedError

    @functools.cached_property
    def _splits(self) -> tuple[list[Task], list[Task]]:
        tasks = self._load(self.path)
        if self.heldout_path:
            return tasks, self._load(self.heldout_path)
        order = list(range(len(tasks)))
        random.Random(self.seed).shuffle(order)
        k = round(len(tasks) * self.heldout_fraction)
        return [tasks[i] for i in sorted(order[k:])], [tasks[i] for i in sorted(order[:k])]

    def train(self) -> list[Task]:
        return self._splits[0]

    def heldout(self) -> list[Task]:
        return self._splits[1]


class ToucanTasks(_FileTasks):
    """Toucan RL rows (verl layout) from a JSONL file; optional held-out file or split.

    Args:
        path: the RL JSONL file.
        heldout_path: a separate held-out file (overrides ``heldout_fraction``).
        heldout_fraction: fraction of ``path`` held out (seeded split).
        seed: split seed.
    """

    def _load(self, path: str) -> list[Task]:
        return load_toucan_rl(path)


class JsonlTasks(_FileTasks):
    """Tasks in the project's own JSONL format (:mod:`slca_lightning.data.tasks`)."""

    def _load(self, path: str) -> list[Task]:
        return load_jsonl_tasks(path)
