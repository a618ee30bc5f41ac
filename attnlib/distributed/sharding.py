"""Cutting a sequence into one shard per rank, and putting it back together.

Two layouts of a sequence of ``n`` positions over ``W`` ranks:

- ``"contiguous"``: rank ``r`` holds positions ``[r n/W, (r+1) n/W)``.
- ``"zigzag"``: the sequence is cut into ``2W`` equal chunks and rank ``r``
  holds chunks ``r`` and ``2W - 1 - r``, one from each end. Under a causal
  mask an early chunk sees few keys and a late one many, so pairing them
  gives every rank the same amount of work (the load-balanced layout of
  ring attention implementations).

A shard is described by its :class:`Chunk` list: where each chunk starts in
the whole sequence, where it starts inside the shard, and its length.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass

import torch

SHARDINGS = ("contiguous", "zigzag")


@dataclass(frozen=True)
class Chunk:
    """A run of consecutive positions: ``length`` of them from ``start`` in the
    whole sequence, stored from ``local_start`` in the rank's shard."""

    start: int
    local_start: int
    length: int

    @property
    def local(self) -> slice:
        return slice(self.local_start, self.local_start + self.length)


def check_sharding(sharding) -> str:
    if sharding not in SHARDINGS:
        raise ValueError(f"sharding must be one of {SHARDINGS}, got {sharding!r}")
    return sharding


def _check_rank(rank, world_size) -> None:
    for name, value in (("world_size", world_size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must lie in [0, world_size={world_size}), got {rank}")


def pieces_per_rank(sharding: str) -> int:
    """How many equal chunks of the sequence each rank holds."""
    return 2 if check_sharding(sharding) == "zigzag" else 1


def check_length(length: int, world_size: int, sharding: str, name: str = "sequence length") -> None:
    """A sequence must split into ``world_size`` (contiguous) or ``2 world_size`` (zigzag) equal chunks."""
    pieces = pieces_per_rank(sharding) * world_size
    if length % pieces != 0:
        raise ValueError(
            f"{name} must be divisible by {pieces} ({sharding} sharding over {world_size} ranks "
            f"cuts it into {pieces} equal chunks), got {length}"
        )


def shard_chunks(length: int, rank: int, world_size: int, sharding: str = "contiguous") -> list[Chunk]:
    """The chunks of a sequence of ``length`` positions that ``rank`` holds, in shard order."""
    _check_rank(rank, world_size)
    check_length(length, world_size, sharding)
    if sharding == "contiguous":
        size = length // world_size
        return [Chunk(rank * size, 0, size)]
    size = length // (2 * world_size)
    return [Chunk(rank * size, 0, size), Chunk((2 * world_size - 1 - rank) * size, size, size)]


def shard_positions(length: int, rank: int, world_size: int, sharding: str = "contiguous") -> torch.Tensor:
    """Positions in the whole sequence of the shard's entries, ``(length / world_size,)`` int64."""
    chunks = shard_chunks(length, rank, world_size, sharding)
    return torch.cat([torch.arange(c.start, c.start + c.length) for c in chunks])


def shard(x: torch.Tensor, rank: int, world_size: int, sharding: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """The part of ``x`` that ``rank`` holds: ``dim`` (the sequence axis) cut to ``n / world_size``.

    ``x (..., n, E)`` -> ``(..., n / world_size, E)`` with the default ``dim=-2``.
    """
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    length = x.shape[dim]
    chunks = shard_chunks(length, rank, world_size, sharding)
    return torch.cat([x.narrow(dim, c.start, c.length) for c in chunks], dim=dim)


def unshard(shards, sharding: str = "contiguous", dim: int = -2) -> torch.Tensor:
    """The whole sequence from every rank's shard, ``shards[r]`` being rank ``r``'s."""
    shards = list(shards)
    if not shards or not all(isinstance(s, torch.Tensor) for s in shards):
        raise TypeError("shards must be a non-empty sequence of tensors, one per rank")
    shapes = {tuple(s.shape) for s in shards}
    if len(shapes) != 1:
        raise ValueError(f"shards must all have one shape, got shapes {sorted(shapes)}")
    world_size = len(shards)
    length = shards[0].shape[dim] * world_size
    pieces = [None] * (pieces_per_rank(sharding) * world_size)
    for rank, part in enumerate(shards):
        for chunk in shard_chunks(length, rank, world_size, sharding):
            pieces[chunk.start // chunk.length] = part.narrow(dim, chunk.local_start, chunk.length)
    return torch.cat(pieces, dim=dim)
