"""The attention ops over libgna's C ABI, and their autograd.

Where the torch extension is built (torch 1.13 or >= 2.4; _extension.py) the ops are its C++
custom ops, autograd included. Otherwise, on torch >= 2.4, they are torch.library custom ops of the
ctypes calls below with fake (meta) implementations, so torch.compile traces them; on older torch
(1.13 and later) the same functions run eagerly with autograd through a
torch.autograd.Function. `attention` is the differentiable entry point of each; `na_forward` /
`na_backward` the ops (torch.ops.gna.* where they exist).

gna::na_forward(q, k, v, additional_k?, additional_v?, window, stride, dilation, causal, scale,
                backend, lse_grad) -> (out, lse)
gna::na_backward(q, k, v, additional_k?, additional_v?, out, lse, d_out, window, stride,
                 dilation, causal, scale, backend) -> (dq, dk, dv, d_additional_k, d_additional_v)

With per-head rules (ABI version 4), one call for every head whatever its group's rule:
gna::na_forward_heads(q, k, v, additional_k?, additional_v?, window, stride, dilation, causal,
                      group_of_head, scale, backend, lse_grad) -> (out, lse)
gna::na_backward_heads(q, k, v, additional_k?, additional_v?, out, lse, d_out, window, stride,
                       dilation, causal, group_of_head, scale, backend) -> (dq, .., d_additional_v)
where window, stride, dilation, causal hold each group's per-axis values, group-major (group g's
axis a at g * rank + a), and group_of_head a group per query head.

Host tensors run on the CPU reference (float16/bfloat16 host tensors are computed in float32),
CUDA tensors on the backend dispatch chooses, on the current CUDA stream.
"""
import contextlib
import ctypes
import math
from typing import List, Optional, Tuple

import torch
from torch import Tensor

from . import _calls, _extension, _lib
from ._tensors import kernel_ready, options, ref, view

_HALF = (torch.float16, torch.bfloat16)


def lse_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _device_guard(device):
    if device.type != "cuda" or device.index is None or device.index == torch.cuda.current_device():
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def _host_compute_dtype(tensors):
    """float32 when every given host tensor is float16/bfloat16 of one dtype (the reference
    computes in float32/float64); None to pass the tensors through unchanged."""
    if tensors[0].is_cuda:
        return None
    given = [t for t in tensors if t is not None]
    dtypes = {t.dtype for t in given}
    if len(dtypes) == 1 and given[0].dtype in _HALF and all(not t.is_cuda for t in given):
        return torch.float32
    return None


def _cast(tensors, dtype):
    return [None if t is None else t.to(dtype) for t in tensors]


def _is_static(*tensors):
    return all(isinstance(s, int) for t in tensors if t is not None for s in t.shape)


def _validate_metadata(params, q, k, v, ak, av, rules=None):
    """The core's validation on shapes, dtypes and strides alone (for the fake implementation,
    so that tracing reports the same errors as running)."""
    if not _is_static(q, k, v, ak, av):
        return
    g = [view(t, n, metadata_only=True) for t, n in
         ((q, "query"), (k, "key"), (v, "value"), (ak, "additional_keys"),
          (av, "additional_values"))]
    if rules is None:
        _lib.check(_lib.lib.gna_validate(ctypes.byref(params), *[ref(x) for x in g]))
    else:
        _lib.check(_lib.lib.gna_validate_heads(ctypes.byref(params), ctypes.byref(rules),
                                               *[ref(x) for x in g]))


def _empty_outputs(q, v):
    out = q.new_empty(tuple(q.shape[:-1]) + (v.shape[-1],))
    lse = q.new_empty(tuple(q.shape[:-1]), dtype=lse_dtype(q.dtype))
    return out, lse


_params_cache = {}


def _params(window, stride, dilation, causal, scale):
    """The C parameter struct of a rule, built once per rule (the C ABI only reads it)."""
    key = (tuple(window), tuple(stride), tuple(dilation), tuple(causal), scale)
    params = _params_cache.get(key)
    if params is None:
        params = _params_cache.setdefault(key, _lib.make_params(window, stride, dilation, causal,
                                                                scale))
    return params


_head_rules_cache = {}


