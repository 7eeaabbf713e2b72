#!/usr/bin/env python3
"""Summarises one kernel's Nsight Compute source page (SASS): warp-stall samples by reason with
the opcodes that collect most of each, executed instructions and stall samples by opcode, and the
instructions with the most samples (with their line index, for --range).

    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > source.csv
    scripts/ncu_source_stalls.py source.csv [--kernel REGEX] [--top 30] [--per N]
                                           [--range NAME=FIRST:END ...]

The report must hold the SourceCounters section. --per N divides executed instructions by N
(e.g. the warp-tiles a loop ran) in the opcode and range tables; --range sums the samples and
instructions of SASS lines FIRST..END-1 (indices as --top prints them) under NAME, to split a
kernel into its parts (a loop's bookkeeping, its copies, its MMAs).
"""
import argparse
import collections
import csv
import io
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"


def number(text):
    text = (text or "").replace(",", "")
    try:
        return float(text)
    except ValueError:
        return 0.0


def kernels(lines):
    """(kernel name, rows) per kernel of the export: a "Kernel Name" line, then a CSV table."""
    name, table = None, []
    for line in lines:
        if line.startswith('"Kernel Name"'):
            if name is not None:
                yield name, list(csv.DictReader(io.StringIO("\n".join(table))))
            name, table = next(csv.reader([line]))[1], []
        elif name is not None:
            table.append(line)
    if name is not None:
        yield name, list(csv.DictReader(io.StringIO("\n".join(table))))


def opcode(source):
    text = re.sub(r"^@!?U?P\w+\s+", "", source.strip())
    return text.split(" ")[0].split(".")[0] if text else "?"


def summarise(name, rows, args):
    reasons = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    total = sum(number(r[SAMPLES]) for r in rows) or 1.0
    per = args.per or 1.0
    print(f"== {name[:150]}")
    print(f"{total:.0f} stall samples, {sum(number(r[EXECUTED]) for r in rows) / per:.1f} "
          f"warp instructions{' per ' + str(args.per) if args.per else ''}")
    by_reason = collections.defaultdict(lambda: collections.defaultdict(float))
    samples = collections.defaultdict(float)
    executed = collections.defaultdict(float)
    for r in rows:
        op = opcode(r["Source"])
        samples[op] += number(r[SAMPLES])
        executed[op] += number(r[EXECUTED])
        for c in reasons:
            by_reason[c][op] += number(r[c])
    print("\nstall reason            share  opcodes collecting most of it")
    for c in sorted(reasons, key=lambda c: -sum(by_reason[c].values()))[:10]:
        share = sum(by_reason[c].values()) / total
        ops = sorted(by_reason[c], key=lambda o: -by_reason[c][o])[:5]
        print(f"{c[6:]:22s} {100 * share:5.1f}%  " +
              ", ".join(f"{o} {100 * by_reason[c][o] / total:.1f}" for o in ops))
    print("\nopcode      instructions   stall share")
    for op in sorted(executed, key=lambda o: -executed[o])[:20]:
        print(f"{op:10s} {executed[op] / per:14.1f} {100 * samples[op] / total:8.2f}%")
    for spec in args.range:
        label, span = spec.split("=")
        first, end = (int(x) for x in span.split(":"))
        part = rows[first:end]
        print(f"range {label}: {100 * sum(number(r[SAMPLES]) for r in part) / total:.1f}% of the "
              f"samples, {sum(number(r[EXECUTED]) for r in part) / per:.1f} warp instructions")
    print(f"\nline  share  executed  instruction  (top {args.top} by samples)")
    top = sorted(range(len(rows)), key=lambda i: -number(rows[i][SAMPLES]))[:args.top]
    for i in sorted(top):
        r = rows[i]
        lead = max(reasons, key=lambda c: number(r[c]))
        print(f"{i:5d} {100 * number(r[SAMPLES]) / total:5.2f}% {number(r[EXECUTED]):12.0f}  "
              f"{r['Source'].strip()[:70]}  ({lead[6:]})")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("csv")
    p.add_argument("--kernel", default="", help="only kernels whose name matches this regex")
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--per", type=float, default=0.0)
    p.add_argument("--range", action="append", default=[])
    args = p.parse_args()
    with open(args.csv, errors="replace") as f:
        lines = f.read().splitlines()
    found = False
    for name, rows in kernels(lines):
        if rows and re.search(args.kernel, name):
            found = True
            summarise(name, rows, args)
    if not found:
        sys.exit(f"{args.csv}: no kernel's source table (is SourceCounters in the report?)")


if __name__ == "__main__":
    main()
