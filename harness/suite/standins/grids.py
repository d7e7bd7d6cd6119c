"""megatron-core's ``HyperCommGrid`` on gloo: the process groups MB's MIMO grids ask NCCL for.

MB builds every MegatronMIMO grid with ``backend="nccl"`` (``build_hypercomm_grids``); the
harness's worlds are gloo worlds of CPU processes, where NCCL groups cannot exist. Within
:func:`gloo_grids` a grid is made with gloo whatever backend MB names. A backend moves tensors;
which ranks form which group, what MB's sampler and slicing read from a grid, is its shape and
offset, unchanged. Recorded as used when a grid is made.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from unittest import mock

from harness.suite import standins

NAME = "HyperCommGrid process groups on gloo (MB names nccl)"


@contextlib.contextmanager
def gloo_grids() -> Iterator[None]:
    """Every ``HyperCommGrid`` made inside is made with gloo (see the module docstring)."""
    grid_cls = importlib.import_module("megatron.core.hyper_comm_grid").HyperCommGrid
    real = grid_cls.__init__

    def on_gloo(self: object, *args: object, **kwargs: object) -> None:
        standins.record(NAME)
        kwargs["backend"] = "gloo"
        real(self, *args, **kwargs)

    with mock.patch.object(grid_cls, "__init__", on_gloo):
        yield
