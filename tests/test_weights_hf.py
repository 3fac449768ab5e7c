"""Live parity with Hugging Face transformers (torch 2.13.0 CPU): checkpoints written here with save_pretrained.

Every parameter is randomised (so a wrongly mapped weight is visible); torch runs float32 with eager attention.
Tolerance: max |diff| <= 2e-5 * max(1, max |reference|) (float32 noise is ~1e-6 at these sizes).
"""

import json
import os

import keras
import numpy as np
import pytest
import torch  # installed by `make test` (setup.cfg [test]): a broken install must fail, not skip
import transformers

import vit_keras
from tests.torch_compat import randomise_parameters
from vit_keras.weights.assign import model_slots

# Reference: the float32 forward against the source framework's output (float64 NumPy, JAX or PyTorch) on O(1)
# logits. float32 rounding (2^-24 relative per op) accumulated over a few-layer chain of sums of at most a few
# hundred terms, under any summation order (oneDNN ISA, thread count), stays near 1e-6; 2e-5 keeps >= 10x over
# that.
# Scaled by max(1, max |logit|): the error is relative.
TOLERANCE = 2e-5


def test_torch_is_the_pinned_cpu_build():
    """setup.cfg pins torch==2.13.0 (the CPU wheel); another build means the parity below ran on other numerics."""
    assert torch.__version__.startswith("2.13.0"), torch.__version__


def _config(hidden, layers, heads, mlp, image, patch, classes=5, **extra):
    return transformers.ViTConfig(
        hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=mlp,
        image_size=image, patch_size=patch, num_labels=classes, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, attn_implementation="eager", **extra,
    )


def _save(model, directory):
    model.save_pretrained(directory, safe_serialization=True)
    assert os.path.isfile(os.path.join(directory, "model.safetensors"))
    return str(directory)


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, *size, 3)).astype(np.float32)


def _torch_run(model, x, **kwargs):
    with torch.no_grad():
        return model(pixel_values=torch.from_numpy(x.transpose(0, 3, 1, 2)), **kwargs)


def _keras_run(model, x):
    return np.asarray(keras.ops.convert_to_numpy(model(x, training=False)), np.float32)


def _check(out, reference):
    assert out.shape == reference.shape
    assert np.abs(out - reference).max() <= TOLERANCE * max(1.0, np.abs(reference).max())


def _vit_kwargs(config, **extra):
    return dict(patch_size=config.patch_size, hidden_size=config.hidden_size, num_layers=config.num_hidden_layers,
                num_heads=config.num_attention_heads, mlp_dim=config.intermediate_size,
                include_preprocessing=False, classifier_activation=None, **extra)


@pytest.mark.parametrize(
    "hidden,layers,heads,mlp,image,patch,eps",
    [(32, 1, 2, 64, 32, 8, 1e-12), (48, 2, 3, 96, 48, 16, 1e-6)],
)
def test_image_classification_logits(tmp_path, hidden, layers, heads, mlp, image, patch, eps):
    config = _config(hidden, layers, heads, mlp, image, patch, layer_norm_eps=eps)
    reference_model = randomise_parameters(transformers.ViTForImageClassification(config), seed=hidden)
    directory = _save(reference_model, tmp_path / "hf")
    x = _images((image, image))
    reference = _torch_run(reference_model, x).logits.numpy()
    model = vit_keras.ViT(image_size=image, classes=5, weights=directory, **_vit_kwargs(config))
    assert model.get_layer("encoder_norm").epsilon == eps  # from config.json
    assert model.get_layer("Transformer_encoderblock_0").mlp.activation == "gelu"  # hidden_act "gelu" = erf
    _check(_keras_run(model, x), reference)


def test_tanh_gelu_config_is_followed(tmp_path):
    config = _config(32, 1, 2, 64, 32, 8, hidden_act="gelu_pytorch_tanh")
    reference_model = randomise_parameters(transformers.ViTForImageClassification(config), seed=7)
    directory = _save(reference_model, tmp_path / "hf")
    x = _images((32, 32))
    model = vit_keras.ViT(image_size=32, classes=5, weights=directory, **_vit_kwargs(config))
    assert model.get_layer("Transformer_encoderblock_0").mlp.activation == "gelu_tanh"
    _check(_keras_run(model, x), _torch_run(reference_model, x).logits.numpy())


