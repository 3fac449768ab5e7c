"""Models whose encoder blocks follow `ViTConfig.qkv_bias` in the tests that load checkpoints without q/k/v biases.

`TransformerBlock(qkv_bias=False)` builds its q/k/v projections without biases; `blocks_without_qkv_bias` makes
the builder give that argument to every block (an explicit `qkv_bias=` passed by the builder still wins, since it
is a call keyword of the same value).
"""

import functools

import vit_keras.models
from vit_keras.layers import TransformerBlock


def blocks_without_qkv_bias(monkeypatch):
    monkeypatch.setattr(vit_keras.models, "TransformerBlock", functools.partial(TransformerBlock, qkv_bias=False))
