"""gna-sim command line: JSON parses and holds the promised fields, pictures are well-formed XML,
flags are validated, bad flags give usage errors (exit 2), invalid problems give the core's
message (exit 1). Usage: test_cli.py PATH/TO/gna-sim"""

import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import xml.etree.ElementTree as ET

SIM = None

REQUIRED = ["tokens", "dense_kv_tiles", "max_kv_tiles", "mean_kv_tiles", "flop_speedup",
            "tile_speedup", "sparsity", "pairs", "block_sparse", "wasted_flop_fraction"]


def run(*args):
    return subprocess.run([SIM, *args], capture_output=True, text=True, timeout=120)


def run_json(*args):
    r = run(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


class Simulate(unittest.TestCase):
    def test_json_has_required_fields(self):
        d = run_json("--shape", "30x48x80", "--window", "18x24x24", "--q-tile", "4x8x8",
                     "--kv-tile", "2x8x8")
        for key in REQUIRED:
            self.assertIn(key, d)
        self.assertEqual(set(d["pairs"]), {"empty", "full", "partial"})
        self.assertIsInstance(d["block_sparse"], bool)
        self.assertEqual(d["tokens"], 115200)
        self.assertNotIn("e2e_flop_speedup", d)
        self.assertEqual(d["config"]["shape"], [30, 48, 80])

    def test_flux_worked_example(self):
        d = run_json("simulate", "--shape", "256x256", "--window", "80x80", "--stride", "16x16",
                     "--q-tile", "16x16", "--kv-tile", "16x8")
        self.assertEqual(d["dense_kv_tiles"], 512)
        self.assertEqual(d["max_kv_tiles"], 50)
        self.assertEqual(d["mean_kv_tiles"], 50)
        self.assertTrue(d["block_sparse"])
        self.assertEqual(d["pairs"]["partial"], 0)
        self.assertEqual(d["tile_speedup"], 10.24)
        self.assertEqual(d["flop_speedup"], 10.24)
        self.assertEqual(d["wasted_flop_fraction"], 0)

    def test_end_to_end(self):
        d = run_json("--preset", "flux4k", "--stride", "16x16", "--attention-share", "0.8",
                     "--dense-steps", "10", "--total-steps", "50")
        expected = 1 / (0.2 + 0.8 * (0.2 + 0.8 / 10.24))
        self.assertAlmostEqual(d["e2e_flop_speedup"], expected, places=12)
        self.assertAlmostEqual(d["e2e_tile_speedup"], expected, places=12)
        d = run_json("--preset", "hunyuan", "--attention-share", "1")
        self.assertAlmostEqual(d["e2e_tile_speedup"], d["tile_speedup"], places=12)

    def test_designs_dilation_causal(self):
        base = ["--shape", "20x30x40", "--window", "5x7x9", "--dilation", "2x1x3",
                "--causal", "1x0x0", "--q-tile", "2x4x8", "--kv-tile", "4x4x4"]
        static = run_json(*base)
        dynamic = run_json(*base, "--kv-tiling", "dynamic")
        one_dim = run_json(*base, "--tiling", "1d")
        self.assertLessEqual(dynamic["max_kv_tiles"], static["max_kv_tiles"])
        self.assertEqual(one_dim["config"]["tiling"], "1d")
        self.assertEqual(one_dim["config"]["q_tile_tokens"], 64)
        for d in (static, dynamic, one_dim):
            self.assertEqual(d["tokens"], 24000)
            self.assertEqual(d["flop_speedup"], static["flop_speedup"])
        tokens = run_json("--shape", "20x30x40", "--window", "5", "--tiling", "1d",
                          "--q-tile", "128", "--kv-tile", "64")
        self.assertEqual(tokens["config"]["window"], [5, 5, 5])
        self.assertEqual(tokens["config"]["q_tile_tokens"], 128)

    def test_table(self):
        r = run("--preset", "hunyuan")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("tile-wise speedup bound", r.stdout)
        self.assertIn("3.60x", r.stdout)


class Sweep(unittest.TestCase):
    def test_json_and_svg(self):
        with tempfile.TemporaryDirectory() as tmp:
            svg = os.path.join(tmp, "sweep.svg")
            d = run_json("sweep", "--preset", "hunyuan", "--svg", svg)
            self.assertEqual(d["strides_simulated"], 18 * 24 * 24)
            self.assertEqual(d["selection"], "pruned")
            strides = [e["stride"] for e in d["entries"]]
            self.assertEqual(strides[0], [1, 1, 1])
            self.assertIn([2, 8, 8], strides)
            self.assertTrue(all(e["kept"] for e in d["entries"]))
            self.assertLess(d["seconds"], 1.0)
            root = ET.parse(svg).getroot()
            self.assertTrue(root.tag.endswith("svg"))

    def test_selections(self):
        bs = run_json("sweep", "--preset", "flux4k", "--block-sparse")
        self.assertTrue(all(e["block_sparse"] for e in bs["entries"]))
        self.assertEqual(len(bs["entries"]), bs["strides_block_sparse"])
        everything = run_json("sweep", "--preset", "nat", "--all")
        self.assertEqual(len(everything["entries"]), 49)
        products = [e["stride"][0] * e["stride"][1] for e in everything["entries"]]
        self.assertEqual(products, sorted(products))

    def test_table(self):
        r = run("sweep", "--preset", "hunyuan", "--attention-share", "0.5")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2x8x8", r.stdout)
        self.assertIn("e2e tile", r.stdout)


class PresetsAndShow(unittest.TestCase):
    def test_presets(self):
        d = run_json("presets")
        names = [p["name"] for p in d["presets"]]
        self.assertEqual(names, ["hunyuan", "cosmos", "wan", "flux4k", "nat", "long1d"])
        r = run("presets")
        self.assertEqual(r.returncode, 0)
        self.assertIn("30x48x80", r.stdout)

    def test_show_pictures_are_xml(self):
        cases = [
            ["--preset", "hunyuan", "--query", "12x20x33"],
            ["--preset", "hunyuan", "--query", "12x20x33", "--union", "--kv-tiling", "dynamic"],
            ["--preset", "flux4k", "--stride", "16x16", "--query", "100x37", "--union"],
            ["--preset", "long1d", "--query", "20000"],
            ["--shape", "24x40", "--window", "5x7", "--dilation", "2x3", "--causal", "1x0",
             "--q-tile", "4x4", "--kv-tile", "4x4", "--query", "15x20", "--tiling", "1d"],
        ]
        with tempfile.TemporaryDirectory() as tmp:
            for i, args in enumerate(cases):
                path = os.path.join(tmp, f"q{i}.svg")
                r = run("show", *args, "--svg", path)
                self.assertEqual(r.returncode, 0, r.stderr)
                root = ET.parse(path).getroot()
                self.assertTrue(root.tag.endswith("svg"), args)
                self.assertIn("KV tiles", open(path).read())


class Kernel(unittest.TestCase):
    """--kernel: the kernel's own tiles and KV tiling, the same numbers as giving them."""

    def explicit(self, d):
        c = d["config"]
        x = lambda v: "x".join(map(str, v))
        return ["--q-tile", x(c["q_tile"]), "--kv-tile", x(c["kv_tile"]),
                "--kv-tiling", c["kv_tiling"]]

    def test_kernel_equals_its_explicit_tiles(self):
        cases = [(["--shape", "30x48x80", "--window", "18x24x24"], "hopper-forward", "128",
                  "dynamic"),
                 (["--shape", "21x45x80", "--window", "15x27x48"], "hopper forward", "128",
                  "dynamic"),
                 (["--shape", "256x256", "--window", "80x80", "--stride", "16x16"],
                  "hopper-forward", "256", "static"),
                 (["--shape", "256x256", "--window", "80x80"], "hopper_backward", "64",
                  "static"),
                 (["--shape", "30x48x80", "--window", "18x24x24"], "portable-forward", "128",
                  "dynamic"),
                 (["--shape", "256x256", "--window", "80x80"], "portable forward", "64",
                  "static"),
                 (["--shape", "30x48x80", "--window", "18x24x24"], "portable-backward", "128",
                  "static"),
                 (["--shape", "256x256", "--window", "80x80"], "portable backward", "64",
                  "static")]
        for problem, kernel, head_dim, kv_tiling in cases:
            e2e = ["--attention-share", "0.8", "--dense-steps", "10", "--total-steps", "50"]
            d = run_json(*problem, "--kernel", kernel, "--head-dim", head_dim, *e2e)
            self.assertEqual(d["config"]["kernel"], kernel.replace(" ", "-").replace("_", "-"))
            self.assertEqual(d["config"]["head_dim"], int(head_dim))
            self.assertEqual(d["config"]["kv_tiling"], kv_tiling, problem)
            self.assertEqual(d["config"]["tiling"], "multi")
            want = 64 if kernel.endswith("backward") else 128
            self.assertEqual(d["config"]["q_tile_tokens"], want)
            e = run_json(*problem, *self.explicit(d), *e2e)
            del d["config"]["kernel"], d["config"]["head_dim"]
            # The kernel's cost model adds its prediction: the more pairs, the more cost.
            prediction = {k: d.pop(k) for k in ("predicted_cost", "predicted_dense_cost",
                                                "predicted_speedup", "predicted_ms_per_head")}
            # Times at head dim 128 only (where they were measured), else 0.
            if int(head_dim) == 128:
                self.assertGreater(prediction["predicted_ms_per_head"], 0)
            else:
                self.assertEqual(prediction["predicted_ms_per_head"], 0)
            self.assertGreater(prediction["predicted_cost"], d["visited_pairs"])
            self.assertAlmostEqual(prediction["predicted_speedup"],
                                   prediction["predicted_dense_cost"] / prediction["predicted_cost"])
            self.assertEqual(d, e, problem)
        table = run("--preset", "hunyuan", "--kernel", "hopper-forward")
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("hopper-forward, head dim 128", table.stdout)
        self.assertIn("dynamic KV tiles: Q tile 2x8x8, KV tile 2x8x8", table.stdout)
        self.assertIn("predicted speedup", table.stdout)
        d = run_json("--shape", "30x48x80", "--window", "18x24x24", "--kernel", "hopper-forward")
        self.assertEqual(d["config"]["head_dim"], 128)

    def test_show_takes_the_kernel_tiles(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "q.svg")
            r = run("show", "--preset", "hunyuan", "--kernel", "hopper-forward", "--query",
                    "15x24x40", "--svg", path)
            self.assertEqual(r.returncode, 0, r.stderr)
            ET.parse(path)

    def test_bad_kernel_flags(self):
        ok = ["--shape", "30x48x80", "--window", "18x24x24"]
        for flag, value in [("--q-tile", "2x8x8"), ("--kv-tile", "2x8x8"),
                            ("--kv-tiling", "static"), ("--tiling", "multi")]:
            r = run(*ok, "--kernel", "hopper-forward", flag, value)
            self.assertEqual(r.returncode, 2)
            self.assertIn(flag + " and --kernel exclude each other", r.stderr)
        r = run(*ok, "--kernel", "hopper-sideways")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--kernel: expected one of hopper-forward, hopper-backward, "
                      "portable-forward, portable-backward, portable-forward-99kb, "
                      "portable-backward-99kb, got 'hopper-sideways'", r.stderr)
        r = run(*ok, "--q-tile", "2x8x8", "--kv-tile", "2x8x8", "--head-dim", "64")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--head-dim needs --kernel", r.stderr)
        r = run("sweep", *ok, "--kernel", "hopper-forward")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--kernel is not an option of sweep", r.stderr)
        r = run(*ok, "--kernel", "hopper-forward", "--head-dim", "96")
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(), "gna-sim: error: head_dim: the hopper forward runs "
                         "32, 64, 128 or 256, got 96")
        r = run(*ok, "--kernel", "hopper-backward", "--head-dim", "256")
        self.assertEqual(r.returncode, 1)
        self.assertIn("got 256", r.stderr)
        r = run("--shape", "10", "--window", "12", "--kernel", "hopper-forward")
        self.assertEqual(r.returncode, 1)
        self.assertIn("window*dilation must be <= extent=10", r.stderr)
        t0 = time.time()
        r = run("--shape", "2147483647", "--window", "2147483647", "--kernel", "hopper-forward")
        self.assertEqual(r.returncode, 1)
        self.assertIn("steps", r.stderr)
        self.assertLess(time.time() - t0, 5)


