"""gna.simulate: the simulator through the C ABI (runs without torch)."""
import sys
from pathlib import Path

import pytest

try:
    import gna
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import gna


def test_flux_worked_example():
    # docs/rule.md section 8.3: 256x256, window 80x80, stride 16x16, Q tile 16x16, KV tile 16x8.
    r = gna.simulate((256, 256), 80, stride=16, q_tile=16, kv_tile=(16, 8))
    assert r["dense_kv_tiles"] == 512
    assert r["max_kv_tiles"] == 50
    assert r["block_sparse"] is True
    assert r["partial_pairs"] == 0
    assert r["tile_speedup"] == pytest.approx(10.24)
    assert r["flop_speedup"] == pytest.approx(65536 / 6400)
    assert r["mean_keys_per_query"] == pytest.approx(6400)


def test_stride_one_is_not_block_sparse_and_bounds_are_ordered():
    r = gna.simulate((256, 256), (80, 80), q_tile=(16, 16), kv_tile=(16, 8))
    assert not r["block_sparse"] and r["partial_pairs"] > 0
    assert 1.0 < r["tile_speedup"] <= r["flop_speedup"]
    assert r["sparsity"] == pytest.approx(1 - 6400 / 65536)


def test_one_dim_tiling_and_dynamic_kv_tiles():
    one = gna.simulate((64, 64), 16, q_tile=(128, 1), kv_tile=(128, 1), tiling="1d")
    multi = gna.simulate((64, 64), 16, q_tile=(16, 8), kv_tile=(16, 8))
    dyn = gna.simulate((64, 64), 16, q_tile=(16, 8), kv_tile=(16, 8), kv_tiling="dynamic")
    assert one["tokens"] == multi["tokens"] == 4096
    assert dyn["max_kv_tiles"] <= multi["max_kv_tiles"]


def test_end_to_end_model():
    r = gna.simulate((256, 256), 80, stride=16, q_tile=16, kv_tile=(16, 8),
                     attention_share=0.8, dense_steps=10, total_steps=50)
    s = r["tile_speedup"]
    expected = 1 / ((1 - 0.8) + 0.8 * (10 / 50 + (1 - 10 / 50) / s))
    assert r["end_to_end_speedup"] == pytest.approx(expected)
    assert gna.end_to_end_speedup(1.0, 4.0) == pytest.approx(4.0)


@pytest.mark.parametrize("kwargs, words", [
    (dict(shape=(64,), window=128, q_tile=16, kv_tile=16), ["window", "128"]),
    (dict(shape=(64,), window=8, stride=9, q_tile=16, kv_tile=16), ["stride", "9"]),
    (dict(shape=(64,), window=8, dilation=0, q_tile=16, kv_tile=16), ["dilation", "0"]),
    (dict(shape=(64, 64), window=(8, 8, 8), q_tile=16, kv_tile=16), ["window"]),
    (dict(shape=(64,), window=8, q_tile=16, kv_tile=16, tiling="2d"), ["tiling", "2d"]),
    (dict(shape=(64,), window=8, q_tile=16, kv_tile=16, kv_tiling="x"), ["kv_tiling", "x"]),
    (dict(shape=(64,), window=8, q_tile=None, kv_tile=16), ["q_tile"]),
])
def test_invalid_configuration_raises_value_error(kwargs, words):
    with pytest.raises(ValueError) as info:
        gna.simulate(**kwargs)
    for w in words:
        assert w in str(info.value)


def test_invalid_end_to_end_raises_value_error():
    with pytest.raises(ValueError, match="attention share"):
        gna.end_to_end_speedup(1.5, 2.0)
    with pytest.raises(ValueError, match="dense steps"):
        gna.end_to_end_speedup(0.5, 2.0, dense_steps=5, total_steps=4)


def test_stride_sweep():
    kept = gna.stride_sweep((256, 256), 80, q_tile=16, kv_tile=(16, 8))
    assert kept[0]["stride"] == (1, 1)
    assert all(e["kept"] for e in kept)
    bounds = [e["tile_speedup"] for e in kept]
    assert (16, 16) in [e["stride"] for e in kept]
    assert max(bounds) == pytest.approx(10.24)
    every = gna.stride_sweep((256, 256), 80, q_tile=16, kv_tile=(16, 8), pruned=False)
    assert len(every) == 80 * 80
    products = [e["stride"][0] * e["stride"][1] for e in every]
    assert products == sorted(products)
    sparse = gna.stride_sweep((256, 256), 80, q_tile=16, kv_tile=(16, 8), pruned=False,
                              block_sparse_only=True)
    assert sparse[0]["stride"] == (16, 16) and all(e["partial_pairs"] == 0 for e in sparse)
    with pytest.raises(ValueError, match="window"):
        gna.stride_sweep((64,), 65, q_tile=16, kv_tile=16)


