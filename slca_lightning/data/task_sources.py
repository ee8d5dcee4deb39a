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

    The generator draws one deterministic sequence of distinct tasks ``syn-{seed}-{i}``;
    the train tasks are indices ``[train_start, train_start + n_train)`` of it and the
    held-out tasks ``[heldout_start, heldout_start + n_heldout)`` (``heldout_start``
    defaults to ``train_start + n_train``: the tasks right after the train ones). The two
    ranges may not overlap. The built-in ``suite-sft`` warm start trains on indices
    ``[0, 256)`` and ``[512, 1280)``: ``train_start=320, n_train=192, heldout_start=256``
    gives RL train tasks and held-out tasks the warm start never saw.

    Args:
        n_train: train tasks.
        n_heldout: held-out tasks (never overlapping the train tasks).
        seed: generator seed.
        families: tool families (None = all).
        irrelevant_fraction, parallel_fraction, multistep_fraction: task-kind mix.
        train_start: index of the first train task in the generated sequence.
        heldout_start: index of the first held-out task (None: ``train_start + n_train``).
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
        train_start: int = 0,
        heldout_start: int | None = None,
    ) -> None:
        heldout_start = train_start + n_train if heldout_start is None else heldout_start
        for name, value in (
            ("n_train", n_train), ("n_heldout", n_heldout),
            ("train_start", train_start), ("heldout_start", heldout_start),
        ):  # fmt: skip
            if value < 0:
                raise ValueError(f"SyntheticTasks.{name} must be >= 0, got {value}")
        if (
            n_train
            and n_heldout
            and train_start < heldout_start + n_heldout
            and heldout_start < train_start + n_train
        ):
            raise ValueError(
                f"SyntheticTasks: train tasks [{train_start}, {train_start + n_train}) overlap "
                f"held-out tasks [{heldout_start}, {heldout_start + n_heldout})"
            )
        self.n_train, self.n_heldout = n_train, n_heldout
        self.train_start, self.heldout_start = train_start, heldout_start
        self.generator = SyntheticTaskGenerator(
            seed=seed,
            families=families,
            irrelevant_fraction=irrelevant_fraction,
            parallel_fraction=parallel_fraction,
            multistep_fraction=multistep_fraction,
        )

    @functools.cached_property
    def _splits(self) -> tuple[list[Task], list[Task]]:
        end = max(self.train_start + self.n_train, self.heldout_start + self.n_heldout)
        tasks = self.generator.generate(end)
        return (
            tasks[self.train_start : self.train_start + self.n_train],
            tasks[self.heldout_start : self.heldout_start + self.n_heldout],
        )

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
