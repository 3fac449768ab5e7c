"""SigLIP 2 NaFlex (native aspect ratio): `naflex_size` against transformers' processor, the reference fixtures
(tests/fixtures/family2/README.md) through the fixed-size and the flexible model, and parity with transformers'
`Siglip2VisionModel` on a padded batch of images of different sizes.

Tolerance (the fixtures' README): max |diff| <= 5e-5 * max(1, max |reference|), and the same argmax.
"""

import json
import os

import keras
import numpy as np
import pytest
import torch
import transformers
from transformers.models.siglip2.image_processing_pil_siglip2 import get_image_size_for_max_num_patches

import vit_keras
from tests.bounds import Bound
from tests.family2_cases import FAMILY2, TOLERANCE, check, fixture_input, run
from tests.torch_compat import randomise_parameters
from vit_keras.images import naflex_patches, patchify
from vit_keras.layers.flexible import check_flexible_inputs
from vit_keras.preprocessing import naflex_size

CASES = ("hf_siglip2_naflex", "timm_naflex_siglip2")
# TOLERANCE: tests/family2_cases.py (the fixtures' README); measured mistakes (the grid resized without antialias)
# move these outputs by >= 1.5e-2.
# One image alone against the same image in a padded batch: the same float32 sums but for the masked keys, whose
# weights are exactly zero; what differs is the matmul blocking of another sequence length, a few float32 ulps of
# O(1) values: measured 6e-8 .. 7.6e-7 relative over the 7 `make test-numerics` settings of a 2-CPU AVX2 EPYC (oneDNN
# at AVX2 / AVX / SSE4.1 or off, TFLite with and without XNNPACK, 1 and 2 threads), so 1e-5 keeps >= 13x over it.
ALONE_TOLERANCE = 1e-5


def _reference(record_property):
    """The fixtures' comparison (`check`: the bound and the same argmax), its measured difference recorded."""
    bound = Bound(TOLERANCE, "relative_diff_reference", record_property)

    def compare(out, expected, what=""):
        check(out, expected)
        return bound(out, expected, what)
    return compare


def _alone(record_property):
    return Bound(ALONE_TOLERANCE, "relative_diff_alone", record_property)



def _case(case):
    directory = os.path.join(FAMILY2, case)
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    return (os.path.join(directory, meta["checkpoint"]), meta, fixture_input(case, meta),
            np.load(os.path.join(directory, "expected.npy")))


# ---- naflex_size


SHAPES = [(1, 1), (7, 300), (300, 7), (24, 40), (100, 700), (700, 100), (480, 640), (640, 480), (333, 333),
          (1080, 1920), (4000, 3000), (20000, 50), (50, 20000), (16, 16), (17, 15)]


@pytest.mark.parametrize("patch_size,budget", [(16, 256), (16, 1024), (14, 729), (8, 16), (16, 1), (32, 3)])
def test_naflex_size_equals_transformers(patch_size, budget):
    for height, width in SHAPES:
        expected = get_image_size_for_max_num_patches(height, width, patch_size, budget)
        assert naflex_size(height, width, patch_size, budget) == tuple(expected), (height, width)
        rows, cols = expected[0] // patch_size, expected[1] // patch_size
        assert rows * cols <= max(budget, 1)


