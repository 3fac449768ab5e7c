"""Every paper variant at 224 with a 1000-class head has exactly the paper's parameter count (REFERENCE.md §2)."""

import gc

import keras
import pytest

import vit_keras
from vit_keras.configs import VARIANTS, ResNetConfig

# vit_jax `models_test.py` counts, at 224 with a 1000-class head.
PAPER_PARAMS = {
    "ViTTi16": 5_717_416,
    "ViTS16": 22_050_664,
    "ViTS32": 22_878_952,
    "ViTB8": 86_576_872,
    "ViTB16": 86_567_656,
    "ViTB32": 88_224_232,
    "ViTL16": 304_326_632,
    "ViTL32": 306_535_400,
    "ViTH14": 632_045_800,
    "ViTRTi16": 6_337_704,
    "ViTR26S32": 36_431_912,
    "ViTR50B16": 98_659_112,
    "ViTR26B32": 101_383_976,
    "ViTR50L32": 328_994_856,
}
GAP_PARAMS = {"ViTS16": 22_049_896, "ViTB16": 86_566_120, "ViTS32": 22_878_184, "ViTB32": 88_222_696}


def _count(constructor_name, **kwargs):
    keras.backend.clear_session()
    model = getattr(vit_keras, constructor_name)(image_size=224, classes=1000, **kwargs)
    count = model.count_params()
    del model
    keras.backend.clear_session()
    gc.collect()
    return count


# Slow: each builds a paper-size model at 224 with its weights initialised, 3 to 16 s on 2 cores.
@pytest.mark.slow
@pytest.mark.parametrize("constructor_name", sorted(PAPER_PARAMS))
def test_parameter_count_matches_the_paper(constructor_name):
    assert _count(constructor_name) == PAPER_PARAMS[constructor_name]


@pytest.mark.slow
@pytest.mark.parametrize("constructor_name", sorted(GAP_PARAMS))
def test_gap_parameter_count_matches_the_paper(constructor_name):
    assert _count(constructor_name, classifier="gap") == GAP_PARAMS[constructor_name]


def test_closed_form_parameter_count():
    # REFERENCE.md §2: P²·3·D + D + D + (N+1)·D + L·(4D² + 4D + 2·D·M + M + D + 4D) + 2D + D·K + K
    config = VARIANTS["B/16"]
    p, d, m, layers, k, n = config.patch_size, config.hidden_size, config.mlp_dim, config.num_layers, 1000, 196
    closed_form = p * p * 3 * d + d + d + (n + 1) * d + layers * (4 * d * d + 4 * d + 2 * d * m + m + d + 4 * d)
    closed_form += 2 * d + d * k + k
    assert closed_form == PAPER_PARAMS["ViTB16"]


def test_every_variant_has_a_constructor():
    names = {"ViT" + name.replace("+", "").replace("/", "") for name in VARIANTS}
    assert names == set(PAPER_PARAMS)
    assert all(callable(getattr(vit_keras, name)) for name in names)


def test_resnet_config_from_dict_and_errors():
    assert ResNetConfig.from_any({"num_layers": [3, 4, 9]}) == ResNetConfig((3, 4, 9), 1)
    with pytest.raises(ValueError, match="unknown keys"):
        ResNetConfig.from_any({"layers": [3]})
    with pytest.raises(ValueError, match="num_layers"):
        ResNetConfig.from_any({"num_layers": [0]})
    with pytest.raises(ValueError, match="resnet"):
        ResNetConfig.from_any([3, 4, 9])


def test_the_parts_configs_are_made_once_with_the_config_and_taken_whole_by_every_layer():
    from tests.tiny import TINY
    from vit_keras.configs import ViTConfig
    from vit_keras.vision_transformer import config_of
    from vit_keras.zeroshot import TextConfig, text_model

    model = vit_keras.ViT(image_size=32, global_pool="map", class_token=False, include_top=False, pooling="map",
                          **TINY)
    config = config_of(model)
    assert config.block is config.block and config.patch is config.patch
    assert config.pooling_head is config.pooling_head
    assert model.get_layer("Transformer_encoderblock_0").block is config.block
    assert model.get_layer("patch_encoder").patch is config.patch
    assert model.get_layer("MAPHead_0").head is config.pooling_head
    # The flat fields are the config's as given, not written back by a part.
    assert ViTConfig(num_register_tokens=2, no_embed_class=True).patch.num_register_tokens == 2
    text = TextConfig(vocab_size=20, context_length=5, hidden_size=8, num_layers=1, num_heads=2, mlp_dim=16,
                      activation="quick_gelu")
    assert text_model(text).get_layer("text_block_0").block is text.block
