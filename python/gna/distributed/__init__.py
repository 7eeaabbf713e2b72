"""Context parallelism over torch.distributed: neighborhood attention on a token sequence sharded
across the ranks of a process group (NCCL on GPUs, gloo on CPUs). docs/python.md describes the
modes: Ulysses (head-parallel, exchanges pipelined with the attention by head groups), halo
(slabs of one axis) and their hybrid, and choose_parallelism's cost model."""
from ._halo import choose_parallelism, gather_sequence, halo_attention, shard_sequence
from ._ulysses import ulysses_attention, ulysses_joint_attention

__all__ = ["ulysses_attention", "ulysses_joint_attention", "halo_attention",
           "choose_parallelism", "shard_sequence", "gather_sequence"]