@pytest.mark.parametrize("patch_size,budget", [(8, 16), (16, 16), (16, 256), (14, 729)])
def test_naflex_size_equals_transformers_unless_that_exceeds_the_budget(patch_size, budget):
    """At extreme aspect ratios transformers' search can end above the budget; naflex_size keeps searching there."""
    exceeded = 0
    for height, width in [(1, 10 ** 9), (10 ** 9, 1), (1, 1), (3, 10 ** 12), (10 ** 7, 10 ** 3), (1, 50_000_000)]:
        expected = tuple(get_image_size_for_max_num_patches(height, width, patch_size, budget))
        got = naflex_size(height, width, patch_size, budget)
        if (expected[0] // patch_size) * (expected[1] // patch_size) <= budget:
            assert got == expected, (height, width)
        else:
            exceeded += 1
            assert (got[0] // patch_size) * (got[1] // patch_size) <= budget, (height, width)
    assert exceeded  # the shapes reach the case this is about


@pytest.mark.parametrize("args,match", [((0, 40, 16, 256), "`height` must be a positive integer, got 0"),
                                        ((24, -1, 16, 256), "`width` must be a positive integer"),
                                        ((24, 40, 0, 256), "`patch_size`"),
                                        ((24, 40, 16, 0), "`max_num_patches` must be a positive integer, got 0"),
                                        ((24.5, 40, 16, 256), "`height`"), ((True, 40, 16, 256), "`height`")])
def test_naflex_size_refuses_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        naflex_size(*args)


def test_patchify_order_and_refusals():
    image = np.arange(16 * 24 * 3, dtype=np.float32).reshape(16, 24, 3)
    patches, grid = patchify(image, 8)
    assert grid == (2, 3)
    # Patch (row 1, col 2), flattened (row, column, channel): transformers' convert_image_to_patches.
    np.testing.assert_array_equal(patches[1 * 3 + 2], image[8:16, 16:24].reshape(-1))
    with pytest.raises(ValueError, match=r"image is 4x40, smaller than one 8x8 patch"):
        patchify(np.zeros((4, 40, 3)), 8)
    with pytest.raises(ValueError, match=r"20x40, not a multiple of the patch size 8"):
        patchify(np.zeros((20, 40, 3)), 8)


# ---- the reference fixtures


@pytest.mark.numerics
@pytest.mark.parametrize("case", CASES)
def test_fixture_through_from_pretrained_and_keras_round_trip(case, tmp_path, record_property):
    checkpoint, meta, x, expected = _case(case)
    model = vit_keras.from_pretrained(checkpoint, **meta["call"])
    out = run(model, x)
    _reference(record_property)(out, expected)
    path = str(tmp_path / "model.keras")
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(run(reloaded, x), out)


@pytest.mark.numerics
@pytest.mark.parametrize("case", CASES)
def test_fixture_through_the_flexible_model(case, tmp_path, record_property):
    """The same images as patches (every patch real), then padded beside an image of another shape."""
    reference, alone = _reference(record_property), _alone(record_property)
    checkpoint, meta, x, expected = _case(case)
    call = {k: v for k, v in meta["call"].items() if k != "image_size"}
    model = vit_keras.from_pretrained(checkpoint, flexible=True, **call)
    batch = naflex_patches(list(x), 8, 15, resize=False)
    assert batch["mask"].all() and batch["grid"].tolist() == [[3, 5], [3, 5]]
    out = run(model, batch)
    reference(out, expected)
    other = np.random.default_rng(0).uniform(0, 255 if call.get("include_preprocessing", True) else 1, (40, 16, 3))
    padded = naflex_patches([x[0], other, x[1]], 8, 21, resize=False)
    assert padded["mask"].sum(1).tolist() == [15, 10, 15]
    out_padded = run(model, padded)
    reference(out_padded[[0, 2]], expected)
    alone(out_padded[[0, 2]], out)
    path = str(tmp_path / "flexible.keras")
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    np.testing.assert_array_equal(run(reloaded, padded), out_padded)
    assert vit_keras.weights.model_config(reloaded) == vit_keras.weights.model_config(model)


# ---- parity with transformers' Siglip2VisionModel on a padded batch of three shapes


def _siglip2(tmp_path):
    config = transformers.Siglip2VisionConfig(hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                                              intermediate_size=96, patch_size=8, num_patches=16)
    reference = randomise_parameters(transformers.Siglip2VisionModel(config), seed=7).eval()
    reference.save_pretrained(str(tmp_path / "siglip2"), safe_serialization=True)
    return reference, str(tmp_path / "siglip2")


@pytest.mark.numerics
def test_siglip2_parity_on_a_padded_batch_of_three_shapes(tmp_path, record_property):
    same_as_reference, same_as_alone = _reference(record_property), _alone(record_property)
    reference, directory = _siglip2(tmp_path)
    rng = np.random.default_rng(11)
    # Wide (3x5 patches), tall (6x2: rows above the stored 4), small (1x2); padded to the longest, 16.
    images = [rng.uniform(-1, 1, shape).astype(np.float32) for shape in ((24, 40, 3), (48, 16, 3), (8, 16, 3))]
    batch = naflex_patches(images, 8, 16, resize=False)
    with torch.no_grad():
        out = reference(pixel_values=torch.from_numpy(batch["patches"]),
                        pixel_attention_mask=torch.from_numpy(batch["mask"]),
                        spatial_shapes=torch.from_numpy(batch["grid"].astype(np.int64)))
    pooled = vit_keras.from_pretrained(directory, flexible=True, include_top=False, pooling="map",
                                       include_preprocessing=False)
    result = run(pooled, batch)
    same_as_reference(result, out.pooler_output.numpy(), "pooled")
    tokens = vit_keras.from_pretrained(directory, flexible=True, include_top=False, include_preprocessing=False)
    sequence = run(tokens, batch)
    for index, valid in enumerate(batch["mask"].astype(bool)):
        same_as_reference(sequence[index, valid], out.last_hidden_state.numpy()[index, valid], f"tokens {index}")
    for index, image in enumerate(images):
        alone = run(pooled, naflex_patches([image], 8, int(batch["mask"][index].sum()), resize=False))
        same_as_alone(result[index], alone[0], f"image {index}")


def test_padding_values_do_not_reach_real_tokens(tmp_path):
    _, directory = _siglip2(tmp_path)
    model = vit_keras.from_pretrained(directory, flexible=True, include_top=False, pooling="map",
                                      include_preprocessing=False)
    batch = naflex_patches([np.ones((16, 24, 3), np.float32)], 8, 10, resize=False)
    noisy = {**batch, "patches": batch["patches"].copy()}
    noisy["patches"][0, 6:] = np.nan
    np.testing.assert_array_equal(run(model, noisy), run(model, batch))


# ---- other ViTs in the flexible form


TINY = dict(patch_size=8, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=96)


@pytest.mark.numerics
@pytest.mark.parametrize("pool,interpolation", [("token", "bicubic"), ("avg", "linear"), ("map", "bicubic_antialias")])
def test_flexible_model_equals_the_any_size_image_model(pool, interpolation, record_property):
    """A flexible model and a model of any image size, same weights: equal on each image (the position grid resized
    with the same interpolation), and each image of a padded batch equal to the image alone."""
    arch = dict(TINY, global_pool=pool, class_token=pool == "token", num_register_tokens=1 if pool == "token" else 0,
                pos_grid=(4, 4), pos_interpolation=interpolation, include_preprocessing=False, classes=6,
                classifier_activation=None)
    image_model = vit_keras.ViT(image_size=None, **arch)
    rng = np.random.default_rng(2)
    for weight in image_model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype(np.float32))
    flexible = vit_keras.ViT(flexible=True, **arch)
    flexible.set_weights(image_model.get_weights())
    images = [rng.uniform(-1, 1, shape).astype(np.float32) for shape in ((24, 40, 3), (40, 16, 3), (32, 32, 3))]
    batch = naflex_patches(images, 8, 20, resize=False)
    out = run(flexible, batch)
    alone = _alone(record_property)
    for index, image in enumerate(images):
        alone(out[index], run(image_model, image[None])[0], f"image {index}")


def test_flexible_inputs_are_checked():
    model = vit_keras.ViT(flexible=True, **TINY, classes=3, include_preprocessing=False)
    batch = naflex_patches([np.zeros((16, 24, 3), np.float32)], 8, 8, resize=False)
    with pytest.raises(ValueError, match=r"image 0: `grid` \(3, 3\) is 9 patches, more than the sequence length N=8"):
        model({**batch, "grid": np.array([[3, 3]], np.int32)})
    with pytest.raises(ValueError, match=r"image 0: `grid` \(2, 3\) says 6 real patches, but its `mask` marks 7"):
        model({**batch, "mask": (np.arange(8) < 7).astype(np.int32)[None]})
    with pytest.raises(ValueError, match=r"have 48 values per patch but the model takes 192"):
        check_flexible_inputs(np.zeros((1, 8, 48)), batch["grid"], batch["mask"], features=192)
    with pytest.raises(ValueError, match=r"image 1 is 2x2 = 4 patches, more than max_num_patches 3"):
        naflex_patches([np.zeros((8, 8, 3)), np.zeros((16, 16, 3))], 8, 3, resize=False)
    with pytest.raises(ValueError, match="not images of one size"):
        vit_keras.ViT(image_size=32, flexible=True, **TINY)


@pytest.mark.tf_only
def test_flexible_inputs_are_checked_inside_a_graph():
    """Inside a graph (a tf.function, a SavedModel) the same checks run as graph assertions."""
    import tensorflow as tf

    model = vit_keras.ViT(flexible=True, **TINY, classes=3, include_preprocessing=False)
    batch = naflex_patches([np.zeros((16, 24, 3), np.float32)], 8, 8, resize=False)
    in_graph = tf.function(lambda batch: model(batch))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"`mask` does not mark the rows·cols real patches"):
        in_graph({**batch, "mask": (np.arange(8) < 7).astype(np.int32)[None]})
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"more patches than the sequence length N"):
        in_graph({**batch, "grid": np.array([[3, 3]], np.int32)})


