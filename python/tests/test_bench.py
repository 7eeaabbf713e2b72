"""The benchmark's pieces that need no GPU: FlexAttention's arithmetic mask and its check against
gna's reference, the tiled token order, case selection and the reports."""
import pytest

torch = pytest.importorskip("torch")

import gna  # noqa: E402
from gna.bench import cases, peers, report  # noqa: E402


def test_axis_key_ranges_on_rules_with_known_windows():
    first, last = peers.axis_key_ranges(12, 4, 4, 1, False)  # blocked: blocks of 4
    assert first.tolist() == [0] * 4 + [4] * 4 + [8] * 4
    assert last.tolist() == [3] * 4 + [7] * 4 + [11] * 4
    first, last = peers.axis_key_ranges(9, 9, 1, 1, False)  # window = extent: everything
    assert first.tolist() == [0] * 9 and last.tolist() == [8] * 9
    first, last = peers.axis_key_ranges(6, 6, 1, 1, True)  # causal, full window
    assert first.tolist() == [0] * 6 and last.tolist() == list(range(6))
    first, last = peers.axis_key_ranges(20, 5, 1, 1, False)  # every query sees 5 keys
    assert ((last - first) == 4).all()


def test_tiled_token_order_matches_token_coords():
    case = cases.Case("t", (4, 6, 8), 1, 1, (2, 2, 2), tile=(2, 3, 4))
    n = case.tokens
    coords = torch.stack(torch.meshgrid(*[torch.arange(e) for e in case.layout],
                                        indexing="ij"), dim=-1)  # [4, 6, 8, 3]
    x = coords.reshape(1, 4, 6, 8, 1, 3).double()
    tiled = peers.to_tiled_tokens(x, case)  # [1, 1, N, 3]
    got = torch.stack(peers.token_coords(torch.arange(n), case.layout, case.tile), dim=-1)
    assert torch.equal(tiled[0, 0].long(), got)
    row_major = cases.Case("r", (4, 6), 1, 1, (2, 2))
    got = torch.stack(peers.token_coords(torch.arange(24), (4, 6), None), dim=-1)
    assert got[7].tolist() == [1, 1] and row_major.tokens == 24


def test_case_selection():
    assert [c.window for c in cases.select(["flux4k"])] == [(80, 80), (80, 80)]
    assert cases.select(["hunyuan:2"])[0].strides == (16, 8, 8)
    assert len(cases.select([])) == len(cases.in_set("peers"))
    assert [c.key for c in cases.select([], quick=True)] == [c.key for c in cases.in_set("quick")]
    named = cases.select(["flux4k 80x80 s16x16", "hunyuan dense"])
    assert [c.strides for c in named] == [(16, 16), (1, 1, 1)]
    assert len(cases.select([], case_set="image")) == 8
    with pytest.raises(ValueError, match="nope"):
        cases.select(["nope"])
    with pytest.raises(ValueError, match="nope"):
        cases.select([], case_set="nope")


def test_case_table_comes_from_the_library():
    table = cases.table()
    keys = [c.key for c in table]
    assert len(set(keys)) == len(keys)
    nat = next(c for c in table if c.key == "nat 56x56 b128 h2 d32 7x7")
    assert (nat.layout, nat.window, nat.batch, nat.heads, nat.dim) == ((56, 56), (7, 7), 128, 2, 32)
    assert nat.tile is None and nat.dtype == "bf16" and "image" in nat.sets
    dinat = next(c for c in table if c.key.startswith("dinat 56x56"))
    assert dinat.dilations == (8, 8)
    for c in table:
        assert c.sets and c.rank == len(c.window) and c.causals == (False,) * c.rank