class BadInput(unittest.TestCase):
    def usage_error(self, *args):
        r = run(*args)
        self.assertEqual(r.returncode, 2, f"{args}: {r.stdout} {r.stderr}")
        self.assertIn("usage:", r.stderr)
        self.assertEqual(r.stdout, "")
        return r.stderr

    def test_bad_flags_give_usage_errors(self):
        ok = ["--shape", "30x48x80", "--window", "18x24x24", "--q-tile", "2x8x8",
              "--kv-tile", "2x8x8"]
        self.assertIn("unknown option '--bogus'", self.usage_error(*ok, "--bogus"))
        self.assertIn("unknown command", self.usage_error("frobnicate"))
        self.assertIn("needs a value", self.usage_error(*ok, "--stride"))
        self.assertIn("expected integers", self.usage_error(*ok, "--stride", "2x"))
        self.assertIn("expected an integer", self.usage_error(*ok, "--stride", "2xa"))
        self.assertIn("--dilation has 2 values", self.usage_error(*ok, "--dilation", "1x2"))
        self.assertIn("--q-tile has 2 values", self.usage_error(
            "--shape", "30x48x80", "--window", "18x24x24", "--q-tile", "8x8", "--kv-tile", "2x8x8"))
        self.assertIn("--kv-tile is required", self.usage_error(
            "--shape", "30x48x80", "--window", "18x24x24", "--q-tile", "2x8x8"))
        self.assertIn("--window is required", self.usage_error("--shape", "30x48x80"))
        self.assertIn("--shape (or --preset) is required", self.usage_error("--window", "3"))
        self.assertIn("expected 0 or 1", self.usage_error(*ok, "--causal", "2"))
        self.assertIn("expected multi or 1d", self.usage_error(*ok, "--tiling", "2d"))
        self.assertIn("expected static or dynamic", self.usage_error(*ok, "--kv-tiling", "x"))
        self.assertIn("unknown preset", self.usage_error("--preset", "nope"))
        self.assertIn("given twice", self.usage_error(*ok, "--json", "--json"))
        self.assertIn("takes no value", self.usage_error(*ok, "--json=1"))
        self.assertIn("not an option of sweep", self.usage_error("sweep", *ok, "--stride", "2"))
        self.assertIn("not an option of simulate", self.usage_error(*ok, "--query", "1x1x1"))
        self.assertIn("not an option of presets", self.usage_error("presets", "--shape", "4"))
        self.assertIn("show needs --svg", self.usage_error("show", *ok, "--query", "1x2x3"))
        self.assertIn("show needs --query", self.usage_error("show", *ok, "--svg", "x.svg"))
        self.assertIn("--query has 2 values",
                      self.usage_error("show", *ok, "--query", "1x2", "--svg", "x.svg"))
        self.assertIn("need --attention-share", self.usage_error(*ok, "--dense-steps", "3"))
        self.assertIn("expected a number", self.usage_error(*ok, "--attention-share", "lots"))
        self.assertIn("exclude each other",
                      self.usage_error("sweep", "--preset", "nat", "--all", "--block-sparse"))

    def problem_error(self, message, *args):
        r = run(*args)
        self.assertEqual(r.returncode, 1, f"{args}: {r.stdout} {r.stderr}")
        self.assertEqual(r.stderr.strip(), "gna-sim: error: " + message)

    def test_invalid_problems_give_the_core_messages(self):
        self.problem_error("axis 0: window*dilation must be <= extent=10, got window=12 dilation=1",
                           "--shape", "10", "--window", "12", "--q-tile", "4", "--kv-tile", "4")
        self.problem_error("axis 1: stride must be in [1, window=4], got 5", "--shape", "10x10",
                           "--window", "4", "--stride", "1x5", "--q-tile", "4x4",
                           "--kv-tile", "4x4")
        self.problem_error("axis 0: window (kernel_size) must be >= 2, got 1", "sweep",
                           "--shape", "10", "--window", "1", "--q-tile", "4", "--kv-tile", "4")
        self.problem_error("axis 2: dilation must be >= 1, got 0", "--preset", "hunyuan",
                           "--dilation", "1x1x0")
        self.problem_error("axis 0: Q tile must be >= 1, got 0", "--preset", "nat",
                           "--q-tile", "0x8")
        self.problem_error("dynamic KV tiles need multi-dimensional tiling, got tiling=1d",
                           "--preset", "nat", "--tiling", "1d", "--kv-tiling", "dynamic")
        self.problem_error("attention share must be in [0, 1], got 2", "--preset", "nat",
                           "--attention-share", "2")
        self.problem_error("axis 1: query coordinate must be in [0, 56), got 56", "show",
                           "--preset", "nat", "--query", "3x56", "--svg",
                           os.path.join(tempfile.gettempdir(), "never-written.svg"))

    def test_huge_problems_are_refused_quickly(self):
        """Work and memory past the simulator's limits: an error in milliseconds, not minutes of
        work or gigabytes of allocation."""
        svg = os.path.join(tempfile.gettempdir(), "never-written.svg")
        cases = [
            (["--shape", "30000", "--window", "29999", "--q-tile", "1", "--kv-tile", "1"],
             "this simulation would take about"),
            (["--shape", "2147483647", "--window", "3", "--q-tile", "1", "--kv-tile", "1"],
             "this simulation would take about"),
            (["--shape", "300x300", "--window", "299", "--q-tile", "1", "--kv-tile", "1",
              "--tiling", "1d"], "this simulation would take about"),
            (["sweep", "--shape", "1290x1290x1290", "--window", "1290", "--q-tile", "1x1x1",
              "--kv-tile", "1x1x1"], "sweep: window 1290x1290x1290 has 2146689000 strides"),
            (["sweep", "--shape", "4000x4000", "--window", "1000", "--q-tile", "1x1",
              "--kv-tile", "1x1"], "this sweep would take about"),
            (["--shape", "65536x65536", "--window", "3", "--q-tile", "8x8", "--kv-tile", "8x8"],
             "tokens (the product of the extents) must be < 2^31, got extents 65536x65536"),
            (["--shape", "2147483647x2147483647x2147483647", "--window", "3", "--q-tile", "8x8x8",
              "--kv-tile", "8x8x8"], "tokens (the product of the extents) must be < 2^31"),
            (["show", "--shape", "40000x40000", "--window", "3", "--q-tile", "8x8", "--kv-tile",
              "8x8", "--query", "1x1", "--svg", svg], "show: the picture would have"),
            (["show", "--shape", "1000x1000", "--window", "3", "--q-tile", "4096", "--kv-tile",
              "64", "--tiling", "1d", "--query", "1x1", "--svg", svg],
             "show: 1-D tiling would compare about"),
        ]
        for args, message in cases:
            start = time.monotonic()
            r = run(*args)
            self.assertEqual(r.returncode, 1, f"{args}: {r.stdout} {r.stderr}")
            self.assertIn(message, r.stderr, args)
            self.assertLess(time.monotonic() - start, 5.0, args)
        self.assertFalse(os.path.exists(svg))

    def test_help(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage:", r.stdout)


if __name__ == "__main__":
    SIM = os.path.abspath(sys.argv.pop(1))
    result = unittest.main(verbosity=2, exit=False).result
    failed = len(result.failures) + len(result.errors)
    print(f"{result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
