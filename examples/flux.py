"""FLUX-shaped transformer at 4K (256x256 visual tokens, 512 text tokens before them; hidden
3072, 24 heads of 128, 19 dual-stream + 38 single-stream blocks, rotary embedding over (56, 56)
channels of the image axes), random weights, bf16: one full forward timed with cuDNN dense
attention and with gna (neighborhood attention 80x80, and stride 16x16), and compared with the
simulator's end-to-end prediction for the measured attention share.

    PYTHONPATH=python python examples/flux.py --check-depth 1 2 --json flux.json

The full depth is timed block by block (see dit_timing.py); --double-blocks / --single-blocks
set a smaller depth.
"""
import gna
import dit_timing
import mmdit

LAYOUT = (256, 256)
VARIANTS = {"dense": None,
            "gna NA 80x80": gna.Window((80, 80)),
            "gna 80x80 stride 16x16": gna.Window((80, 80), stride=(16, 16))}
# The simulator's tile-wise bound is taken at the Q / KV tiles the Hopper forward chooses for
# each window (gna.kernel_tiles, in dit_timing.summarize).

if __name__ == "__main__":
    args = dit_timing.parser(__doc__.split("\n\n")[0],
                             {"double_blocks": 19, "single_blocks": 38}).parse_args()
    cfg = mmdit.Config(layout=LAYOUT, text_len=512, text_position="before", hidden=args.hidden,
                       heads=args.heads, double_blocks=args.double_blocks,
                       single_blocks=args.single_blocks, in_channels=16 * 4, text_dim=4096,
                       vector_dim=768, rope_axes=(16, 56, 56), rope_theta=10000.0)
    dit_timing.main(args, cfg, VARIANTS)