# ---- the tf.data pipeline


@pytest.mark.tf_only
def test_naflex_size_in_the_graph_equals_naflex_size():
    import tensorflow as tf

    from vit_keras.preprocessing import naflex_size_graph

    @tf.function
    def sizes(height, width):
        return naflex_size_graph(height, width, 16, 256)

    for height, width in SHAPES:
        assert tuple(int(v) for v in sizes(tf.constant(height), tf.constant(width))) == naflex_size(height, width,
                                                                                                     16, 256)


@pytest.mark.tf_only
def test_tf_data_batches_images_of_mixed_sizes_as_naflex_patches():
    import tensorflow as tf

    from vit_keras.naflex_data import naflex_map

    rng = np.random.default_rng(4)
    images = [rng.integers(0, 256, shape).astype(np.uint8) for shape in ((100, 700, 3), (64, 48, 3), (30, 30, 3))]
    dataset = tf.data.Dataset.from_generator(lambda: iter(images),
                                             output_signature=tf.TensorSpec((None, None, 3), tf.uint8))
    labels = tf.data.Dataset.range(3)
    batch, label = next(iter(tf.data.Dataset.zip(dataset, labels).map(naflex_map(8, 24)).batch(3)))
    expected = naflex_patches(images, 8, 24)
    assert label.numpy().tolist() == [0, 1, 2]
    np.testing.assert_array_equal(batch["grid"].numpy(), expected["grid"])
    np.testing.assert_array_equal(batch["mask"].numpy(), expected["mask"])
    # The same tf.image.resize on both paths; float32 pixel values in [0, 255].
    np.testing.assert_allclose(batch["patches"].numpy(), expected["patches"], atol=1e-3)
    model = vit_keras.ViT(flexible=True, **TINY, classes=4)
    together = model.predict({k: v.numpy() for k, v in batch.items()}, verbose=0)
    for index in range(3):
        alone = run(model, {k: v[index:index + 1] for k, v in expected.items()})
        np.testing.assert_allclose(together[index], alone[0], atol=ALONE_TOLERANCE)


