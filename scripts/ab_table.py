#!/usr/bin/env python3
"""Same-run A/B of two builds from gna-kernel-bench JSON files.

Reads ROUND-base.json and ROUND-new.json (gna-kernel-bench --json) from a folder and prints, per
case (case, backend, pass, schedule), each side's median per round, the change of the means and
of the minimums (new against base), and base's own spread between its rounds. A case counts as
slower when both changes exceed the limit (percent) and the change of the means exceeds base's
own spread; the exit status is 1 when any case is slower.

    scripts/ab_table.py FOLDER [--limit 2]
"""
import argparse
import glob
import json
import os
import sys


def read_runs(folder):
    """{side: [{key: ms}, ...]} in round order."""
    runs = {"base": [], "new": []}
    for side in runs:
        paths = glob.glob(os.path.join(folder, f"*-{side}.json"))
        for path in sorted(paths, key=lambda p: int(os.path.basename(p).split("-")[0])):
            with open(path) as f:
                results = json.load(f)["results"]
            runs[side].append({(r["case"], r["backend"], r["pass"], r.get("schedule", "")): r["ms"]
                               for r in results})
    if not runs["base"] or not runs["new"]:
        raise ValueError(f"{folder}: no ROUND-base.json / ROUND-new.json pairs")
    return runs


def compare(runs, limit):
    """Rows (key, base times, new times, change of means %, change of mins %, base spread %,
    slower) for the cases both sides ran in every round."""
    keys = [k for k in runs["base"][0] if all(k in r for side in runs.values() for r in side)]
    rows = []
    for key in keys:
        base = [r[key] for r in runs["base"]]
        new = [r[key] for r in runs["new"]]
        mean_b, mean_n = sum(base) / len(base), sum(new) / len(new)
        d_mean = 100.0 * (mean_n / mean_b - 1.0)
        d_min = 100.0 * (min(new) / min(base) - 1.0)
        spread = 100.0 * (max(base) / min(base) - 1.0)
        slower = d_mean > limit and d_min > limit and d_mean > spread
        rows.append((key, base, new, d_mean, d_min, spread, slower))
    return rows


def markdown(rows, limit):
    out = [f"| case | backend | pass | schedule | base ms | new ms | mean | min | base spread | > {limit}% |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for (case, backend, pass_, schedule), base, new, d_mean, d_min, spread, slower in rows:
        times = lambda xs: ", ".join(f"{x:.4g}" for x in xs)  # noqa: E731
        out.append(f"| {case} | {backend} | {pass_} | {schedule} | {times(base)} | {times(new)} | "
                   f"{d_mean:+.1f}% | {d_min:+.1f}% | {spread:.1f}% | {'slower' if slower else ''} |")
    return "\n".join(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("--limit", type=float, default=2.0, help="percent (default 2)")
    args = p.parse_args(argv)
    try:
        rows = compare(read_runs(args.folder), args.limit)
    except (OSError, ValueError, KeyError) as e:
        print(f"ab_table: {e}", file=sys.stderr)
        return 2
    print(markdown(rows, args.limit))
    slower = [r for r in rows if r[-1]]
    print(f"\n{len(rows)} cases, {len(slower)} slower than {args.limit}% beyond base's spread")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
