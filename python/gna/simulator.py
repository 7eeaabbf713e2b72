"""gna.simulate: the simulator (docs/rule.md section 8) through libgna's C ABI; needs no torch."""
import ctypes

from . import _lib

_TILINGS = {"multi": 0, "1d": 1}
_KV_TILINGS = {"static": 0, "dynamic": 1}
_KV_TILING_NAMES = {v: k for k, v in _KV_TILINGS.items()}
# The tiled kernels whose tile choice the simulator asks for (GNA_SIM_KERNEL_* in gna_sim.h).
_KERNELS = {"hopper forward": 0, "hopper backward": 1, "portable forward": 2,
            "portable backward": 3, "portable forward 99kb": 4, "portable backward 99kb": 5}


def _per_axis(name, value, rank):
    if isinstance(value, (bool, int)):
        return [value] * rank
    values = list(value)
    if len(values) != rank:
        raise ValueError(f"{name}: expected an int or {rank} values (one per axis), got {value!r}")
    return values


def _require_simulator():
    if not _lib.has_simulator:
        raise RuntimeError("gna: this libgna was built without the simulator")


def _config(shape, window, stride, dilation, is_causal, q_tile, kv_tile, tiling, kv_tiling):
    _require_simulator()
    shape = list(shape)
    rank = len(shape)
    if rank < 1 or rank > _lib.MAX_RANK:
        raise ValueError(f"shape: expected 1 to 3 axes, got {tuple(shape)!r}")
    if q_tile is None or kv_tile is None:
        raise ValueError(f"q_tile and kv_tile are required, got q_tile={q_tile!r}, "
                         f"kv_tile={kv_tile!r}")
    if tiling not in _TILINGS:
        raise ValueError(f"tiling: expected one of {sorted(_TILINGS)}, got {tiling!r}")
    if kv_tiling not in _KV_TILINGS:
        raise ValueError(f"kv_tiling: expected one of {sorted(_KV_TILINGS)}, got {kv_tiling!r}")
    config = _lib.SimConfig()
    config.rank = rank
    config.extent = _lib.int_array(shape, "shape")
    config.window = _lib.int_array(_per_axis("window", window, rank), "window")
    config.stride = _lib.int_array(_per_axis("stride", stride, rank), "stride")
    config.dilation = _lib.int_array(_per_axis("dilation", dilation, rank), "dilation")
    config.causal = _lib.int_array([1 if c else 0 for c in _per_axis("is_causal", is_causal, rank)])
    config.q_tile = _lib.int_array(_per_axis("q_tile", q_tile, rank), "q_tile")
    config.kv_tile = _lib.int_array(_per_axis("kv_tile", kv_tile, rank), "kv_tile")
    config.tiling = _TILINGS[tiling]
    config.kv_tiling = _KV_TILINGS[kv_tiling]
    return config


def _kernel_id(kernel):
    name = kernel.replace("-", " ").replace("_", " ") if isinstance(kernel, str) else kernel
    if name not in _KERNELS:
        raise ValueError(f"kernel: expected one of {sorted(_KERNELS)}, got {kernel!r}")
    return _KERNELS[name]


def _kernel_call(shape, window, stride, dilation, is_causal, kernel, function):
    """The rule's config and the kernel's id for a gna_sim_* call about a kernel (an unknown
    kernel first, then a library without the function)."""
    kernel_id = _kernel_id(kernel)
    if not hasattr(_lib.lib, function):
        raise RuntimeError(f"gna: this libgna has no {function} (rebuild it)")
    return (_config(shape, window, stride, dilation, is_causal, 1, 1, "multi", "static"),
            kernel_id)


