"""Attention with per-batch counts of additional keys (joint attention with padded text): one
library call in which batch item b attends only the first counts[b] additional keys (the C ABI's
gna_forward_counts / gna_backward_counts, ABI version 7); the gradients of the others are zero.
The counts stay on the device, so nothing waits for them; a count below 0 reads as 0, one above
the additional keys' length as that length. With the torch extension the call is its C++ op
gna::na_forward_counts (C++ autograd node, Meta kernel); without it, an autograd.Function over
the ctypes calls. joint_attention takes this path in eager calls only: counts_backend reads the
tensors, which tracing does not give."""
import ctypes

import torch

from . import _calls, _lib, functional, ops
from ._tensors import kernel_ready, options, ref, view
from .per_head import head_rules_of

_NAMES = ("query", "key", "value", "additional_keys", "additional_values")


def _structs(rank, groups, heads, scale):
    """(params, rules) of resolve_groups' output: one rule without head rules (NO_RULES)."""
    if len(groups) == 1:
        window, stride, dilation, causal = (list(x) for x in groups[0][0])
        return ops._params(window, stride, dilation, causal, scale), _calls.NO_RULES
    window, stride, dilation, causal, group_of_head = head_rules_of(groups, heads)
    return ops._head_rules(rank, window, stride, dilation, causal, group_of_head, scale)


def counts_backend(query, key, value, additional_keys, additional_values, counts, groups,
                   scale=None, backward=False, backend="auto"):
    """Name of the backend that runs this call with counts in one library call (the forward, or
    the backward with backward=True); None where none does (or the library predates counts, or
    the rules do not fit one call). counts: an int32 tensor [B] on the query's device."""
    heads = int(query.shape[-2])
    if not _lib.has_counts or (len(groups) > 1 and (
            len(groups) > _lib.MAX_HEAD_GROUPS or heads > _lib.MAX_HEADS_WITH_RULES)):
        return None
    scale = functional._scale("joint_attention", scale)
    params, rules = _structs(query.dim() - 3, groups, heads, scale)
    tensors = [query, key, value, additional_keys, additional_values]
    host_dtype = ops._host_compute_dtype(tensors)
    if host_dtype is not None:  # what the call runs: host half tensors computed in float32
        tensors = ops._cast(tensors, host_dtype)
    g = [view(kernel_ready(t), n) for t, n in zip(tensors, _NAMES)]
    c = view(kernel_ready(counts), "additional_kv_counts")
    opts = options(query.device, backend)
    buf = ctypes.create_string_buffer(64)
    status = _lib.lib.gna_select_backend_counts(
        ctypes.byref(params), None if rules is _calls.NO_RULES else ctypes.byref(rules),
        *[ref(x) for x in g], ref(c), 1 if backward else 0, ctypes.byref(opts), buf, 64)
    if status == _lib.STATUS_UNSUPPORTED:
        return None
    _lib.check(status)
    return buf.value.decode()


def _insert_counts(tensors, counts):
    return tuple(tensors[:5]) + (counts,) + tuple(tensors[5:])


class _CountedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, query, key, value, additional_keys, additional_values, counts, groups,
                scale, backend):
        params, rules = _structs(query.dim() - 3, groups, int(query.shape[-2]), scale)
        out, lse = ops._forward_through(
            lambda t: _calls.forward_counts(params, rules, _insert_counts(t, counts), backend),
            query, key, value, additional_keys, additional_values)
        ctx.save_for_backward(query, key, value, additional_keys, additional_values, counts, out,
                              lse)
        ctx.structs = (params, rules)
        ctx.backend = backend
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out):
        q, k, v, ak, av, counts, out, lse = ctx.saved_tensors
        params, rules = ctx.structs
        grads = ops._backward_through(
            lambda t: _calls.backward_counts(params, rules, _insert_counts(t, counts),
                                             ctx.backend),
            q, k, v, ak, av, out, lse, d_out)
        return tuple(grads) + (None,) * 4


def _rule_arguments(groups, heads):
    """The counts op's rule arguments: (window, stride, dilation, causal, group_of_head), the
    last empty for one rule over every head (else head_rules_of's group-major lists)."""
    if len(groups) == 1:
        return tuple([int(v) if i < 3 else bool(v) for v in x]
                     for i, x in enumerate(groups[0][0])) + ([],)
    return head_rules_of(groups, heads)


def counted_attention(query, key, value, additional_keys, additional_values, counts, groups,
                      scale=None, backend="auto"):
    """out of neighborhood attention over heads-last tensors [B, *spatial, H, D] with the rules
    of `groups` (resolve_groups' output) and additional keys / values [B, N, Hkv, D], of which
    batch item b attends the first counts[b] (an int32 tensor [B] on the query's device; see
    counts_backend for whether a backend runs it). Differentiable in every tensor but counts."""
    scale = functional._scale("joint_attention", scale)
    counts = kernel_ready(counts)
    if ops.HAS_TORCH_EXTENSION:
        rule = _rule_arguments(groups, int(query.shape[-2]))
        return ops._extension_call(torch.ops.gna.na_forward_counts, (
            query, key, value, additional_keys, additional_values, counts, *rule, scale,
            backend))[0]
    return _CountedAttention.apply(query, key, value, additional_keys, additional_values, counts,
                                   groups, scale, backend)
