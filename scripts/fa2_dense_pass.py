#!/usr/bin/env python3
"""One dense forward and backward of FlashAttention-2 (torch SDPA's flash backend) on a token
layout, with heads-last memory viewed as [B, H, N, D] as gna.bench's dense peers read it: the
launches to profile beside gna's kernels, e.g.

    ncu -k "regex:flash_fwd_kernel|flash_bwd_dq_dk_dv" -c 2 --section ... \
        python3 scripts/fa2_dense_pass.py --layout 30x48x80 --heads 4

Needs torch with CUDA.
"""
import argparse
import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layout", default="30x48x80", help="token layout, e.g. 30x48x80")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dim", type=int, default=128)
    args = p.parse_args()
    tokens = math.prod(int(x) for x in args.layout.split("x"))
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, tokens, args.heads, args.dim, device="cuda", dtype=torch.bfloat16)
               .transpose(1, 2).requires_grad_() for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = F.scaled_dot_product_attention(q, k, v)
        o.backward(torch.randn_like(o))
    torch.cuda.synchronize()
    print(f"FA2 dense forward and backward: {tokens} tokens, {args.heads} heads, d {args.dim}")


if __name__ == "__main__":
    main()
