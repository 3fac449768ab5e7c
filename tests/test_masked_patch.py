"""Masked patch prediction: the corruption's proportions, the three targets against hand computations, the loss over
corrupted patches only, a short run that learns, an exact resume, and the encoder's way into fine-tuning."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import vit_keras
from tests.tiny import TINY
from vit_keras import training
from vit_keras.layers.masked_patch import (
    CLEAN,
    KEPT,
    MASKED,
    REPLACED,
    MaskedPatchTargets,
    MaskEmbedding,
    PatchCorruption,
    colour_classes,
    downsized_colour_target,
    mean_colour_target,
    pixel_target,
)
from vit_keras.training.masked_patch import MaskedPatchModel

SAMPLES = 1000
# Bounds: 5 binomial standard errors (the per-image counts are drawn with less spread than independent picks).
SIGMAS = 5


def _encoder(image_size=8, patch_size=2, **kwargs):
    # TINY with smaller patches: the masked-patch tests work on 8-pixel images.
    return vit_keras.ViT(image_size=image_size, include_top=False, **{**TINY, "patch_size": patch_size, **kwargs})


def _roles(num_patches, samples=SAMPLES, seed=0, **rates):
    patches = keras.ops.ones((samples, num_patches, 12))
    _, roles = PatchCorruption(seed=seed, **rates)(patches, training=True)
    return keras.ops.convert_to_numpy(roles)


def test_corruption_proportions_over_many_images():
    roles = _roles(16)  # 16 patches: 8 selected exactly; 6.4 masked, 0.8 replaced, 0.8 kept on average
    selected = roles != CLEAN
    np.testing.assert_array_equal(selected.sum(axis=1), 8)
    total = selected.sum()
    for role, share in ((MASKED, 0.8), (REPLACED, 0.1), (KEPT, 0.1)):
        measured = (roles == role).sum() / total
        bound = SIGMAS * np.sqrt(share * (1 - share) / total)
        assert abs(measured - share) < bound, (role, measured, share, bound)
        # Each image's count is the floor or the ceiling of its share of the 8.
        counts = (roles == role).sum(axis=1)
        assert counts.min() >= np.floor(8 * share) and counts.max() <= np.ceil(8 * share)
    # Every position is as likely to be picked as any other.
    per_position = selected.mean(axis=0)
    assert np.all(np.abs(per_position - 0.5) < SIGMAS * np.sqrt(0.25 / SAMPLES)), per_position


def test_corruption_counts_are_exact_when_the_shares_are_whole():
    roles = _roles(20, samples=200)  # 10 selected: 8 masked, 1 replaced, 1 kept in every image
    for role, count in ((CLEAN, 10), (MASKED, 8), (REPLACED, 1), (KEPT, 1)):
        np.testing.assert_array_equal((roles == role).sum(axis=1), count)
    roles = _roles(20, samples=200, corruption_rate=0.15)  # the paper's other rate: 3 of 20
    np.testing.assert_array_equal((roles != CLEAN).sum(axis=1), 3)


def test_corruption_replaces_masks_and_keeps_as_its_roles_say():
    batch, num = 64, 16
    patches = np.arange(1, batch * num + 1, dtype=np.float32).reshape(batch, num, 1) * np.ones((1, 1, 12), np.float32)
    corrupted, roles = PatchCorruption(seed=3)(patches)
    corrupted, roles = keras.ops.convert_to_numpy(corrupted), keras.ops.convert_to_numpy(roles)
    np.testing.assert_array_equal(corrupted[roles == MASKED], 0.0)
    unchanged = (roles == CLEAN) | (roles == KEPT)
    np.testing.assert_array_equal(corrupted[unchanged], patches[unchanged])
    replaced = roles == REPLACED
    assert replaced.any()
    # Another patch of the batch, never itself.
    assert np.all(corrupted[replaced][:, 0] != patches[replaced][:, 0])
    assert np.all(np.isin(corrupted[replaced][:, 0], patches[..., 0]))


@pytest.mark.slow
def test_corruption_is_seeded_and_compiles_with_xla():
    patches = keras.ops.ones((8, 16, 12))
    layer = PatchCorruption(seed=7)
    first = keras.ops.convert_to_numpy(layer(patches, training=True)[1])
    second = keras.ops.convert_to_numpy(layer(patches, training=True)[1])
    again = keras.ops.convert_to_numpy(PatchCorruption(seed=7)(patches, training=True)[1])
    other = keras.ops.convert_to_numpy(PatchCorruption(seed=8)(patches, training=True)[1])
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, second) and not np.array_equal(first, other)
    # Evaluation corrupts alike every time and leaves the training stream where it was.
    state = keras.ops.convert_to_numpy(layer.seed_generator.state)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(patches)[1]),
                                  keras.ops.convert_to_numpy(layer(patches)[1]))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer.seed_generator.state), state)
    # Under XLA TensorFlow picks another random-number algorithm: other draws, the same rules and seeding.
    def compiled_roles():
        fresh = PatchCorruption(seed=7)
        return keras.ops.convert_to_numpy(tf.function(lambda x: fresh(x, training=True)[1], jit_compile=True)(patches))

    compiled = [compiled_roles(), compiled_roles()]
    np.testing.assert_array_equal(compiled[0], compiled[1])
    np.testing.assert_array_equal((compiled[0] != CLEAN).sum(axis=1), 8)


def test_bad_rates_and_targets_are_refused():
    with pytest.raises(ValueError, match="corruption_rate"):
        PatchCorruption(corruption_rate=1.5)
    with pytest.raises(ValueError, match="exceed 1"):
        PatchCorruption(mask_rate=0.8, random_rate=0.5)
    with pytest.raises(ValueError, match="Unknown masked-patch target"):
        MaskedPatchModel(_encoder(), target="colour")
    with pytest.raises(ValueError, match="target_grid to divide"):
        MaskedPatchModel(_encoder(), target="downsized_colour", target_grid=4)  # patches of 2 pixels
    with pytest.raises(ValueError, match="plain ViT"):
        MaskedPatchModel(vit_keras.ViT(image_size=32, resnet={"num_layers": [1], "width_factor": 1}, include_top=False,
                                       **{**TINY, "num_layers": 1, "patch_size": 1}))


def _image():
    """A 4x4 RGB image in [0, 255]: four 2x2 patches with distinct colours."""
    image = np.zeros((4, 4, 3), np.float32)
    image[0:2, 0:2] = [[[0, 10, 255], [40, 10, 255]], [[0, 10, 255], [40, 10, 255]]]  # means 20, 10, 255
    image[0:2, 2:4] = [[[31, 32, 100], [31, 32, 100]], [[31, 32, 100], [33, 32, 100]]]  # means 31.5, 32, 100
    image[2:4, 0:2] = 255.0
    image[2:4, 2:4] = [[[200, 0, 64], [200, 0, 64]], [[200, 0, 64], [200, 0, 63]]]  # means 200, 0, 63.75
    return image


def test_mean_colour_target_equals_a_hand_computation():
    # Patch means, each channel's 3 most significant bits (floor(mean / 32)), class r*64 + g*8 + b:
    expected = [0 * 64 + 0 * 8 + 7, 0 * 64 + 1 * 8 + 3, 7 * 64 + 7 * 8 + 7, 6 * 64 + 0 * 8 + 1]
    image = _image()[None]
    patches = keras.ops.convert_to_numpy(vit_keras.layers.Patches(2)(image))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(mean_colour_target(patches, 2))[0], expected)
    # The model's float32 target layer gives the same from [0, 255] images and from [-1, 1] images.
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(MaskedPatchTargets("mean_colour", 2)(image))[0],
                                  expected)
    scaled = MaskedPatchTargets("mean_colour", 2, input_scale=1 / 127.5, input_offset=-1.0)(image / 127.5 - 1)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(scaled)[0], expected)
    # Under mixed precision the targets still come from float32 pixels.
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(MaskedPatchTargets("mean_colour", 2)(image))[0],
                                  expected)
    assert int(colour_classes(keras.ops.convert_to_tensor([255.0, 255.0, 255.0]))) == 511


def test_downsized_colour_target_equals_a_hand_computation():
    # One 4x4 patch pooled to 2x2 cells of 2x2 pixels.
    image = np.zeros((1, 4, 4, 3), np.float32)
    image[0, :2, :2] = [255, 0, 0]                  # cell 0: (7, 0, 0) -> 448
    image[0, :2, 2:] = [[[0, 100, 0], [0, 100, 0]], [[0, 60, 0], [0, 60, 0]]]  # cell 1: green 80 -> (0, 2, 0) -> 16
    image[0, 2:, :2] = [64, 64, 64]                  # cell 2: (2, 2, 2) -> 146
    image[0, 2:, 2:] = [[[0, 0, 255], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]]  # cell 3: blue 63.75 -> (0, 0, 1) -> 1
    patches = keras.ops.convert_to_numpy(vit_keras.layers.Patches(4)(image))
    target = keras.ops.convert_to_numpy(downsized_colour_target(patches, patch_size=4, grid=2))
    np.testing.assert_array_equal(target, [[[448, 16, 146, 1]]])
    layer = MaskedPatchTargets("downsized_colour", patch_size=4, target_grid=2)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(image)), [[[448, 16, 146, 1]]])


def test_pixel_target_is_the_patch_in_the_models_range():
    image = _image()[None]
    target = keras.ops.convert_to_numpy(MaskedPatchTargets("pixels", 2)(image))
    # Patch 0 flattened row by row, pixel by pixel, channel last, then mapped from [0, 255] to [-1, 1].
    expected = np.array([0, 10, 255, 40, 10, 255, 0, 10, 255, 40, 10, 255], np.float32) / 127.5 - 1
    np.testing.assert_allclose(target[0, 0], expected, atol=1e-6)
    assert target.shape == (1, 4, 12)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pixel_target(np.float32([[[127.5]]]))), 0.0)


@pytest.mark.parametrize("target", ["mean_colour", "downsized_colour", "pixels"])
def test_loss_counts_only_corrupted_patches(target):
    keras.utils.set_random_seed(0)
    model = MaskedPatchModel(_encoder(image_size=8, patch_size=4), target=target, target_grid=2, seed=1)
    images = np.random.default_rng(0).uniform(0, 255, (6, 8, 8, 3)).astype(np.float32)
    outputs = {k: keras.ops.convert_to_numpy(v) for k, v in model(images).items()}
    loss = float(model.compute_loss(images, None, outputs))
    # The same loss by hand, over the corrupted patches only.
    corrupted = outputs["roles"] != CLEAN
    predictions, targets = outputs["predictions"], outputs["targets"]
    if target == "pixels":
        per_patch = ((predictions - targets) ** 2).mean(-1)
    else:
        shifted = predictions - predictions.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
        per_patch = -np.take_along_axis(log_probs, targets[..., None].astype(int), -1)[..., 0]
        per_patch = per_patch.mean(-1) if target == "downsized_colour" else per_patch
    # The float32 loss against NumPy on the same float32 outputs: means of O(1) terms, rounding ~1e-7 relative.
    np.testing.assert_allclose(loss, per_patch[corrupted].mean(), rtol=1e-5)
    # Anything predicted for a clean patch leaves the loss as it is; a corrupted one's prediction moves it.
    changed = dict(outputs, predictions=np.where(~corrupted.reshape(*corrupted.shape, *[1] * (predictions.ndim - 2)),
                                                 predictions + 5.0, predictions))
    np.testing.assert_allclose(float(model.compute_loss(images, None, changed)), loss, rtol=1e-6)
    changed = dict(outputs, predictions=np.where(corrupted.reshape(*corrupted.shape, *[1] * (predictions.ndim - 2)),
                                                 predictions + np.random.default_rng(1).normal(size=predictions.shape),
                                                 predictions).astype(np.float32))
    assert abs(float(model.compute_loss(images, None, changed)) - loss) > 1e-3


def test_mask_embedding_touches_only_masked_patch_tokens():
    layer = MaskEmbedding()
    tokens = np.zeros((1, 4, 8), np.float32)  # a class token + 3 patches
    roles = np.array([[MASKED, REPLACED, CLEAN]], np.int32)
    out = keras.ops.convert_to_numpy(layer([tokens, roles]))
    np.testing.assert_array_equal(out[0, [0, 2, 3]], 0.0)
    np.testing.assert_allclose(out[0, 1], keras.ops.convert_to_numpy(layer.mask_embedding))


@pytest.mark.slow
def test_model_saves_and_reloads_in_safe_mode_with_its_corruption_stream(tmp_path):
    model = MaskedPatchModel(_encoder(), seed=5)
    images = np.random.default_rng(0).uniform(0, 255, (4, 8, 8, 3)).astype(np.float32)
    model(images)
    path = tmp_path / "masked.keras"
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    # In training the corruption draws from the generator, whose state travelled with the weights.
    first, second = model(images, training=True), reloaded(images, training=True)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(first["roles"]),
                                  keras.ops.convert_to_numpy(second["roles"]))
    # Same weights and corruption, same float32 ops: equal to float32 rounding of O(1) predictions.
    np.testing.assert_allclose(keras.ops.convert_to_numpy(first["predictions"]),
                               keras.ops.convert_to_numpy(second["predictions"]), atol=1e-6)


def _digits(count=256, size=8):
    from vit_keras.datasets.digits import digits_arrays

    images, _ = digits_arrays("train")
    images = tf.image.resize(images[:count].astype(np.float32), (size, size)).numpy().astype(np.uint8)
    return tf.data.Dataset.from_tensor_slices(images)  # images only: no labels needed


def _config(**overrides):
    settings = dict(total_steps=12, steps_per_epoch=6, batch_size=32, learning_rate=3e-3, warmup_steps=2,
                    crop="resize", flip=False, precision="float32", shuffle_buffer=256, log_images=2,
                    deterministic=True, backup_every=2)
    return training.masked_patch(**{**settings, **overrides})


@pytest.mark.slow
def test_short_run_learns_and_a_resume_continues_it_exactly(tmp_path, monkeypatch):
    from vit_keras.training import masked_pretrain

    build = lambda: _encoder(image_size=8, patch_size=2)  # noqa: E731
    whole = training.masked_patch_pretrain(build, _digits(), _config(), output_dir=str(tmp_path / "whole"),
                                           verbose=0)
    assert whole.updates == 12
    assert whole.history["loss"][-1] < whole.history["loss"][0] < np.log(512) + 0.5  # from chance, down
    results = json.loads((tmp_path / "whole" / "results.json").read_text())
    assert results["objective"]["target"] == "mean_colour" and results["updates"] == 12
    logs = os.listdir(tmp_path / "whole" / "logs" / "train")
    assert logs
    tags = set()
    for name in logs:
        for event in tf.compat.v1.train.summary_iterator(str(tmp_path / "whole" / "logs" / "train" / name)):
            tags.update(value.tag for value in event.summary.value)
    assert {"masked_patch_predictions", "batch_loss", "batch_colour_accuracy", "learning_rate"} <= tags

    # Interrupted at the first epoch's end (after the step-6 backup), then the same call again.
    original = masked_pretrain.MaskedPatchFigure.on_epoch_end

    def crash(self, epoch, logs=None):
        raise KeyboardInterrupt("simulated preemption")

    monkeypatch.setattr(masked_pretrain.MaskedPatchFigure, "on_epoch_end", crash)
    with pytest.raises(KeyboardInterrupt):
        training.masked_patch_pretrain(build, _digits(), _config(), output_dir=str(tmp_path / "cut"), verbose=0)
    monkeypatch.setattr(masked_pretrain.MaskedPatchFigure, "on_epoch_end", original)
    state = json.loads((tmp_path / "cut" / "backup" / "backup.json").read_text())
    assert state["step"] == 6
    resumed = training.masked_patch_pretrain(build, _digits(), _config(), output_dir=str(tmp_path / "cut"),
                                             verbose=0)
    assert resumed.updates == 12 and len(resumed.history["loss"]) == 1  # only the second epoch ran again
    # The resumed run replays the same examples and updates in float32; only retracing can reorder sums, so the
    # loss and weights agree to rounding noise over 6 steps (~1e-6), 10x.
    np.testing.assert_allclose(resumed.history["loss"][0], whole.history["loss"][1], rtol=1e-5)
    for a, b in zip(whole.encoder.weights, resumed.encoder.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, err_msg=a.path)


@pytest.mark.slow
def test_pretrained_encoder_fine_tunes_at_another_size_and_feeds_the_few_shot_probe(tmp_path):
    keras.utils.set_random_seed(0)
    model = MaskedPatchModel(_encoder(image_size=8, patch_size=2), seed=0)
    model(np.zeros((1, 8, 8, 3), np.float32))
    kwargs = dict(TINY, patch_size=2)
    classifier = vit_keras.ViT(image_size=12, classes=10, **kwargs)
    report = training.transfer_weights(model.encoder, classifier)
    assert report == {"resampled": True, "head": "zero-init"}
    np.testing.assert_array_equal(classifier.get_layer("Transformer_encoderblock_1").get_weights()[0],
                                  model.encoder.get_layer("Transformer_encoderblock_1").get_weights()[0])
    probe = vit_keras.ViT(image_size=8, include_top=False, pooling="avg", **kwargs)
    training.transfer_weights(model.encoder, probe)
    from vit_keras.datasets.digits import digits_arrays

    images, labels = digits_arrays("train")
    from vit_keras.training import data

    split = data.load(tf.data.Dataset.from_tensor_slices((images[:300], labels[:300])), num_classes=10)
    scores = training.few_shot_probe(probe, split, split, shots=(1, 5))
    assert set(scores) == {"1shot", "5shot"} and all(0.0 <= v <= 1.0 for v in scores.values())


def test_recipe_is_the_papers_scaled_by_arguments():
    config = training.masked_patch()
    assert (config.optimizer, config.learning_rate, config.schedule, config.warmup_steps, config.total_steps,
            config.batch_size, config.weight_decay) == ("adamw", 2e-4, "cosine", 10_000, 1_000_000, 4096, 0.0)
    assert training.masked_patch(total_steps=100_000).warmup_steps == 1_000
    assert training.masked_patch(total_steps=500, warmup_steps=50).warmup_steps == 50


@pytest.mark.slow
def test_cli_pretrain_writes_an_encoder_that_fine_tunes(tmp_path, capsys):
    from vit_keras.cli import SUBCOMMANDS, main

    assert "pretrain" in SUBCOMMANDS
    data_dir, output = str(tmp_path / "tfds"), tmp_path / "run"
    code = main(["pretrain", "--objective", "masked-patch", "--target", "downsized-colour", "--target-grid", "2",
                 "--model", "Ti/16", "--patch-size", "4", "--num-layers", "1", "--image-size", "8",
                 "--dataset", "vit_keras_digits", "--data-dir", data_dir, "--no-augment", "--batch-size", "16",
                 "--steps", "4", "--learning-rate", "1e-3", "--precision", "float32", "--no-xla", "--seed", "1",
                 "--output-dir", str(output)])
    assert code == 0
    out = capsys.readouterr().out
    printed = json.loads(out[out.index('{\n  "updates"'):])  # after Keras' progress lines
    assert printed["updates"] == 4 and np.isfinite(printed["loss"]) and 0.0 <= printed["colour_accuracy"] <= 1.0
    results = json.loads((output / "results.json").read_text())
    assert results["objective"]["target"] == "downsized_colour" and results["config"]["learning_rate"] == 1e-3
    encoder = keras.models.load_model(output / "encoder.keras", safe_mode=True)
    classifier = vit_keras.ViTTi16(image_size=16, patch_size=4, num_layers=1, classes=10)
    assert training.transfer_weights(encoder, classifier)["resampled"] is True
    checkpoint = keras.models.load_model(output / "checkpoints" / "last.keras", safe_mode=True)
    assert isinstance(checkpoint, MaskedPatchModel) and checkpoint.target == "downsized_colour"


def test_cli_pretrain_refuses_a_bad_target_grid(tmp_path, capsys):
    from vit_keras.cli import main

    code = main(["pretrain", "--target", "downsized-colour", "--target-grid", "3", "--model", "Ti/16",
                 "--patch-size", "4", "--num-layers", "1", "--image-size", "8", "--dataset", "vit_keras_digits",
                 "--data-dir", str(tmp_path / "tfds"), "--steps", "2", "--batch-size", "8",
                 "--output-dir", str(tmp_path / "run")])
    assert code == 2
    assert "target_grid to divide" in capsys.readouterr().err


MIRRORED = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import vit_keras
from vit_keras import training
from vit_keras.datasets.digits import digits_arrays
images, _ = digits_arrays("train")
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
config = training.masked_patch(total_steps=4, steps_per_epoch=2, batch_size=16, warmup_steps=1, learning_rate=1e-3,
                               crop="resize", flip=False, precision="float32", shuffle_buffer=128, log_images=2)
build = lambda: vit_keras.ViT(image_size=8, patch_size=2, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96,
                              include_top=False)
result = training.masked_patch_pretrain(build, tf.data.Dataset.from_tensor_slices(images[:128]), config,
                                        output_dir=sys.argv[1], strategy=strategy, verbose=0)
print(json.dumps({"replicas": strategy.num_replicas_in_sync, "updates": result.updates, **result.metrics}))
"""


@pytest.mark.slow
def test_pretrains_under_mirrored_strategy_on_two_replicas(tmp_path):
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    done = subprocess.run([sys.executable, "-c", MIRRORED, str(tmp_path / "run")], env=env, check=True,
                          capture_output=True, text=True, timeout=400)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2 and report["updates"] == 4 and np.isfinite(report["loss"])
    assert (tmp_path / "run" / "encoder.keras").exists()