def kernel_tiles(shape, window, stride=1, dilation=1, is_causal=False, kernel="hopper forward",
                 head_dim=128):
    """The tiles a kernel runs for this rule: (q_tile, kv_tile, kv_tiling), the Q and KV tile
    shapes (tuples, one side per axis) and "static" (KV tiles on a fixed grid) or "dynamic"
    (placed per Q tile), as the kernel's tile chooser picks them at head dim head_dim with default
    options. kernel: "hopper forward" (grid or placed KV tiles, whichever is cheaper), "hopper
    backward", "portable forward" (64- or 128-row Q tiles, grid or placed KV tiles) or "portable
    backward" (128- or 64-key KV tiles) ('-' or '_' for the space also do). The choice scores
    one image and head: batch and heads do not matter. simulate(..., kernel=...) simulates these
    tiles."""
    config, kernel_id = _kernel_call(shape, window, stride, dilation, is_causal, kernel,
                                     "gna_sim_kernel_tiles")
    chosen = _lib.SimConfig()
    _lib.check(_lib.lib.gna_sim_kernel_tiles(ctypes.byref(config), kernel_id,
                                             _lib.int32(head_dim, "head_dim"),
                                             ctypes.byref(chosen)),
               _lib.lib.gna_sim_last_error)
    rank = chosen.rank
    return (tuple(chosen.q_tile[a] for a in range(rank)),
            tuple(chosen.kv_tile[a] for a in range(rank)), _KV_TILING_NAMES[chosen.kv_tiling])


def predicted_speedup(shape, window, stride=1, dilation=1, is_causal=False,
                      kernel="hopper forward", head_dim=128):
    """The speedup a kernel's measured cost predicts for this rule against dense attention over
    the same tokens: a dict of "speedup", "cost" and "dense_cost" (in dense tile pairs of the
    kernel), and "ms_per_head": the kernel's predicted time per (batch item, head) in
    milliseconds on an H100 at head dim 128 (None at other head dims, whose times were not
    measured). The rule is simulated at the tiles the kernel chooses (kernel_tiles()); full
    pairs, partial pairs and work items are priced by the kernel's cost model, fitted to its
    measured times (docs/performance.md, "What a Hopper kernel's time is made of")."""
    config, kernel_id = _kernel_call(shape, window, stride, dilation, is_causal, kernel,
                                     "gna_sim_predict")
    out = _lib.SimPrediction()
    _lib.check(_lib.lib.gna_sim_predict(ctypes.byref(config), kernel_id,
                                        _lib.int32(head_dim, "head_dim"), ctypes.byref(out)),
               _lib.lib.gna_sim_last_error)
    return {"speedup": out.speedup, "cost": out.cost, "dense_cost": out.dense_cost,
            "ms_per_head": out.ns_per_head * 1e-6 if out.ns_per_head > 0 else None}


def _result_dict(result):
    out = {name: getattr(result, name) for name, _ in _lib.SimResult._fields_
           if name != "reserved"}
    out["block_sparse"] = bool(out["block_sparse"])
    return out


