"""Loads libgna and declares its C ABI (include/gna/gna.h, include/gna/gna_sim.h) for ctypes.

This module needs neither torch nor numpy, so the simulator works in any Python.
"""
import ctypes
import os
from pathlib import Path

MAX_RANK = 3
MAX_TENSOR_RANK = 8
MAX_HEAD_GROUPS = 8
MAX_HEADS_WITH_RULES = 256

STATUS_OK = 0
STATUS_INVALID_ARGUMENT = 1
STATUS_UNSUPPORTED = 2
STATUS_RUNTIME_ERROR = 3

DTYPE_F32 = 0
DTYPE_F64 = 1
DTYPE_F16 = 2
DTYPE_BF16 = 3
DTYPE_E4M3 = 4  # float8_e4m3fn (ABI version 5)
DTYPE_I32 = 5  # int32: per-batch counts of additional keys only (ABI version 7)

PRECISION_AUTO = 0
PRECISION_FP8 = 1


class UnsupportedError(NotImplementedError):
    """The call is valid but no backend can run it (the message lists every refusal). A
    RuntimeError; its base NotImplementedError is what the torch extension's ops raise for it
    where no Python wraps the call (inside autograd's backward)."""


class GnaRuntimeError(RuntimeError):
    """A CUDA or other failure while running a call."""


class Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_TENSOR_RANK),
        ("strides", ctypes.c_int64 * MAX_TENSOR_RANK),
        ("device", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
    ]


class Params(ctypes.Structure):
    _fields_ = [
        ("rank", ctypes.c_int32),
        ("window", ctypes.c_int32 * MAX_RANK),
        ("stride", ctypes.c_int32 * MAX_RANK),
        ("dilation", ctypes.c_int32 * MAX_RANK),
        ("causal", ctypes.c_int32 * MAX_RANK),
        ("scale", ctypes.c_float),
    ]


_GroupValues = (ctypes.c_int32 * MAX_RANK) * MAX_HEAD_GROUPS


class HeadRules(ctypes.Structure):
    """gna_head_rules (ABI version 4): per-head rules, entry [g][a] for group g on axis a."""
    _fields_ = [
        ("groups", ctypes.c_int32),
        ("heads", ctypes.c_int32),
        ("window", _GroupValues),
        ("stride", _GroupValues),
        ("dilation", _GroupValues),
        ("causal", _GroupValues),
        ("group_of_head", ctypes.POINTER(ctypes.c_int32)),
    ]


class Slab(ctypes.Structure):
    _fields_ = [
        ("extent", ctypes.c_int32 * MAX_RANK),
        ("query_offset", ctypes.c_int32 * MAX_RANK),
        ("key_offset", ctypes.c_int32 * MAX_RANK),
    ]


class Options(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_char_p),
        ("stream", ctypes.c_void_p),
        ("q_tile", ctypes.c_int32 * MAX_RANK),
        ("kv_tile", ctypes.c_int32 * MAX_RANK),
        ("autotune", ctypes.c_int32),
        ("deterministic", ctypes.c_int32),
        ("precision", ctypes.c_int32),  # ABI version 5; older libraries do not read it
    ]


# A layout and its rule per axis, laid out alike in gna_sim_config and gna_sim_bench_case.
_RULE_FIELDS = [
    ("rank", ctypes.c_int32),
    ("extent", ctypes.c_int32 * MAX_RANK),
    ("window", ctypes.c_int32 * MAX_RANK),
    ("stride", ctypes.c_int32 * MAX_RANK),
    ("dilation", ctypes.c_int32 * MAX_RANK),
    ("causal", ctypes.c_int32 * MAX_RANK),
]


class SimConfig(ctypes.Structure):
    _fields_ = _RULE_FIELDS + [
        ("q_tile", ctypes.c_int32 * MAX_RANK),
        ("kv_tile", ctypes.c_int32 * MAX_RANK),
        ("tiling", ctypes.c_int32),
        ("kv_tiling", ctypes.c_int32),
    ]


class SimResult(ctypes.Structure):
    _fields_ = [
        ("tokens", ctypes.c_int64),
        ("q_tiles", ctypes.c_int64),
        ("kv_tiles", ctypes.c_int64),
        ("dense_kv_tiles", ctypes.c_int64),
        ("max_kv_tiles", ctypes.c_int64),
        ("mean_kv_tiles", ctypes.c_double),
        ("visited_pairs", ctypes.c_int64),
        ("attended_pairs", ctypes.c_int64),
        ("mean_keys_per_query", ctypes.c_double),
        ("sparsity", ctypes.c_double),
        ("flop_speedup", ctypes.c_double),
        ("tile_speedup", ctypes.c_double),
        ("empty_pairs", ctypes.c_int64),
        ("full_pairs", ctypes.c_int64),
        ("partial_pairs", ctypes.c_int64),
        ("block_sparse", ctypes.c_int32),
        ("reserved", ctypes.c_int32),
        ("wasted_flop_fraction", ctypes.c_double),
    ]


