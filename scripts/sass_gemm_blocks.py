#!/usr/bin/env python3
"""Summarises the wgmma issue blocks of the Hopper kernels (default: the forward) in `cuobjdump --dump-sass`
output: per kernel, each run of HGMMA instructions (first to last HGMMA, gaps under 60
instructions) with its length and the most frequent other instructions. A KV loop whose
descriptors live in uniform registers shows UIADD3/UMOV between its HGMMAs and no R2UR.

    cuobjdump --dump-sass build/lib/libgna.so | python3 scripts/sass_gemm_blocks.py [KERNEL_REGEX]
"""
import collections
import re
import sys

FUNC = re.compile(r"Function : (\S+)")
INSTR = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)")


def kernels(lines, pattern):
    name, body = None, []
    for line in lines:
        m = FUNC.search(line)
        if m:
            if name and re.search(pattern, name):
                yield name, body
            name, body = m.group(1), []
            continue
        m = INSTR.search(line)
        if m and name:
            body.append(m.group(1))
    if name and re.search(pattern, name):
        yield name, body


def main():
    pattern = sys.argv[1] if len(sys.argv) > 1 else r"hopper.*forward_kernel"
    for name, ops in kernels(sys.stdin, pattern):
        at = [i for i, op in enumerate(ops) if op == "HGMMA"]
        print(f"{name}: {len(ops)} instructions, {len(at)} HGMMA, {ops.count('R2UR')} R2UR")
        if not at:
            continue
        runs = [[at[0]]]
        for i in at[1:]:
            if i - runs[-1][-1] < 60:
                runs[-1].append(i)
            else:
                runs.append([i])
        for r in runs:
            span = ops[r[0]:r[-1] + 1]
            top = collections.Counter(op for op in span if op != "HGMMA").most_common(6)
            print(f"  {len(r)} HGMMA over {len(span)} instructions: " +
                  ", ".join(f"{op} {n}" for op, n in top))


if __name__ == "__main__":
    main()