def test_reports():
    rows = [dict(case="c", pass_="fwd", impl="cuDNN SDPA dense", backend=None, ms=2.0,
                 tflops=100.0, x_cudnn=1.0),
            dict(case="c", pass_="fwd", impl="gna kernel-only", backend="hopper", ms=0.5,
                 tflops=40.0, x_cudnn=4.0),
            dict(case="c", pass_="fwd", impl="FlexAttention", backend=None, ms=None,
                 tflops=None, error="RuntimeError: boom")]
    for r in rows:
        r["pass"] = r.pop("pass_")
    table = report.markdown(rows)
    rows[1]["predicted"] = 4.2
    rows[1]["predicted_ms"] = 0.476
    table = report.markdown(rows)
    assert "| c | fwd | cuDNN SDPA dense |  | 2.000 | 100.0 | — | — | 1.00 | — | — | — |" in table
    assert "| 4.00 | — | 0.476 | 4.20 |" in table
    assert "hopper" in table and "error: RuntimeError: boom" in table
    svg = report.svg_chart(rows, "t")
    assert svg.startswith("<svg") and "4.00×" in svg and "boom" not in svg


def test_flex_mask_follows_dilation():
    # 1-D, extent 12, window 3, dilation 2: each dilation group (even, odd) holds 6 tokens and
    # every query attends the 3 group keys of its window, clamped at the group's ends.
    case = cases.Case("d", (12,), 1, 1, (3,), dilation=(2,))
    assert "dilation 2" in case.label
    mask_mod = peers.make_mask_mod(case, "cpu")
    q_idx = torch.arange(12).reshape(12, 1)
    kv_idx = torch.arange(12).reshape(1, 12)
    got = mask_mod(0, 0, q_idx, kv_idx)
    expected = torch.zeros(12, 12, dtype=torch.bool)
    for i in range(12):
        ig, group = i // 2, i % 2
        start = min(max(ig - 1, 0), 6 - 3)
        for jg in range(start, start + 3):
            expected[i, group + 2 * jg] = True
    assert torch.equal(got, expected)


