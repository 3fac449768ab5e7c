"""The building blocks of a Vision Transformer, as serializable Keras 3 layers.

Example:
    >>> from vit_keras import layers
    >>> block = layers.TransformerBlock(num_heads=3, mlp_dim=96)
"""

from vit_keras.layers.checkpoint import CheckpointVariable, checkpoint_variables
from vit_keras.layers.encoder import PatchEncoder, sincos_2d_position_embeddings
from vit_keras.layers.flexible import FlexiblePatchEncoder, TokenMask
from vit_keras.layers.norms import RMSNorm
from vit_keras.layers.patches import ImageSizeCheck, Patches
from vit_keras.layers.pooling import AttentionPoolingHead, MAPHead, TokenPooling
from vit_keras.layers.resnet import BottleneckUnit, ResNetStem, StdConv2D
from vit_keras.layers.rope import RotaryEmbedding2D, apply_rope, rope_tables
from vit_keras.layers.swiglu import SwiGLUBlock
from vit_keras.layers.transformer import LayerScale, MlpBlock, RotaryAttention, TransformerBlock

__all__ = [
    "AttentionPoolingHead",
    "BottleneckUnit",
    "CheckpointVariable",
    "FlexiblePatchEncoder",
    "ImageSizeCheck",
    "LayerScale",
    "MAPHead",
    "MlpBlock",
    "PatchEncoder",
    "Patches",
    "RMSNorm",
    "ResNetStem",
    "RotaryAttention",
    "RotaryEmbedding2D",
    "StdConv2D",
    "SwiGLUBlock",
    "TokenMask",
    "TokenPooling",
    "TransformerBlock",
    "apply_rope",
    "checkpoint_variables",
    "rope_tables",
    "sincos_2d_position_embeddings",
]
