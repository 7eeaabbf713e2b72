"""Random gna-sim argument lists: every run must end by itself within a time limit with exit
status 0, 1 (an error, "gna-sim: error: ...") or 2 (a usage error), never by a signal or a hang.

Usage: fuzz_cli.py PATH/TO/gna-sim. Runs for GNA_FUZZ_SECONDS (default 8) from seed
GNA_FUZZ_SEED (default: fresh, printed); prints the number of runs, distinct cases (command,
flags given, exit status) and distinct messages, and appends that line to the file
GNA_FUZZ_REPORT when it is set."""

import os
import random
import re
import subprocess
import sys
import tempfile
import time

RUN_SECONDS = 10  # a run still going after this is a hang

COMMANDS = ["", "simulate", "sweep", "presets", "show", "help", "frobnicate", "--json"]
FLAGS = ["--preset", "--shape", "--window", "--stride", "--dilation", "--causal", "--q-tile",
         "--kv-tile", "--tiling", "--kv-tiling", "--svg", "--query", "--attention-share",
         "--dense-steps", "--total-steps", "--json", "--union", "--all", "--block-sparse",
         "--help", "-h", "--bogus", "-x", "--", "--shape=", "--json=1", "--kernel",
         "--head-dim"]
NUMBERS = ["0", "1", "2", "3", "4", "7", "8", "16", "-1", "-2147483648", "2147483647",
           "2147483648", "4294967296", "99999999999999999999", "1e3", "0x10", "+3", "", " 4",
           "abc", "nan", "inf", "-0"]
WORDS = ["hunyuan", "flux4k", "nat", "nope", "multi", "1d", "static", "dynamic", "2d", "",
         "0.5", "1", "-0.1", "1e309", "nan", "lots", "hopper-forward", "hopper-backward",
         "hopper forward"]


def random_value(rng, rank=None):
    """A per-axis list (AxBxC, mostly `rank` values) of plausible or hostile numbers, or a
    word."""
    roll = rng.random()
    if roll < 0.15:
        return rng.choice(WORDS)
    if roll < 0.2:
        return "x".join(["1"] * rng.randint(4, 40))  # too many axes
    if roll < 0.25:
        return rng.choice(["x", "1x", "x1", "1xx1", "1x 2", "\u00b3", "1" * 300])
    n = rank if rank and rng.random() < 0.8 else rng.choice([1, 1, 2, 3, 3])
    if rng.random() < 0.6:  # mostly sizes that can be simulated
        return "x".join(str(rng.randint(1, 64 if n > 1 else 512)) for _ in range(n))
    return "x".join(rng.choice(NUMBERS) for _ in range(n))


def random_flag_value(rng, flag, svg, rank):
    if flag == "--svg":
        return rng.choice([svg, svg, "", "/nonexistent-dir/x.svg"])
    if flag in ("--preset", "--tiling", "--kv-tiling", "--attention-share", "--kernel"):
        return rng.choice(WORDS + NUMBERS)
    return random_value(rng, rank)


SWITCHES = ("--json", "--union", "--all", "--block-sparse", "--help", "-h", "--", "--json=1",
            "--shape=", "-x")


def random_arguments(rng, svg):
    """Mostly a valid problem (so that runs get past the parser) with up to three flags added,
    changed or dropped; otherwise random flags."""
    command = rng.choice(COMMANDS[:5] * 3 + COMMANDS)
    flags = {}
    rank = rng.randint(1, 3)
    if rng.random() < 0.7:
        dims = lambda lo, hi: "x".join(str(rng.randint(lo, hi)) for _ in range(rank))
        flags = {"--shape": dims(8, 48), "--window": dims(2, 6), "--q-tile": dims(1, 8),
                 "--kv-tile": dims(1, 8)}
        if command == "show":
            flags.update({"--query": dims(0, 7), "--svg": svg})
        if rng.random() < 0.2:  # the kernel's tiles instead of given ones
            del flags["--q-tile"], flags["--kv-tile"]
            flags["--kernel"] = rng.choice(["hopper-forward", "hopper-backward"])
            if rng.random() < 0.5:
                flags["--head-dim"] = rng.choice(["32", "64", "128", "256", "96", "0", "-1"])
    for _ in range(rng.randint(0 if flags else 1, 3)):
        flag = rng.choice(FLAGS)
        if flags and rng.random() < 0.2:
            flags.pop(rng.choice(sorted(flags)))
        elif flag in SWITCHES or rng.random() < 0.03:
            flags[flag] = None  # a switch, or a value flag left without its value
        else:
            flags[flag] = random_flag_value(rng, flag, svg, rank)
    args = [command] if command else []
    items = list(flags.items())
    rng.shuffle(items)
    for flag, value in items:
        args += [flag] if value is None else [flag, value]
    if rng.random() < 0.05 and items:  # a flag given twice
        args += [items[0][0]] + ([] if items[0][1] is None else [items[0][1]])
    return args


def message_kind(text):
    """First line of stderr with numbers and quoted text blanked."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return re.sub(r"'[^']*'", "'*'", re.sub(r"\d+", "#", line))


def main(sim):
    seed = int(os.environ.get("GNA_FUZZ_SEED") or random.SystemRandom().randrange(2**32))
    seconds = float(os.environ.get("GNA_FUZZ_SECONDS", "8"))
    rng = random.Random(seed)
    cases, messages, statuses, failures = set(), set(), {}, []
    runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        svg = os.path.join(tmp, "fuzz.svg")
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            args = random_arguments(rng, svg)
            runs += 1
            try:
                r = subprocess.run([sim, *args], capture_output=True, text=True, errors="replace",
                                   timeout=RUN_SECONDS, cwd=tmp)
            except subprocess.TimeoutExpired:
                failures.append(f"hang: gna-sim {' '.join(map(repr, args))}")
                continue
            if r.returncode not in (0, 1, 2):
                failures.append(f"exit {r.returncode}: gna-sim {' '.join(map(repr, args))}\n"
                                f"{r.stderr[-400:]}")
                continue
            if r.returncode != 0 and not r.stderr.startswith("gna-sim: "):
                failures.append(f"exit {r.returncode} without a message: gna-sim "
                                f"{' '.join(map(repr, args))}")
                continue
            statuses[r.returncode] = statuses.get(r.returncode, 0) + 1
            given = sorted({a.split("=")[0] for a in args if a.startswith("-")})
            command = args[0] if args and not args[0].startswith("-") else ""
            cases.add((command, tuple(given), r.returncode))
            if r.returncode:
                messages.add(message_kind(r.stderr))
            if len(failures) >= 10:
                break
    summary = (f"gna-sim fuzz: {runs} runs (seed {seed}): {len(cases)} distinct cases "
               f"(command, flags, exit status), {len(messages)} distinct messages; exit 0 "
               f"{statuses.get(0, 0)}, 1 {statuses.get(1, 0)}, 2 {statuses.get(2, 0)}; "
               f"crashes or hangs {len(failures)}")
    print(summary)
    report = os.environ.get("GNA_FUZZ_REPORT")
    if report:
        with open(report, "a") as f:
            f.write(summary + "\n")
    for f in failures:
        print("FAILED:", f)
    if failures or runs < 20:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1])))