@pytest.mark.tf_only
def test_tf_data_refuses_an_image_that_does_not_fit_unresized():
    import tensorflow as tf

    from vit_keras.naflex_data import naflex_example

    with pytest.raises(ValueError, match="is 20x16, not a multiple of the patch size 8"):
        naflex_example(tf.zeros((20, 16, 3)), 8, 16, resize=False)
    with pytest.raises(ValueError, match="is 3x2 = 6 patches, more than max_num_patches 4"):
        naflex_example(tf.zeros((24, 16, 3)), 8, 4, resize=False)


# ---- a SavedModel that serves encoded images of any sizes


SERVE_WITHOUT_VIT_KERAS = r"""
import json, sys
sys.modules["vit_keras"] = None  # the SavedModel must run with TensorFlow alone
import numpy as np
import tensorflow as tf

export_dir, first, second = sys.argv[1:]
serve = tf.saved_model.load(export_dir).signatures["serve_bytes"]
data = [open(first, "rb").read(), open(second, "rb").read()]
both = serve(image_bytes=tf.constant(data))["outputs"].numpy()
alone = [serve(image_bytes=tf.constant([d]))["outputs"].numpy()[0] for d in data]
print(json.dumps({"both": both.tolist(), "alone": [a.tolist() for a in alone]}))
"""