def _head_rules(rank, window, stride, dilation, causal, group_of_head, scale):
    """The C parameter struct (rank, scale and group 0's rule) and the gna_head_rules of a set of
    per-head rules, built once per distinct set (the prebuilt calls key on their identity)."""
    key = (rank, tuple(window), tuple(stride), tuple(dilation), tuple(causal),
           tuple(group_of_head), scale)
    structs = _head_rules_cache.get(key)
    if structs is None:
        if len(_head_rules_cache) > 4096:
            _head_rules_cache.clear()
        params = _lib.make_params(window[:rank], stride[:rank], dilation[:rank], causal[:rank],
                                  scale)
        rules = _lib.make_head_rules(rank, window, stride, dilation, causal, group_of_head)
        structs = _head_rules_cache.setdefault(key, (params, rules))
    return structs


def _forward_through(run, query, key, value, additional_keys, additional_values):
    """(out, lse) of run((q, k, v, ak, av, out, lse)), a forward entry point of the C ABI."""
    inputs = [query, key, value, additional_keys, additional_values]
    out_dtype = query.dtype
    host_dtype = _host_compute_dtype(inputs)
    if host_dtype is not None:
        inputs = _cast(inputs, host_dtype)
    q, k, v, ak, av = [kernel_ready(t) for t in inputs]
    out, lse = _empty_outputs(q, v)
    with _device_guard(q.device):
        run((q, k, v, ak, av, out, lse))
    if out.dtype != out_dtype:
        out = out.to(out_dtype)
    return out, lse


def _na_forward(query: Tensor, key: Tensor, value: Tensor, additional_keys: Optional[Tensor],
                additional_values: Optional[Tensor], window: List[int], stride: List[int],
                dilation: List[int], causal: List[bool], scale: float, backend: str,
                lse_grad: bool) -> Tuple[Tensor, Tensor]:
    """The forward through the C ABI: (out, lse). lse_grad only tells autograd whether gradients
    flow through lse."""
    params = _params(window, stride, dilation, causal, scale)
    return _forward_through(lambda t: _calls.forward(params, t, backend), query, key, value,
                            additional_keys, additional_values)


def _na_forward_heads(query: Tensor, key: Tensor, value: Tensor,
                      additional_keys: Optional[Tensor], additional_values: Optional[Tensor],
                      window: List[int], stride: List[int], dilation: List[int],
                      causal: List[bool], group_of_head: List[int], scale: float, backend: str,
                      lse_grad: bool) -> Tuple[Tensor, Tensor]:
    """The forward with per-head rules, one call through the C ABI: (out, lse)."""
    params, rules = _head_rules(query.dim() - 3, window, stride, dilation, causal, group_of_head,
                                scale)
    return _forward_through(lambda t: _calls.forward_heads(params, rules, t, backend), query, key,
                            value, additional_keys, additional_values)


def _na_forward_fake(query, key, value, additional_keys, additional_values, window, stride,
                     dilation, causal, scale, backend, lse_grad):
    params = _lib.make_params(window, stride, dilation, causal, scale)
    _validate_metadata(params, query, key, value, additional_keys, additional_values)
    return _empty_outputs(query, value)


def _na_forward_heads_fake(query, key, value, additional_keys, additional_values, window, stride,
                           dilation, causal, group_of_head, scale, backend, lse_grad):
    params, rules = _head_rules(query.dim() - 3, window, stride, dilation, causal, group_of_head,
                                scale)
    _validate_metadata(params, query, key, value, additional_keys, additional_values, rules)
    return _empty_outputs(query, value)


def _na_backward_eager(query, key, value, additional_keys, additional_values, out, lse, d_out,
                       window, stride, dilation, causal, scale, backend):
    """The backward through the C ABI: (dq, dk, dv, d_additional_keys, d_additional_values), the
    last two None without additional tokens."""
    params = _params(window, stride, dilation, causal, scale)
    return _backward_through(lambda t: _calls.backward(params, t, backend), query, key, value,
                             additional_keys, additional_values, out, lse, d_out)


def _na_backward_heads_eager(query, key, value, additional_keys, additional_values, out, lse,
                             d_out, window, stride, dilation, causal, group_of_head, scale,
                             backend):
    """The backward with per-head rules, one call through the C ABI (as _na_backward_eager)."""
    params, rules = _head_rules(query.dim() - 3, window, stride, dilation, causal, group_of_head,
                                scale)
    return _backward_through(lambda t: _calls.backward_heads(params, rules, t, backend), query,
                             key, value, additional_keys, additional_values, out, lse, d_out)