def simulate(shape, window, stride=1, dilation=1, is_causal=False, q_tile=None, kv_tile=None,
             tiling=None, kv_tiling=None, attention_share=None, dense_steps=0, total_steps=1,
             kernel=None, head_dim=None):
    """Which KV tiles each Q tile must visit, and the speedup bounds that follow.

    shape: token layout per axis (its length is the rank). window, stride, dilation, is_causal,
    q_tile, kv_tile: an int for every axis or one value per axis. tiling: "multi" (tiles are
    boxes of the layout) or "1d" (runs of row-major tokens; the tile size is the product of
    q_tile / kv_tile; default "multi"). kv_tiling: "static" (default) or "dynamic". kernel (e.g.
    "hopper forward"), with head_dim (default 128): the tiles and KV tiling that kernel chooses
    (kernel_tiles()) instead of q_tile, kv_tile, tiling and kv_tiling, which are then an error;
    the result also holds them ("q_tile", "kv_tile", "kv_tiling"). With attention_share (the
    share of a model's runtime spent in attention), the result also holds "end_to_end_speedup"
    for dense_steps of total_steps diffusion steps kept dense, taking the tile-wise bound as the
    operator's speedup.

    Returns a dict of the simulator's numbers (see include/gna/sim/simulator.hpp).
    """
    chosen = None
    if kernel is not None:
        _kernel_id(kernel)  # an unknown name first
        given = {name: value for name, value in (("q_tile", q_tile), ("kv_tile", kv_tile),
                                                 ("tiling", tiling), ("kv_tiling", kv_tiling))
                 if value is not None}
        if given:
            raise ValueError(f"kernel={kernel!r} chooses the tiles: do not also give "
                             + ", ".join(f"{k}={v!r}" for k, v in given.items()))
        chosen = kernel_tiles(shape, window, stride, dilation, is_causal, kernel,
                              128 if head_dim is None else head_dim)
        q_tile, kv_tile, kv_tiling = chosen
    elif head_dim is not None:
        raise ValueError(f"head_dim={head_dim!r} needs kernel (the kernel whose tiles it picks)")
    tiling = "multi" if tiling is None else tiling
    kv_tiling = "static" if kv_tiling is None else kv_tiling
    config = _config(shape, window, stride, dilation, is_causal, q_tile, kv_tile, tiling,
                     kv_tiling)
    result = _lib.SimResult()
    _lib.check(_lib.lib.gna_simulate(ctypes.byref(config), ctypes.byref(result)),
               _lib.lib.gna_sim_last_error)
    out = _result_dict(result)
    if chosen is not None:
        out["q_tile"], out["kv_tile"], out["kv_tiling"] = chosen
    if attention_share is not None:
        out["end_to_end_speedup"] = end_to_end_speedup(
            attention_share, out["tile_speedup"], dense_steps, total_steps)
    return out


def end_to_end_speedup(attention_share, op_speedup, dense_steps=0, total_steps=1):
    """1 / ((1 - p) + p * (k/n + (1 - k/n) / op_speedup)) for attention share p and the first
    k of n diffusion steps kept dense."""
    _require_simulator()
    speedup = ctypes.c_double()
    _lib.check(_lib.lib.gna_sim_end_to_end(float(attention_share), int(dense_steps),
                                           int(total_steps), float(op_speedup),
                                           ctypes.byref(speedup)),
               _lib.lib.gna_sim_last_error)
    return speedup.value


def stride_sweep(shape, window, dilation=1, is_causal=False, q_tile=None, kv_tile=None,
                 tiling="multi", kv_tiling="static", pruned=True, block_sparse_only=False):
    """Every stride tuple 1 <= stride <= window, ordered by the product of strides, as a list of
    simulate() dicts with "stride" and "kept" (beats every smaller stride) added. pruned: only
    the kept ones; block_sparse_only: only the perfectly block-sparse ones."""
    config = _config(shape, window, 1, dilation, is_causal, q_tile, kv_tile, tiling, kv_tiling)
    rank = config.rank
    check = _lib.SimResult()  # validates the configuration before sizing the entries
    _lib.check(_lib.lib.gna_simulate(ctypes.byref(config), ctypes.byref(check)),
               _lib.lib.gna_sim_last_error)
    capacity = 1
    for a in range(rank):
        capacity *= max(int(config.window[a]), 1)
    entries = (_lib.SimSweepEntry * capacity)()
    count = ctypes.c_int64()
    _lib.check(_lib.lib.gna_sim_sweep(ctypes.byref(config), entries, capacity,
                                      ctypes.byref(count)), _lib.lib.gna_sim_last_error)
    out = []
    for e in entries[:min(count.value, capacity)]:
        if pruned and not e.kept:
            continue
        r = _result_dict(e.result)
        if block_sparse_only and not r["block_sparse"]:
            continue
        r["stride"] = tuple(e.stride[a] for a in range(rank))
        r["kept"] = bool(e.kept)
        out.append(r)
    return out
