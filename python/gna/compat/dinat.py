"""Hugging Face DiNAT (and NAT) on gna's fused kernel.

With gna.compat.natten_shim installed, transformers' DiNAT runs NATTEN's unfused operators on
gna (PN, softmax, NN: the weights [B, heads, H, W, 49] go through memory, as in NATTEN before
0.20). gna's fused kernel (gna.na2d) computes softmax(q.k / sqrt(D)) v without writing them,
but it has no relative positional bias; so it runs the same model only where the bias is zero:

    import gna.compat.dinat
    gna.compat.dinat.use_fused_attention(model)                 # every rpb must be zero
    gna.compat.dinat.use_fused_attention(model, drop_rpb=True)  # zeroes the biases: the model
                                                                # without them
Either way the biases are frozen (requires_grad False): training through the fused kernel trains
the model without relative positional bias.

Layers keep their parameters and the unfused path where the fused kernel cannot stand in: when
attention weights are asked for (output_attentions=True) and when attention dropout is active
(training with attention_probs_dropout_prob > 0).
"""
import types

import torch

__all__ = ["use_fused_attention", "attention_layers"]


def attention_layers(model):
    """The DiNAT / NAT neighborhood attention layers of a transformers model."""
    needed = ("rpb", "query", "key", "value", "kernel_size", "num_attention_heads",
              "attention_head_size", "dropout")
    return [m for m in model.modules()
            if type(m).__name__ == "NeighborhoodAttention" and all(hasattr(m, a) for a in needed)]


def _fused_forward(self, hidden_states, output_attentions=False):
    if output_attentions or (self.training and self.dropout.p > 0):
        return type(self).forward(self, hidden_states, output_attentions)
    import gna

    batch, *spatial, _ = hidden_states.shape
    shape = (batch, *spatial, self.num_attention_heads, self.attention_head_size)
    query = self.query(hidden_states).view(shape)
    key = self.key(hidden_states).view(shape)
    value = self.value(hidden_states).view(shape)
    attend = (gna.na1d, gna.na2d, gna.na3d)[len(spatial) - 1]
    out = attend(query, key, value, self.kernel_size, dilation=getattr(self, "dilation", None) or 1)
    return (out.reshape(batch, *spatial, -1),)


def use_fused_attention(model, drop_rpb=False):
    """Runs the model's neighborhood attention layers with gna's fused kernel (heads-last
    tensors straight from the q / k / v projections, scale 1/sqrt(D)). Raises ValueError when a
    layer's relative positional bias is not zero, unless drop_rpb=True, which sets the biases
    to zero (a different model). The biases are frozen either way. Returns the number of
    layers."""
    layers = attention_layers(model)
    if not layers:
        raise ValueError(f"model: no DiNAT / NAT NeighborhoodAttention layer in "
                         f"{type(model).__name__}")
    if not isinstance(drop_rpb, bool):
        raise ValueError(f"drop_rpb must be a bool, got {drop_rpb!r}")
    if not drop_rpb:
        for i, layer in enumerate(layers):
            peak = layer.rpb.detach().abs().max().item()
            if peak > 0:
                raise ValueError(f"drop_rpb=False: attention layer {i} has a relative positional "
                                 f"bias (max |rpb| = {peak:.3g}), which the fused kernel does not "
                                 f"add; pass drop_rpb=True to run the model without its biases")
    for layer in layers:
        if drop_rpb:
            with torch.no_grad():
                layer.rpb.zero_()
        layer.rpb.requires_grad_(False)
        layer.forward = types.MethodType(_fused_forward, layer)
    return len(layers)
