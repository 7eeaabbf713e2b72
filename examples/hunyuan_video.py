"""HunyuanVideo-shaped transformer at 720p x 129 frames (30x48x80 visual tokens + 256 text
tokens after them; hidden 3072, 24 heads of 128, 20 dual-stream + 40 single-stream blocks, 3-D
rotary embedding over (16, 56, 56) channels), random weights, bf16: one full forward timed with
cuDNN dense attention and with gna (neighborhood attention 18x24x24, and stride 16x8x8), and
compared with the simulator's end-to-end prediction for the measured attention share.

    PYTHONPATH=python python examples/hunyuan_video.py --check-depth 1 2 --json hunyuan.json

The full depth is timed block by block (see dit_timing.py); --double-blocks / --single-blocks
set a smaller depth.
"""
import gna
import dit_timing
import mmdit

LAYOUT = (30, 48, 80)
VARIANTS = {"dense": None,
            "gna NA 18x24x24": gna.Window((18, 24, 24)),
            "gna 18x24x24 stride 16x8x8": gna.Window((18, 24, 24), stride=(16, 8, 8))}
# The simulator's tile-wise bound is taken at the Q / KV tiles the Hopper forward chooses for
# each window (gna.kernel_tiles, in dit_timing.summarize).

if __name__ == "__main__":
    args = dit_timing.parser(__doc__.split("\n\n")[0],
                             {"double_blocks": 20, "single_blocks": 40}).parse_args()
    cfg = mmdit.Config(layout=LAYOUT, text_len=256, text_position="after", hidden=args.hidden,
                       heads=args.heads, double_blocks=args.double_blocks,
                       single_blocks=args.single_blocks, in_channels=16 * 4, text_dim=4096,
                       vector_dim=768, rope_axes=(16, 56, 56), rope_theta=256.0)
    dit_timing.main(args, cfg, VARIANTS)
