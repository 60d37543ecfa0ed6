"""torch DataLoaders: a loader comes back as the same DataLoader (dataset, sampler with its
generator, batch size, collate and worker settings), its workers started again on the next
``iter()``; an iterator part-way through an epoch cannot come back.

A loader with ``persistent_workers`` keeps its live iterator, whose worker processes and
queues cannot be pickled, in ``_iterator`` (private, but it is the only place the loader
keeps it), and every later epoch only resets it (``_reset``): the sampler starts a new pass,
and no new seed for the workers is drawn. A new iterator would draw that seed from the
loader's generator, or from torch's global one, before the sampler draws its own (see
``_BaseDataLoaderIter.__init__``), so the resumed run's shuffle and dropout would differ
from an uninterrupted run's. So the saved loader holds a :class:`_RestartWorkers` in
``_iterator``: on the next ``iter()``, where the loader would reset its iterator, it starts
workers again as PyTorch does when it creates a persistent loader's iterator, drawing their
seed from a generator of its own (seeded with the workers' old seed), and the user's
generators are where an uninterrupted run's would be. What the old workers' own random
state had become (random augmentations in ``__getitem__``) is not in the kernel to save:
the new workers start from their seed again.
"""

from __future__ import annotations

import copyreg
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

from .live_objects import Reducer


class _RestartWorkers:
    """A restored persistent-worker loader's ``_iterator`` until its next ``iter()``, which
    calls ``_reset`` on it, as on the live iterator, and then returns ``_iterator``."""

    def __init__(self, worker_seed: int) -> None:
        self.worker_seed = worker_seed

    def _reset(self, loader: DataLoader[Any], first_iter: bool = False) -> None:
        generator = loader.generator
        seeds = torch.Generator()
        seeds.manual_seed(self.worker_seed)
        loader._iterator = None
        loader.generator = seeds
        try:
            iter(loader)  # makes the new iterator, starting the workers, and keeps it in _iterator
        finally:
            loader.generator = generator


def _reduce_loader(loader: DataLoader[Any]) -> Any:
    state = dict(vars(loader))
    iterator = state.get("_iterator")
    if isinstance(iterator, _BaseDataLoaderIter):
        state["_iterator"] = _RestartWorkers(int(iterator._base_seed))
    # Restored as pickle restores a plain object: the state goes into __dict__, past the
    # loader's __setattr__, which refuses to set batch_size, sampler ... once initialized.
    return copyreg.__newobj__, (type(loader),), state  # type: ignore[attr-defined]


def _reduce_iterator(iterator: _BaseDataLoaderIter) -> Any:
    raise TypeError("a DataLoader iterator cannot be saved: PyTorch cannot resume one part-way through an epoch; "
                    "the DataLoader is saved, and iter() on it after restore starts the next epoch")


def families() -> dict[type, Reducer]:
    """Reducers by base class (see :mod:`.live_objects`)."""
    return {DataLoader: _reduce_loader, _BaseDataLoaderIter: _reduce_iterator}
