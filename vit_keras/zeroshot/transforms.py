"""How a torch module's tensors become the Keras variables of the text tower and the heads (NumPy only).

Each transform takes the module's `weight` and `bias` (None when it has none) and the number of heads, and returns
`{suffix: array}` below the rule's target.

Example:
    >>> sorted(linear(np.zeros((3, 2)), np.zeros(3), 1).items())[1][1].shape  # kernel: (in, out)
    (2, 3)
"""

from __future__ import annotations


def linear(weight, bias, num_heads):
    """torch `Linear` (out, in) → Keras `Dense` kernel (in, out)."""
    out = {"kernel": weight.T}
    if bias is not None:
        out["bias"] = bias
    return out


def norm(weight, bias, num_heads):
    """torch `LayerNorm` weight/bias → Keras `LayerNormalization` scale/bias."""
    return {"scale": weight, "bias": bias}


def heads_in(weight, bias, num_heads):
    """A q/k/v projection (D, D) → `MultiHeadAttention`'s (D, heads, D/heads) kernel and (heads, D/heads) bias."""
    width = weight.shape[0]
    out = {"kernel": weight.T.reshape(weight.shape[1], num_heads, width // num_heads)}
    if bias is not None:
        out["bias"] = bias.reshape(num_heads, width // num_heads)
    return out


def heads_out(weight, bias, num_heads):
    """The output projection (D, D) → `MultiHeadAttention`'s (heads, D/heads, D) kernel."""
    width = weight.shape[1]
    out = {"kernel": weight.T.reshape(num_heads, width // num_heads, weight.shape[0])}
    if bias is not None:
        out["bias"] = bias
    return out


def table(weight, bias, num_heads):
    """An embedding table or a scalar, stored as is (`logit_scale` may be () or (1,))."""
    return {"": weight.reshape(()) if weight.size == 1 and weight.ndim <= 1 else weight}