def test_flex_arithmetic_window_equals_gnas_rule_on_random_axes():
    import random
    rng = random.Random(7)
    checked = 0
    while checked < 60:
        extent = rng.randint(2, 40)
        dilation = rng.choice([1, 1, 2, 3])
        window = rng.randint(2, max(2, extent // dilation))
        stride = rng.randint(1, window)
        causal = rng.random() < 0.3
        if window * dilation > extent:
            continue
        peers.check_axis_window(extent, window, stride, dilation, causal)
        checked += 1
    for case in cases.in_set("peers") + cases.in_set("image"):
        if case.tokens <= 120000:  # the rules of every benchmark case's axes
            for a in range(case.rank):
                peers.check_axis_window(case.layout[a], case.window[a], case.strides[a],
                                        case.dilations[a], case.causals[a])


def test_flex_window_check_catches_a_wrong_form(monkeypatch):
    right = peers.axis_window
    monkeypatch.setattr(peers, "axis_window",
                        lambda q, *rule: tuple(x + (q == 5).long() for x in right(q, *rule)))
    with pytest.raises(AssertionError, match="query 5 attends keys"):
        peers.check_axis_window(20, 5, 1, 1, False)


def test_time_budget_cuts_a_slow_row_off_with_the_reason():
    import time
    from gna.bench.budget import BudgetExceeded, time_budget
    start = time.time()
    with pytest.raises(BudgetExceeded, match="slow peer exceeded its 0.2 s budget"):
        with time_budget(0.2, "slow peer"):
            while time.time() - start < 5:
                pass
    assert time.time() - start < 2
    with time_budget(0.5, "quick"):  # within the budget: no error, and the timer is cleared
        pass
    time.sleep(0.6)
    with time_budget(0, "unlimited"):  # 0: no budget
        time.sleep(0.05)


def test_flex_rows_after_a_pass_out_of_budget_are_skipped_with_the_reason(monkeypatch):
    from gna.bench.__main__ import Runner, parse
    from gna.bench.budget import BudgetExceeded
    runner = Runner(parse(["--flex-budget-s", "30"]))
    case = cases.Case("t", (8, 8), 1, 32, (3, 3))
    monkeypatch.setattr(runner, "_inputs", lambda c: [None] * 3)
    monkeypatch.setattr(runner, "_passes", lambda: ["fwd", "fwd+bwd"])
    monkeypatch.setattr(runner, "_pass_flops", lambda c, p: 1.0)
    monkeypatch.setattr(runner, "_place_last_row", lambda label, p: None)
    monkeypatch.setattr(runner, "_derived_columns", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    calls = []

    def flex_row(c, pass_name, q, k, v, flops, grad):
        calls.append(pass_name)
        raise BudgetExceeded("FlexAttention fwd (mask, compilation and timing) exceeded its "
                             "30 s budget")
    monkeypatch.setattr(runner, "_flex_row", flex_row)
    runner.run_flex(case)
    assert calls == ["fwd"]  # the fwd+bwd pass is not tried
    assert [r["pass"] for r in runner.rows] == ["fwd", "fwd+bwd"]
    assert all("exceeded its 30 s budget" in r["error"] for r in runner.rows)
    assert runner.rows[1]["error"].startswith("RuntimeError: skipped: FlexAttention fwd")


@pytest.mark.parametrize("argv, words", [
    (["--rep-ms", "inf"], ["--rep-ms", "inf"]),
    (["--rep-ms", "0"], ["--rep-ms", "0"]),
    (["--warmup-ms", "nan"], ["--warmup-ms", "nan"]),
    (["--slow-s=-1"], ["--slow-s", "-1"]),
    (["--flex-budget-s", "nan"], ["--flex-budget-s", "nan"]),
    (["--reference-limit=-inf"], ["--reference-limit", "-inf"]),
    (["--rep-ms", "lots"], ["--rep-ms", "lots"]),
    (["--passes", "bwd"], ["--passes", "bwd"]),
    (["--backend", ""], ["--backend"]),
    (["--bogus"], ["--bogus"]),
    (["--precision", "int8"], ["--precision", "int8"]),
])
def test_bad_arguments_are_usage_errors(argv, words, capsys):
    from gna.bench.__main__ import parse
    with pytest.raises(SystemExit) as info:
        parse(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    for w in words:
        assert w in err, err


def test_cuda_graph_rows_are_asked_for():
    from gna.bench.__main__ import parse
    assert parse(["--cuda-graph"]).cuda_graph and not parse([]).cuda_graph


def test_compiled_rows_are_asked_for():
    from gna.bench.__main__ import parse
    assert parse(["--compile"]).compile and not parse([]).compile


def test_fp8_rows_are_asked_for_and_reported():
    from gna.bench.__main__ import parse
    from gna.bench import report
    assert parse(["--precision", "fp8"]).precision == "fp8" and parse([]).precision == "auto"
    row = dict(case="c", impl="gna fp8 end-to-end", backend="b", ms=1.0, tflops=2.0,
               cosine=0.99871, rel_l1=0.0512)
    row["pass"] = "fwd"
    table = report.markdown([row])
    assert "cos vs fp32" in table and "0.99871" in table and "0.0512" in table


def test_unknown_case_is_an_error_naming_it(capsys):
    from gna.bench.__main__ import main
    assert main(["--cases", "nope", "--list"]) == 2
    assert "nope" in capsys.readouterr().err


def test_case_table_rejects_bad_indices():
    from gna import _lib
    c = _lib.SimBenchCase()
    n = _lib.lib.gna_sim_bench_case_count()
    for bad in (-1, n):
        with pytest.raises(ValueError, match="index"):
            _lib.check(_lib.lib.gna_sim_bench_case_at(bad, c), _lib.lib.gna_sim_last_error)
    _lib.check(_lib.lib.gna_sim_bench_case_at(n - 1, c), _lib.lib.gna_sim_last_error)
    assert c.name.decode() == cases.table()[-1].key


def test_rows_record_their_wall_time(monkeypatch, capsys):
    """Each row keeps what it cost the run (first call, benchmark), so a slow peer shows."""
    from types import SimpleNamespace
    from gna.bench import __main__ as bench_main
    monkeypatch.setattr(bench_main.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(bench_main, "bench_ms", lambda fn, warmup, rep: 1.5)
    runner = bench_main.Runner(SimpleNamespace(slow_s=60.0, warmup_ms=1, rep_ms=1))
    case = cases.Case("x", (8,), 1, 16, (3,))
    row = runner.record(case, "fwd", "gna end-to-end", lambda: None, 3e9, backend="halo")
    assert row["ms"] == 1.5 and row["wall_s"] >= 0.0
    assert "[" in capsys.readouterr().out
    failed = runner.record(case, "fwd", "FlexAttention", lambda: None, 3e9, skip="not here")
    assert failed["ms"] is None and "wall_s" in failed


def test_flex_rows_are_timed_after_every_other_row():
    """FlexAttention's compile slows later eager calls on the host, so every case's dense and gna
    rows run before any case's Flex rows; each Flex row lands beside its case and pass."""
    from types import SimpleNamespace
    from gna.bench import __main__ as bench_main
    calls = []
    runner = bench_main.Runner(SimpleNamespace(no_flex=False))
    first, second = cases.Case("a", (8,), 1, 16, (3,)), cases.Case("b", (8,), 1, 16, (5,))

    def rows_of(case, impl):
        for pass_name in ("fwd", "fwd+bwd"):
            runner.rows.append(dict(case=case.label, impl=impl, **{"pass": pass_name}))
            if impl == "FlexAttention":
                runner._place_last_row(case.label, pass_name)

    runner.run_case = lambda case: (calls.append(("gna", case.label)), rows_of(case, "gna"))
    runner.run_flex = lambda case: (calls.append(("flex", case.label)),
                                    rows_of(case, "FlexAttention"))
    written = []
    runner.run([first, second], lambda rows: written.append(len(rows)))
    assert calls == [("gna", first.label), ("gna", second.label),
                     ("flex", first.label), ("flex", second.label)]
    assert written == [2, 4, 6, 8]
    assert [(r["case"], r["pass"], r["impl"]) for r in runner.rows] == [
        (c.label, p, impl) for c in (first, second) for p in ("fwd", "fwd+bwd")
        for impl in ("gna", "FlexAttention")]
    calls.clear()
    runner.args.no_flex = True
    runner.run([first], lambda rows: None)
    assert calls == [("gna", first.label)]


def test_pass_bytes():
    from gna.bench import __main__ as bench_main
    case = cases.Case("a", (8,), 2, 16, (3,))
    tensor, lse = 1 * 8 * 2 * 16 * 2, 1 * 8 * 2 * 4  # batch 1, 8 tokens, 2 heads, head dim 16
    assert bench_main.Runner._pass_bytes(case, "fwd") == 4 * tensor + lse
    assert bench_main.Runner._pass_bytes(case, "fwd+bwd") == 12 * tensor + 3 * lse


def test_pass_flops_count_attended_pairs_once_per_case(monkeypatch):
    from types import SimpleNamespace
    from gna.bench import __main__ as bench_main
    calls = []
    monkeypatch.setattr(bench_main, "_attended_keys", lambda case: calls.append(case) or 3.0)
    runner = bench_main.Runner(SimpleNamespace())
    case = cases.Case("a", (8,), 2, 16, (3,))
    fwd = 4.0 * 1 * 2 * 8 * 3.0 * 16  # batch 1, 2 heads, 8 tokens, 3 keys, head dim 16
    assert runner._pass_flops(case, "fwd") == fwd
    assert runner._pass_flops(case, "fwd+bwd") == 3.5 * fwd
    assert len(calls) == 1


def test_predicted_columns_on_hopper_and_portable_rows_only():
    """Rows on the Hopper backend carry gna-sim's predicted time of the pass (the forward's cost
    model; plus the backward's for fwd+bwd), forward rows on the portable backend the portable
    forward's, and cuDNN's measured time over it; other rows none (the portable backward has no
    cost model), nor head dims whose times were not measured."""
    from types import SimpleNamespace
    from gna.bench import __main__ as bench_main
    runner = bench_main.Runner(SimpleNamespace())
    runner.copy_gbps = 1000.0
    case = cases.Case("h", (30, 48, 80), 24, 128, (18, 24, 24))
    for pass_name in ("fwd", "fwd+bwd"):
        runner.rows += [dict(case=case.label, impl="gna kernel-only", backend="hopper", ms=50.0,
                             **{"pass": pass_name}),
                        dict(case=case.label, impl="gna end-to-end", backend="halo", ms=60.0,
                             **{"pass": pass_name}),
                        dict(case=case.label, impl="gna end-to-end", backend="portable", ms=90.0,
                             **{"pass": pass_name})]
        runner._derived_columns(case, pass_name, 260.0, 1e9)
    by = {(r["pass"], r["backend"]): r for r in runner.rows}
    fwd = gna.predicted_speedup((30, 48, 80), (18, 24, 24), head_dim=128)["ms_per_head"]
    bwd = gna.predicted_speedup((30, 48, 80), (18, 24, 24), head_dim=128,
                                kernel="hopper backward")["ms_per_head"]
    assert 0 < fwd < bwd
    assert by[("fwd", "hopper")]["predicted_ms"] == pytest.approx(24 * fwd)
    assert by[("fwd", "hopper")]["predicted"] == pytest.approx(260.0 / (24 * fwd))
    assert by[("fwd+bwd", "hopper")]["predicted_ms"] == pytest.approx(24 * (fwd + bwd))
    assert by[("fwd+bwd", "hopper")]["predicted"] == pytest.approx(260.0 / (24 * (fwd + bwd)))
    portable = gna.predicted_speedup((30, 48, 80), (18, 24, 24), head_dim=128,
                                     kernel="portable forward")["ms_per_head"]
    assert portable > fwd
    assert by[("fwd", "portable")]["predicted_ms"] == pytest.approx(24 * portable)
    assert by[("fwd", "portable")]["predicted"] == pytest.approx(260.0 / (24 * portable))
    portable_bwd = gna.predicted_speedup((30, 48, 80), (18, 24, 24), head_dim=128,
                                         kernel="portable backward")["ms_per_head"]
    assert portable_bwd > bwd
    assert by[("fwd+bwd", "portable")]["predicted_ms"] == pytest.approx(
        24 * (portable + portable_bwd))
    assert by[("fwd+bwd", "portable")]["predicted"] == pytest.approx(
        260.0 / (24 * (portable + portable_bwd)))
    for pass_name in ("fwd", "fwd+bwd"):
        assert by[(pass_name, "halo")].get("predicted") is None
    d64 = cases.Case("h", (30, 48, 80), 24, 64, (18, 24, 24))
    runner.rows = [dict(case=d64.label, impl="gna kernel-only", backend="hopper", ms=50.0,
                        **{"pass": "fwd"})]
    runner._derived_columns(d64, "fwd", 260.0, 1e9)
    assert runner.rows[0].get("predicted") is None


def test_portable_predictions_on_99kb_devices(monkeypatch):
    from gna.bench.__main__ import _predicted_ms, _shared_memory_per_block
    case = next(c for c in cases.table() if c.key == "hunyuan 18x24x24 s16x8x8")
    per_head = lambda kernel: gna.predicted_speedup(  # noqa: E731
        case.layout, case.window, stride=case.strides, kernel=kernel)["ms_per_head"]
    heads = case.batch * case.heads
    roomy = _predicted_ms(case, "fwd+bwd", "portable", 232448)
    assert roomy == pytest.approx(heads * (per_head("portable forward") +
                                           per_head("portable backward")))
    small = _predicted_ms(case, "fwd+bwd", "portable", 101376)
    assert small == pytest.approx(heads * (per_head("portable forward 99kb") +
                                           per_head("portable backward 99kb")))
    # One K/V stage in the forward, the 64-key backward: slower than with room for both.
    assert small > roomy * 1.03
    assert _predicted_ms(case, "fwd", "hopper", 101376) == _predicted_ms(case, "fwd", "hopper")
    monkeypatch.setenv("GNA_MAX_SHARED_MEMORY_BYTES", "101376")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert _shared_memory_per_block() == 101376


def test_host_cost_times_a_call_on_the_host():
    from gna.bench import host_cost
    rows = host_cost.parts((1, 8, 1, 8, 1), "cpu", calls=2)
    names = [name for name, _ in rows]
    assert "gna.na2d forward + backward" in names and "C ABI backward (prebuilt call)" in names
    assert all(0 < micros < 10e6 for _, micros in rows)
