"""gna-bench: gna next to cuDNN / FlashAttention SDPA (dense) and FlexAttention (same mask) on
the use cases of docs/rule.md section 9. Run `gna-bench --help` or `python -m gna.bench --help`."""