def test_in21k_style_pooler_is_pre_logits(tmp_path):
    """ViTModel's pooler (tanh(Dense(token))) is vit_jax's pre_logits: with include_top=False,
    pooling="token" and representation_size=D the model outputs HF's pooler_output."""
    config = _config(48, 2, 3, 96, 32, 8)
    reference_model = randomise_parameters(transformers.ViTModel(config, add_pooling_layer=True), seed=3)
    directory = _save(reference_model, tmp_path / "hf")
    x = _images((32, 32))
    reference = _torch_run(reference_model, x)
    model = vit_keras.ViT(image_size=32, include_top=False, pooling="token", representation_size=48,
                          weights=directory, **_vit_kwargs(config))
    _check(_keras_run(model, x), reference.pooler_output.numpy())

    # Without a representation layer the same checkpoint gives HF's normalised class token (pre-pooler).
    features = vit_keras.ViT(image_size=32, include_top=False, pooling="token", weights=directory,
                             **_vit_kwargs(config))
    _check(_keras_run(features, x), reference.last_hidden_state[:, 0].numpy())

    # Asking for a classifier on a head-less checkpoint: fresh zero head, said loudly.
    with pytest.warns(UserWarning, match="has no classification head.*zero-initialised"):
        classifier = vit_keras.ViT(image_size=32, classes=4, weights=directory, **_vit_kwargs(config))
    np.testing.assert_array_equal(classifier.get_layer("head").kernel.numpy(), 0.0)


@pytest.mark.parametrize("new_size", [(48, 48), (32, 56)])
def test_bicubic_resolution_change_matches_interpolate_pos_encoding(tmp_path, new_size):
    config = _config(48, 1, 3, 96, 32, 8)
    reference_model = randomise_parameters(transformers.ViTForImageClassification(config), seed=11)
    directory = _save(reference_model, tmp_path / "hf")
    x = _images(new_size, seed=5)
    reference = _torch_run(reference_model, x, interpolate_pos_encoding=True).logits.numpy()
    model = vit_keras.ViT(image_size=new_size, classes=5, weights=None, gelu_approximate=False,
                          layer_norm_epsilon=config.layer_norm_eps, **_vit_kwargs(config))
    vit_keras.load_weights(model, directory, interpolation="bicubic")
    _check(_keras_run(model, x), reference)
    # The default (vit_jax's corner-aligned linear) is a different, also valid, resampling: it must differ.
    vit_keras.load_weights(model, directory)
    assert np.abs(_keras_run(model, x) - reference).max() > 1e-4


def test_pickle_only_directory_is_refused(tmp_path):
    directory = tmp_path / "hf"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 32}))
    (directory / "pytorch_model.bin").write_bytes(b"not loaded")
    with pytest.raises(ValueError, match="pickle.*model.safetensors"):
        vit_keras.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                      weights=str(directory))
    with pytest.raises(ValueError, match="pickle"):
        vit_keras.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
                      weights=str(directory / "pytorch_model.bin"))


def test_model_type_chooses_the_family_row_and_refusals_name_the_key_and_file():
    """One lookup by model_type: no model_type is ViT, an unknown one is refused with the types read, a whole CLIP is
    refused with the tower to save, a key a row refuses or a value no row runs is named with its file."""
    from vit_keras.weights import hf

    sizes = {"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3, "patch_size": 8, "image_size": 32}
    assert hf.family_of(sizes, "d/config.json")[0].model_type == "vit"
    with pytest.raises(ValueError, match=r"'d/config.json' holds a 'beit' model; vit_keras reads Hugging Face"):
        hf.architecture({**sizes, "model_type": "beit"}, "d")
    with pytest.raises(ValueError, match=r"holds a whole clip model .* save its vision tower \(CLIPVisionModel\)"):
        hf.architecture({"model_type": "clip", "vision_config": sizes}, "d")
    with pytest.raises(ValueError, match=r"'d/config.json': use_swiglu_ffn \(a SwiGLU MLP"):
        hf.architecture({**sizes, "model_type": "dinov2", "use_swiglu_ffn": True}, "d")
    with pytest.raises(ValueError, match=r"'d/config.json': 'hidden_act' is 'relu'; .* hidden_act in \['gelu'"):
        hf.architecture({**sizes, "model_type": "siglip_vision_model", "hidden_act": "relu"}, "d")
    with pytest.raises(ValueError, match=r"'d/config.json' has no 'num_hidden_layers'"):
        hf.architecture({"model_type": "vit", "hidden_size": 48}, "d")


def test_bfloat16_weights_and_no_qkv_bias(tmp_path, monkeypatch):
    """A bfloat16 checkpoint (read without torch) and qkv_bias=False; compared with the same bf16 values in
    float32 torch."""
    config = _config(32, 1, 2, 64, 32, 8, qkv_bias=False)
    reference_model = randomise_parameters(transformers.ViTForImageClassification(config), seed=5).to(torch.bfloat16)
    directory = _save(reference_model, tmp_path / "hf")
    with open(os.path.join(directory, "model.safetensors"), "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
    reference_model = reference_model.float()
    x = _images((32, 32))
    # A model with q/k/v biases does not fit: the checkpoint has none, and none is invented.
    with pytest.raises(ValueError, match=r"(?s)query/bias.*build the model with qkv_bias=False"):
        vit_keras.ViT(image_size=32, classes=5, weights=directory, **_vit_kwargs(config))
    model = vit_keras.ViT(image_size=32, classes=5, weights=directory, qkv_bias=False, **_vit_kwargs(config))
    assert not any("query/bias" in name for name in model_slots(model))
    _check(_keras_run(model, x), _torch_run(reference_model, x).logits.numpy())
