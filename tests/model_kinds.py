"""One tiny model of each kind the library builds: the paper's ViT, an R+ViT hybrid and three family models.

Shared by the quantization and data-format tests; every model takes 32x32 RGB images and has 5 classes.
"""

import numpy as np

import vit_keras
from tests.tiny import TINY

IMAGE_SIZE = 32
CLASSES = 5

KINDS = {
    "vit": dict(TINY),
    # ResNet root + one bottleneck stage (as R50+ViT, with one unit), patch 2 on its 8x8 feature map.
    "hybrid_r+vit": {**TINY, "resnet": {"num_layers": [1], "width_factor": 1}, "patch_size": 2},
    "deit_distilled": {**TINY, "distilled": True},
    "siglip_map_head": {**TINY, "classifier": "map", "activation": "gelu_tanh"},
    "dinov2_layerscale_registers": {**TINY, "layer_scale": True, "num_register_tokens": 2, "no_embed_class": True,
                                    "activation": "gelu"},
}


def build(kind: str, **kwargs):
    return vit_keras.ViT(image_size=IMAGE_SIZE, classes=CLASSES, **KINDS[kind], **kwargs)


def images(batch: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 255, (batch, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