class SimSweepEntry(ctypes.Structure):
    _fields_ = [
        ("stride", ctypes.c_int32 * MAX_RANK),
        ("kept", ctypes.c_int32),
        ("result", SimResult),
    ]


class SimPrediction(ctypes.Structure):
    _fields_ = [
        ("cost", ctypes.c_double),
        ("dense_cost", ctypes.c_double),
        ("speedup", ctypes.c_double),
        ("ns_per_head", ctypes.c_double),
    ]


class SimBenchCase(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char * 64),
        ("model", ctypes.c_char * 32),
        ("sets", ctypes.c_char * 96),
        ("dtype", ctypes.c_char * 8),
    ] + _RULE_FIELDS + [
        ("batch", ctypes.c_int32),
        ("heads", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("additional_tokens", ctypes.c_int32),
        ("flex_tile", ctypes.c_int32 * MAX_RANK),
    ]


def _candidates():
    env = os.environ.get("GNA_LIBRARY")
    if env:
        return [Path(env)]
    here = Path(__file__).resolve().parent
    # Installed: the library sits inside the package. Source tree: the CMake build folder.
    return [here / "libgna.so", here.parent.parent / "build" / "lib" / "libgna.so"]


def _load():
    tried = []
    for path in _candidates():
        if path.is_file():
            return ctypes.CDLL(str(path)), path
        tried.append(str(path))
    raise ImportError(
        "gna: cannot find libgna.so (looked at " + ", ".join(tried) + "). Install the package "
        "with `pip install --no-build-isolation .`, build it with CMake into build/, or set "
        "GNA_LIBRARY to the library's path.")


lib, library_path = _load()

_P = ctypes.POINTER
_status = ctypes.c_int32

lib.gna_abi_version.restype = ctypes.c_int32
lib.gna_abi_version.argtypes = []
lib.gna_last_error.restype = ctypes.c_char_p
lib.gna_last_error.argtypes = []
lib.gna_backend_names.restype = ctypes.c_char_p
lib.gna_backend_names.argtypes = []
lib.gna_release_cached_memory.restype = _status
lib.gna_release_cached_memory.argtypes = []

_T = _P(Tensor)
lib.gna_validate.restype = _status
lib.gna_validate.argtypes = [_P(Params), _T, _T, _T, _T, _T]
lib.gna_forward.restype = _status
lib.gna_forward.argtypes = [_P(Params), _T, _T, _T, _T, _T, _T, _T, _P(Options)]
lib.gna_backward.restype = _status
lib.gna_backward.argtypes = [_P(Params), _T, _T, _T, _T, _T, _T, _T, _T, _T, _T, _T, _T, _T,
                             _P(Options)]
lib.gna_select_backend.restype = _status
lib.gna_select_backend.argtypes = [_P(Params), _T, _T, _T, _T, _T, ctypes.c_int32, _P(Options),
                                   ctypes.c_char_p, ctypes.c_int32]
lib.gna_merge_attentions.restype = _status
lib.gna_merge_attentions.argtypes = [ctypes.c_int32, _T, _T, _T, _T]
lib.gna_sta_params.restype = _status
lib.gna_sta_params.argtypes = [ctypes.c_int32, _P(ctypes.c_int32), _P(ctypes.c_int32),
                               _P(ctypes.c_int32), _P(Params)]
# The unfused operators (ABI version 3): PN, NN and their backward passes.
lib.gna_na_qk.restype = _status
lib.gna_na_qk.argtypes = [_P(Params), _T, _T, _T, _T, _P(Options)]
lib.gna_na_av.restype = _status
lib.gna_na_av.argtypes = [_P(Params), _T, _T, _T, _P(Options)]
lib.gna_na_qk_backward.restype = _status
lib.gna_na_qk_backward.argtypes = [_P(Params), _T, _T, _T, _T, _T, _T, _P(Options)]
lib.gna_na_av_backward.restype = _status
lib.gna_na_av_backward.argtypes = [_P(Params), _T, _T, _T, _T, _T, _P(Options)]

# Per-head rules in one call (ABI version 4): the plain entry points with gna_head_rules after
# the parameters.
has_head_rules = int(lib.gna_abi_version()) >= 4 and hasattr(lib, "gna_forward_heads")
if has_head_rules:
    _R = _P(HeadRules)
    lib.gna_validate_heads.restype = _status
    lib.gna_validate_heads.argtypes = [_P(Params), _R, _T, _T, _T, _T, _T]
    lib.gna_forward_heads.restype = _status
    lib.gna_forward_heads.argtypes = [_P(Params), _R, _T, _T, _T, _T, _T, _T, _T, _P(Options)]
    lib.gna_backward_heads.restype = _status
    lib.gna_backward_heads.argtypes = [_P(Params), _R] + [_T] * 13 + [_P(Options)]
    lib.gna_select_backend_heads.restype = _status
    lib.gna_select_backend_heads.argtypes = [_P(Params), _R, _T, _T, _T, _T, _T, ctypes.c_int32,
                                             _P(Options), ctypes.c_char_p, ctypes.c_int32]

# The FP8 forward (ABI version 5): precision in the options, and e4m3 inputs with their scales.
has_fp8 = int(lib.gna_abi_version()) >= 5 and hasattr(lib, "gna_forward_e4m3")
if has_fp8:
    lib.gna_forward_e4m3.restype = _status
    lib.gna_forward_e4m3.argtypes = [_P(Params), _P(HeadRules)] + [_T] * 11 + [_P(Options)]

# Slabs (ABI version 6): the rule at global coordinates for local query and key slabs.
has_slabs = int(lib.gna_abi_version()) >= 6 and hasattr(lib, "gna_forward_slab")
if has_slabs:
    _S = _P(Slab)
    lib.gna_key_range.restype = _status
    lib.gna_key_range.argtypes = [_P(Params)] + [ctypes.c_int32] * 4 + [_P(ctypes.c_int32)] * 2
    lib.gna_forward_slab.restype = _status
    lib.gna_forward_slab.argtypes = [_P(Params), _S] + [_T] * 7 + [_P(Options)]
    lib.gna_backward_slab.restype = _status
    lib.gna_backward_slab.argtypes = [_P(Params), _S] + [_T] * 13 + [_P(Options)]
    lib.gna_select_backend_slab.restype = _status
    lib.gna_select_backend_slab.argtypes = [_P(Params), _S, _T, _T, _T, _T, _T, ctypes.c_int32,
                                            _P(Options), ctypes.c_char_p, ctypes.c_int32]

# Per-batch counts of additional keys (ABI version 7): the per-head entry points with an int32
# [B] tensor after the additional values.
has_counts = int(lib.gna_abi_version()) >= 7 and hasattr(lib, "gna_forward_counts")
if has_counts:
    lib.gna_forward_counts.restype = _status
    lib.gna_forward_counts.argtypes = [_P(Params), _P(HeadRules)] + [_T] * 8 + [_P(Options)]
    lib.gna_backward_counts.restype = _status
    lib.gna_backward_counts.argtypes = [_P(Params), _P(HeadRules)] + [_T] * 14 + [_P(Options)]
    lib.gna_select_backend_counts.restype = _status
    lib.gna_select_backend_counts.argtypes = [_P(Params), _P(HeadRules)] + [_T] * 6 + [
        ctypes.c_int32, _P(Options), ctypes.c_char_p, ctypes.c_int32]

has_simulator = hasattr(lib, "gna_simulate")
if has_simulator:
    lib.gna_sim_last_error.restype = ctypes.c_char_p
    lib.gna_sim_last_error.argtypes = []
    lib.gna_simulate.restype = _status
    lib.gna_simulate.argtypes = [_P(SimConfig), _P(SimResult)]
    lib.gna_sim_sweep.restype = _status
    lib.gna_sim_sweep.argtypes = [_P(SimConfig), _P(SimSweepEntry), ctypes.c_int64,
                                  _P(ctypes.c_int64)]
    lib.gna_sim_end_to_end.restype = _status
    lib.gna_sim_end_to_end.argtypes = [ctypes.c_double, ctypes.c_int32, ctypes.c_int32,
                                       ctypes.c_double, _P(ctypes.c_double)]
has_kernel_tiles = hasattr(lib, "gna_sim_kernel_tiles")
if has_kernel_tiles:
    lib.gna_sim_kernel_tiles.restype = _status
    lib.gna_sim_kernel_tiles.argtypes = [_P(SimConfig), ctypes.c_int32, ctypes.c_int32,
                                         _P(SimConfig)]
has_prediction = hasattr(lib, "gna_sim_predict")
if has_prediction:
    lib.gna_sim_predict.restype = _status
    lib.gna_sim_predict.argtypes = [_P(SimConfig), ctypes.c_int32, ctypes.c_int32,
                                    _P(SimPrediction)]
has_bench_cases = hasattr(lib, "gna_sim_bench_case_count")
if has_bench_cases:
    lib.gna_sim_bench_case_count.restype = ctypes.c_int32
    lib.gna_sim_bench_case_count.argtypes = []
    lib.gna_sim_bench_case_at.restype = _status
    lib.gna_sim_bench_case_at.argtypes = [ctypes.c_int32, _P(SimBenchCase)]


def check(status, last_error=None):
    """Raises the Python exception matching a status code, with the library's message."""
    if status == STATUS_OK:
        return
    message = (last_error or lib.gna_last_error)().decode("utf-8", "replace")
    if status == STATUS_INVALID_ARGUMENT:
        raise ValueError(message)
    if status == STATUS_UNSUPPORTED:
        raise UnsupportedError(message)
    raise GnaRuntimeError(message)


def abi_version():
    return int(lib.gna_abi_version())


def backend_names():
    """Names of the backends built into the library, highest priority first."""
    return lib.gna_backend_names().decode().split()


def release_cached_memory():
    """Gives back the scratch memory the GPU backends keep between calls (the backward's fp32 dQ
    accumulator and row statistics); waits for the GPUs first. Later calls allocate again."""
    check(lib.gna_release_cached_memory())


def int32(value, name="value"):
    """int(value) when a C int32 holds it; ValueError otherwise (ctypes would truncate it)."""
    v = int(value)
    if not -2**31 <= v < 2**31:
        raise ValueError(f"{name} must be below 2^31 in magnitude (a 32-bit int of the C ABI), "
                         f"got {v}")
    return v


def int_array(values, name="value"):
    values = list(values)
    if len(values) > MAX_RANK:
        raise ValueError(f"{name}: at most {MAX_RANK} values, got {len(values)}")
    arr = (ctypes.c_int32 * MAX_RANK)()
    for i, v in enumerate(values):
        arr[i] = int32(v, name)
    return arr


def make_params(window, stride, dilation, causal, scale):
    p = Params()
    p.rank = len(window)
    p.window = int_array(window, "window")
    p.stride = int_array(stride, "stride")
    p.dilation = int_array(dilation, "dilation")
    p.causal = int_array([1 if c else 0 for c in causal], "causal")
    p.scale = float(scale)
    return p


def make_head_rules(rank, window, stride, dilation, causal, group_of_head):
    """gna_head_rules from per-group values flattened group-major (group g's axis a at
    g * rank + a) and a group per query head. The struct keeps its group map alive."""
    groups = len(window) // rank if rank > 0 else 0
    if not 1 <= groups <= MAX_HEAD_GROUPS or len(window) != groups * rank:
        raise ValueError(f"head rules: groups must be in [1, {MAX_HEAD_GROUPS}] with {rank} "
                         f"values each, got {len(window)} window values")
    if not 1 <= len(group_of_head) <= MAX_HEADS_WITH_RULES:
        raise ValueError(f"head rules: query heads must be in [1, {MAX_HEADS_WITH_RULES}], got "
                         f"{len(group_of_head)}")
    r = HeadRules()
    r.groups = groups
    r.heads = len(group_of_head)
    for name, values in (("window", window), ("stride", stride), ("dilation", dilation),
                         ("causal", [1 if c else 0 for c in causal])):
        if len(values) != groups * rank:
            raise ValueError(f"head rules: {name} must hold {groups * rank} values ({groups} "
                             f"groups x {rank} axes), got {len(values)}")
        table = getattr(r, name)
        for i, v in enumerate(values):
            table[i // rank][i % rank] = int32(v, f"head rules: {name}")
    group_map = (ctypes.c_int32 * len(group_of_head))(
        *[int32(g, "head rules: group_of_head") for g in group_of_head])
    r.group_of_head = ctypes.cast(group_map, ctypes.POINTER(ctypes.c_int32))
    r._group_map = group_map  # the pointer's storage lives as long as the struct
    return r


def sta_params(extent, tile, window):
    """GNA parameters (window, stride per axis) of Sliding Tile Attention, from the core."""
    rank = len(extent)
    p = Params()
    check(lib.gna_sta_params(rank, int_array(extent, "extent"), int_array(tile, "tile_shape"),
                             int_array(window, "window (tile_shape * window_tiles)"),
                             ctypes.byref(p)))
    return [p.window[i] for i in range(rank)], [p.stride[i] for i in range(rank)]