def _backward_through(run, query, key, value, additional_keys, additional_values, out, lse,
                      d_out):
    """The gradients of run((q, k, v, ak, av, out, lse, d_out, dq, dk, dv, dak, dav)), a backward
    entry point of the C ABI."""
    inputs = [query, key, value, additional_keys, additional_values, out, d_out]
    grad_dtype = query.dtype
    host_dtype = _host_compute_dtype(inputs)
    if host_dtype is not None:
        inputs = _cast(inputs, host_dtype)
    q, k, v, ak, av, o, do = [kernel_ready(t) for t in inputs]
    lse = kernel_ready(lse)
    grads = [torch.empty(t.shape, dtype=t.dtype, device=t.device) for t in (q, k, v)]
    extra = [None if t is None else torch.empty(t.shape, dtype=t.dtype, device=t.device)
             for t in (ak, av)]
    with _device_guard(q.device):
        run((q, k, v, ak, av, o, lse, do, *grads, *extra))
    return tuple(None if t is None else t.to(grad_dtype) if t.dtype != grad_dtype else t
                 for t in grads + extra)


def _na_backward(query: Tensor, key: Tensor, value: Tensor, additional_keys: Optional[Tensor],
                 additional_values: Optional[Tensor], out: Tensor, lse: Tensor, d_out: Tensor,
                 window: List[int], stride: List[int], dilation: List[int], causal: List[bool],
                 scale: float, backend: str) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The backward op: (dq, dk, dv, d_additional_keys, d_additional_values), the last two empty
    without additional tokens (an op returns tensors)."""
    grads = _na_backward_eager(query, key, value, additional_keys, additional_values, out, lse,
                               d_out, window, stride, dilation, causal, scale, backend)
    return tuple(query.new_empty(0) if t is None else t for t in grads)


def _na_backward_heads(query: Tensor, key: Tensor, value: Tensor,
                       additional_keys: Optional[Tensor], additional_values: Optional[Tensor],
                       out: Tensor, lse: Tensor, d_out: Tensor, window: List[int],
                       stride: List[int], dilation: List[int], causal: List[bool],
                       group_of_head: List[int], scale: float,
                       backend: str) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """The backward op with per-head rules (as _na_backward)."""
    grads = _na_backward_heads_eager(query, key, value, additional_keys, additional_values, out,
                                     lse, d_out, window, stride, dilation, causal, group_of_head,
                                     scale, backend)
    return tuple(query.new_empty(0) if t is None else t for t in grads)


def _na_backward_fake(query, key, value, additional_keys, additional_values, out, lse, d_out,
                      window, stride, dilation, causal, scale, backend):
    grads = [t.new_empty(t.shape) for t in (query, key, value)]
    extra = [query.new_empty(0) if t is None else t.new_empty(t.shape)
             for t in (additional_keys, additional_values)]
    return tuple(grads + extra)


def _na_backward_heads_fake(query, key, value, additional_keys, additional_values, out, lse,
                            d_out, window, stride, dilation, causal, group_of_head, scale,
                            backend):
    return _na_backward_fake(query, key, value, additional_keys, additional_values, out, lse,
                             d_out, window, stride, dilation, causal, scale, backend)


def _setup_context(ctx, inputs, output):
    """inputs: q, k, v, ak, av, the rule's arguments (with group_of_head for per-head rules),
    scale, backend, lse_grad."""
    q, k, v, ak, av = inputs[:5]
    out, lse = output
    ctx.save_for_backward(q, k, v, ak, av, out, lse)
    ctx.rule = tuple(inputs[5:-1])
    ctx.heads = len(ctx.rule) == 7  # window, stride, dilation, causal, group_of_head, scale, backend
    ctx.lse_grad = inputs[-1]
    ctx.has_additional = ak is not None


def _effective_scale(scale, dim):
    return scale if scale > 0 else 1.0 / math.sqrt(dim)


def _backward(ctx, d_out, d_lse):
    q, k, v, ak, av, out, lse = ctx.saved_tensors
    if d_out is None:
        d_out = torch.zeros_like(out)
    dq, dk, dv, dak, dav = _backward_op_for(q, ctx.heads)(q, k, v, ak, av, out, lse, d_out,
                                                          *ctx.rule)
    if ctx.lse_grad and d_lse is not None:
        dq, dk, dak = _add_lse_gradient(ctx, q, k, ak, lse, d_lse, dq, dk, dak)
    if not ctx.has_additional:
        dak = dav = None
    return (dq, dk, dv, dak, dav) + (None,) * (len(ctx.rule) + 1)


def _add_lse_gradient(ctx, q, k, ak, lse, d_lse, dq, dk, dak):
    """Gradient through lse: d lse_i / d s_ij = P_ij, so with g = d lse and scores
    s = scale * q.k, dq_i += scale * g_i * sum_j P_ij k_j (attention with values = keys) and
    dk_j += sum_i P_ij (scale * g_i * q_i) (the value gradient of a backward with values = keys
    and incoming gradient scale * g * q)."""
    rule = ctx.rule
    c = _effective_scale(rule[-2], q.shape[-1])
    g = (c * d_lse.to(torch.float32)).unsqueeze(-1)
    out_k, _ = _forward_op_for(q, ctx.heads)(q, k, k, ak, ak, *rule, False)
    dq = dq + (g * out_k.to(torch.float32)).to(dq.dtype)
    d_out_k = (g * q.to(torch.float32)).to(q.dtype)
    _, _, dk_extra, _, dak_extra = _backward_op_for(q, ctx.heads)(q, k, k, ak, ak, out_k, lse,
                                                                  d_out_k, *rule)
    dk = dk + dk_extra
    if ak is not None:
        dak = dak + dak_extra
    return dq, dk, dak


def _autograd_function(name, forward_op, doc):
    """A torch.autograd.Function running forward_op, with the context and backward of the custom
    ops' registration (the ops' autograd where torch.library custom ops do not exist)."""

    def forward(ctx, *inputs):
        ctx.set_materialize_grads(False)  # unused outputs' gradients arrive as None
        output = forward_op(*inputs)
        _setup_context(ctx, inputs, output)
        return output

    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out, d_lse):
        return _backward(ctx, d_out, d_lse)

    return type(name, (torch.autograd.Function,), {
        "__doc__": doc, "forward": staticmethod(forward), "backward": staticmethod(backward)})


_Attention = _autograd_function("_Attention", _na_forward,
                                "Autograd of the ops without torch.library custom ops.")
_AttentionHeads = _autograd_function("_AttentionHeads", _na_forward_heads,
                                     "_Attention with per-head rules.")


def eager_attention(query, key, value, additional_keys, additional_values, window, stride,
                    dilation, causal, scale, backend, lse_grad):
    """(out, lse) through torch.autograd.Function: what `attention` is on torch < 2.4 (on newer
    torch it stays available, so that both paths can be compared)."""
    return _Attention.apply(query, key, value, additional_keys, additional_values, window,
                            stride, dilation, causal, scale, backend, lse_grad)


# The ops, three ways. With the torch extension (built by pip install against torch 1.13 or 2.4+):
# C++ custom ops with CPU, CUDA and Meta kernels and a C++ autograd kernel (_extension.py).
# Without it on torch >= 2.4: torch.library custom ops of the functions above, with fake
# implementations (torch.compile traces them without graph breaks) and autograd. Older torch
# (1.13 and later): the same bodies called directly, with autograd through _Attention. The
# ctypes paths run _na_forward, _na_backward, _setup_context and _backward; the extension runs
# their C++ counterparts, which give the same bits.
HAS_TORCH_EXTENSION = _extension.load()
HAS_CUSTOM_OPS = HAS_TORCH_EXTENSION or hasattr(getattr(torch, "library", None), "custom_op")

if HAS_TORCH_EXTENSION:
    na_forward = torch.ops.gna.na_forward
    na_backward = torch.ops.gna.na_backward
    na_forward_heads = torch.ops.gna.na_forward_heads
    na_backward_heads = torch.ops.gna.na_backward_heads
elif HAS_CUSTOM_OPS:
    _forward_op = torch.library.custom_op("gna::na_forward", mutates_args=())(_na_forward)
    _forward_op.register_fake(_na_forward_fake)
    _forward_op.register_autograd(_backward, setup_context=_setup_context)
    _backward_op = torch.library.custom_op("gna::na_backward", mutates_args=())(_na_backward)
    _backward_op.register_fake(_na_backward_fake)
    na_forward = torch.ops.gna.na_forward
    na_backward = torch.ops.gna.na_backward
    _forward_heads_op = torch.library.custom_op("gna::na_forward_heads",
                                                mutates_args=())(_na_forward_heads)
    _forward_heads_op.register_fake(_na_forward_heads_fake)
    _forward_heads_op.register_autograd(_backward, setup_context=_setup_context)
    _backward_heads_op = torch.library.custom_op("gna::na_backward_heads",
                                                 mutates_args=())(_na_backward_heads)
    _backward_heads_op.register_fake(_na_backward_heads_fake)
    na_forward_heads = torch.ops.gna.na_forward_heads
    na_backward_heads = torch.ops.gna.na_backward_heads
else:
    na_forward, na_backward = _na_forward, _na_backward
    na_forward_heads, na_backward_heads = _na_forward_heads, _na_backward_heads

_functorch_active = getattr(torch._C, "_are_functorch_transforms_active", lambda: False)
_is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)


def _runs_eagerly(query):
    """Whether a call on `query` can skip the custom op's dispatch: a plain tensor, outside
    torch.compile and torch.func transforms. The custom op's eager dispatch costs ~0.4 ms of host
    time per call on torch 2.11, more than the kernels of a small image attention take."""
    # is_compiling first: under torch.compile the other checks need not trace.
    return not _is_compiling() and type(query) is torch.Tensor and not _functorch_active()


def _forward_op_for(query, heads=False):
    if heads:
        return _na_forward_heads if _runs_eagerly(query) else na_forward_heads
    return _na_forward if _runs_eagerly(query) else na_forward


def _backward_op_for(query, heads=False):
    if heads:
        return _na_backward_heads_eager if _runs_eagerly(query) else na_backward_heads
    return _na_backward_eager if _runs_eagerly(query) else na_backward


def _extension_call(op, args):
    """op(*args) through the extension; the library's refusal (NotImplementedError from C++)
    raised as UnsupportedError, as on the ctypes path."""
    if _is_compiling():
        return op(*args)
    try:
        return op(*args)
    except _lib.UnsupportedError:
        raise
    except NotImplementedError as e:
        raise _lib.UnsupportedError(str(e)) from None


def attention(query, key, value, additional_keys, additional_values, window, stride, dilation,
              causal, scale, backend, lse_grad):
    """(out, lse) of neighborhood attention, differentiable in query, key, value and the
    additional tokens (and through lse when lse_grad); arguments as gna::na_forward. With the
    torch extension every call is the C++ op (its autograd node is C++ too). Without it, eager
    calls on plain tensors go through torch.autograd.Function; traced ones (torch.compile, fake
    or functorch tensors) through the custom op."""
    args = (query, key, value, additional_keys, additional_values, window, stride, dilation,
            causal, scale, backend, lse_grad)
    if HAS_TORCH_EXTENSION:
        return _extension_call(na_forward, args)
    if not HAS_CUSTOM_OPS or _runs_eagerly(query):
        return _Attention.apply(*args)
    return na_forward(*args)


def attention_heads(query, key, value, additional_keys, additional_values, window, stride,
                    dilation, causal, group_of_head, scale, backend, lse_grad):
    """(out, lse) with per-head rules in one library call (arguments as gna::na_forward_heads),
    differentiable as `attention`."""
    args = (query, key, value, additional_keys, additional_values, window, stride, dilation,
            causal, group_of_head, scale, backend, lse_grad)
    if HAS_TORCH_EXTENSION:
        return _extension_call(na_forward_heads, args)
    if not HAS_CUSTOM_OPS or _runs_eagerly(query):
        return _AttentionHeads.apply(*args)
    return na_forward_heads(*args)


def select_backend(query, key, value, additional_keys, additional_values, window, stride,
                   dilation, causal, scale, backward=False, backend="auto", precision="auto"):
    """Name of the backend dispatch would run for this call."""
    params = _lib.make_params(window, stride, dilation, causal, scale)
    names = ("query", "key", "value", "additional_keys", "additional_values")
    tensors = [query, key, value, additional_keys, additional_values]
    host_dtype = _host_compute_dtype(tensors)
    if host_dtype is not None:  # what the op runs: host half tensors computed in float32
        tensors = _cast(tensors, host_dtype)
    tensors = [kernel_ready(t) for t in tensors]
    g = [view(t, n) for t, n in zip(tensors, names)]
    opts = options(query.device, backend)
    if precision == "fp8":
        opts.precision = _lib.PRECISION_FP8
    buf = ctypes.create_string_buffer(64)
    _lib.check(_lib.lib.gna_select_backend(ctypes.byref(params), *[ref(x) for x in g],
                                           1 if backward else 0, ctypes.byref(opts), buf, 64))
    return buf.value.decode()
