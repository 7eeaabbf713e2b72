"""Context parallelism over torch.distributed: neighborhood attention on a token sequence sharded
across the ranks of a process group (NCCL on GPUs, gloo on CPUs). docs/python.md describes the
modes: Ulysses (head-parallel, exchanges pipelined with the attention by head groups), halo
(slabs of one axis) and their hybrid, and choose_parallelism's cost model."""
from ._choice import Link, Parallelism, choose_parallelism, measure_link, parallelism_costs
from ._halo import exact_halo, gather_sequence, halo_attention, query_pads, shard_sequence
from ._hybrid import hybrid_attention
from ._ulysses import timeline, ulysses_attention, ulysses_joint_attention

__all__ = ["ulysses_attention", "ulysses_joint_attention", "halo_attention", "hybrid_attention",
           "choose_parallelism", "parallelism_costs", "measure_link", "Link", "Parallelism",
           "shard_sequence", "gather_sequence", "timeline", "exact_halo", "query_pads"]