def test_kernel_tiles_hopper_forward():
    # The Hopper forward places its KV tiles for the hunyuan and wan neighborhoods and keeps the
    # grid where the stride makes the layout block-sparse (FLUX 4K, stride 16x16).
    q, kv, kv_tiling = gna.kernel_tiles((30, 48, 80), (18, 24, 24))
    assert (q, kv, kv_tiling) == ((2, 8, 8), (2, 8, 8), "dynamic")
    assert gna.kernel_tiles((21, 45, 80), (15, 27, 48), kernel="hopper-forward")[2] == "dynamic"
    q, kv, kv_tiling = gna.kernel_tiles((256, 256), 80, stride=16)
    assert kv_tiling == "static"
    assert q[0] * q[1] == 128 and kv[0] * kv[1] == 128
    # Head dim 256 runs 64-key KV tiles; the backward 64-row Q tiles on grid KV tiles.
    _, kv, _ = gna.kernel_tiles((256, 256), 80, head_dim=256)
    assert kv[0] * kv[1] == 64
    q, kv, kv_tiling = gna.kernel_tiles((30, 48, 80), (18, 24, 24), kernel="hopper backward")
    assert q[0] * q[1] * q[2] == 64 and kv[0] * kv[1] * kv[2] == 128 and kv_tiling == "static"
    # The portable backward: 64-key KV tiles where many pairs are partial, 128 where none are.
    q, kv, kv_tiling = gna.kernel_tiles((30, 48, 80), (18, 24, 24), kernel="portable backward")
    assert q[0] * q[1] * q[2] == 64 and kv[0] * kv[1] * kv[2] == 64 and kv_tiling == "static"
    _, kv, _ = gna.kernel_tiles((30, 48, 80), (18, 24, 24), stride=(16, 8, 8),
                                kernel="portable-backward")
    assert kv[0] * kv[1] * kv[2] == 128


def test_simulate_with_kernel_is_simulate_with_its_tiles():
    for kernel, head_dim in (("hopper forward", None), ("hopper_backward", 64),
                             ("hopper forward", 256), ("portable forward", 64),
                             ("portable backward", 128)):
        kwargs = {} if head_dim is None else {"head_dim": head_dim}
        r = gna.simulate((30, 48, 80), (18, 24, 24), attention_share=0.8, kernel=kernel, **kwargs)
        q, kv, kv_tiling = gna.kernel_tiles((30, 48, 80), (18, 24, 24), kernel=kernel,
                                            head_dim=128 if head_dim is None else head_dim)
        assert (r.pop("q_tile"), r.pop("kv_tile"), r.pop("kv_tiling")) == (q, kv, kv_tiling)
        e = gna.simulate((30, 48, 80), (18, 24, 24), q_tile=q, kv_tile=kv, kv_tiling=kv_tiling,
                         attention_share=0.8)
        assert r == e


@pytest.mark.parametrize("kwargs, words", [
    ({"kernel": "hopper sideways"}, ["kernel", "hopper sideways", "hopper forward"]),
    ({"kernel": "hopper forward", "q_tile": 8}, ["q_tile=8"]),
    ({"kernel": "hopper forward", "kv_tile": 8}, ["kv_tile=8"]),
    ({"kernel": "hopper forward", "kv_tiling": "static"}, ["kv_tiling='static'"]),
    ({"kernel": "hopper forward", "tiling": "multi"}, ["tiling='multi'"]),
    ({"head_dim": 64, "q_tile": 8, "kv_tile": 8}, ["head_dim=64", "kernel"]),
    ({"kernel": "hopper forward", "head_dim": 96}, ["head_dim", "96"]),
    ({"kernel": "hopper backward", "head_dim": 256}, ["head_dim", "256"]),
])
def test_simulate_kernel_bad_input_raises_value_error(kwargs, words):
    with pytest.raises(ValueError) as e:
        gna.simulate((64, 64), 16, **kwargs)
    for w in words:
        assert w in str(e.value)


def test_kernel_tiles_bad_input_raises_value_error():
    with pytest.raises(ValueError, match="kernel"):
        gna.kernel_tiles((64, 64), 16, kernel="portable sideways")
    with pytest.raises(ValueError, match="window"):
        gna.kernel_tiles((10,), 12)
    with pytest.raises(ValueError, match="head_dim"):
        gna.kernel_tiles((64, 64), 16, head_dim=2**40)


def test_predicted_speedup_is_the_cost_model():
    # Dense attention over a whole number of tiles predicts exactly 1; a neighborhood predicts
    # less than its tile-wise bound's dense cost over the cost of its pairs, and more than 1.
    dense = gna.predicted_speedup((30, 48, 80), (30, 48, 80))
    assert dense["speedup"] == pytest.approx(1.0, abs=1e-12)
    assert dense["cost"] == pytest.approx(dense["dense_cost"])
    hunyuan = gna.predicted_speedup((30, 48, 80), (18, 24, 24))
    r = gna.simulate((30, 48, 80), (18, 24, 24), kernel="hopper forward")
    assert hunyuan["dense_cost"] == pytest.approx(dense["dense_cost"])
    assert hunyuan["cost"] > r["visited_pairs"]  # partial pairs and work items cost more
    assert 1.0 < hunyuan["speedup"] < r["dense_kv_tiles"] * r["q_tiles"] / r["visited_pairs"]
    assert hunyuan["speedup"] == pytest.approx(hunyuan["dense_cost"] / hunyuan["cost"])
    backward = gna.predicted_speedup((30, 48, 80), (18, 24, 24), kernel="hopper backward")
    assert backward["speedup"] > 1.0 and backward["cost"] != hunyuan["cost"]
    # The portable forward (mma.sync) is slower per pair than the Hopper forward (wgmma).
    portable = gna.predicted_speedup((30, 48, 80), (18, 24, 24), kernel="portable forward")
    assert portable["speedup"] > 1.0 and portable["ms_per_head"] > hunyuan["ms_per_head"]
    # Times: the cost at the model's time per pair, at head dim 128 only.
    assert 0 < hunyuan["ms_per_head"] < dense["ms_per_head"]
    assert hunyuan["ms_per_head"] / dense["ms_per_head"] == pytest.approx(
        hunyuan["cost"] / dense["cost"])
    assert gna.predicted_speedup((30, 48, 80), (18, 24, 24), head_dim=64)["ms_per_head"] is None
    with pytest.raises(ValueError, match="head_dim"):
        gna.predicted_speedup((64,), 16, head_dim=48)
    with pytest.raises(ValueError, match="kernel"):
        gna.predicted_speedup((64,), 16, kernel="hopper sideways")