@pytest.mark.slow
@pytest.mark.numerics
@pytest.mark.tf_only
def test_naflex_saved_model_serves_jpegs_of_different_sizes_without_vit_keras(tmp_path, record_property):
    import subprocess
    import sys

    import tensorflow as tf

    from vit_keras.export.naflex import naflex_saved_model

    model = vit_keras.ViT(flexible=True, **TINY, classes=5, classifier_activation=None)
    rng = np.random.default_rng(9)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype(np.float32))
    paths, decoded = [], []
    for index, (height, width) in enumerate(((100, 700), (640, 480))):
        pixels = rng.integers(0, 256, (height, width, 3)).astype(np.uint8)
        path = tmp_path / f"image_{index}.jpg"
        path.write_bytes(tf.io.encode_jpeg(pixels).numpy())
        paths.append(str(path))
        decoded.append(tf.io.decode_jpeg(path.read_bytes(), channels=3).numpy())
    export_dir = naflex_saved_model(model, str(tmp_path / "served"), max_num_patches=48)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-c", SERVE_WITHOUT_VIT_KERAS, export_dir, *paths], capture_output=True,
                            text=True, env=env, cwd=str(tmp_path), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    both, alone = np.asarray(served["both"]), np.asarray(served["alone"])
    _alone(record_property)(both, alone, "both images in one request vs each alone")
    # The same as the Keras model on the same decoded images, prepared by the NumPy helper: the same resize op and
    # sums, graph against eager kernels (measured 1.5e-7), so the one-image bound holds.
    expected = run(model, naflex_patches(decoded, 8, 48))
    Bound(ALONE_TOLERANCE, "relative_diff_keras", record_property)(both, expected, "served vs the Keras model")
    with pytest.raises(ValueError, match="already exists"):
        naflex_saved_model(model, str(tmp_path / "served"), max_num_patches=48)
    with pytest.raises(ValueError, match="exports a flexible"):
        naflex_saved_model(vit_keras.ViT(image_size=32, **TINY), str(tmp_path / "other"), max_num_patches=48)


@pytest.mark.tf_only
def test_a_flexible_model_trains_with_keras_fit_on_a_naflex_dataset():
    import tensorflow as tf

    from vit_keras.naflex_data import naflex_map

    rng = np.random.default_rng(6)
    images = [rng.integers(0, 256, shape).astype(np.uint8) for shape in ((40, 90, 3), (64, 30, 3), (33, 33, 3))] * 2
    dataset = tf.data.Dataset.from_generator(lambda: iter(images),
                                             output_signature=tf.TensorSpec((None, None, 3), tf.uint8))
    dataset = dataset.apply(tf.data.experimental.assert_cardinality(len(images)))
    labels = tf.data.Dataset.from_tensor_slices(np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1, 2]])
    train = tf.data.Dataset.zip(dataset, labels).map(naflex_map(8, 20)).batch(3)
    model = vit_keras.ViT(flexible=True, **TINY, classes=3, classifier_activation=None)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    before = [w.numpy().copy() for w in model.trainable_weights]
    history = model.fit(train, epochs=2, verbose=0, shuffle=False)
    assert all(np.isfinite(history.history["loss"]))
    changed = [not np.array_equal(a, w.numpy()) for a, w in zip(before, model.trainable_weights)]
    assert all(changed), [w.path for w, c in zip(model.trainable_weights, changed) if not c]
