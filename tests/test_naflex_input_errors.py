"""NaFlex inputs that cannot be served are refused with an error naming the argument, flag, key or image and the fix:
sizes above what a model can hold before anything is allocated, budgets the size search must never exceed, grids
that are not whole numbers, 16-bit images, images the tf.data path cannot cut as they are, and batches whose parts
disagree in shape, before the flexible model traces them (and inside an exported SavedModel)."""

import re

import numpy as np
import pytest

import vit_keras
from vit_keras.cli import main
from vit_keras.images import naflex_patches, naflex_pixels, naflex_resize
from vit_keras.layers.flexible import check_flexible_inputs
from vit_keras.preprocessing import MAX_NUM_PATCHES, check_max_num_patches, naflex_size

TINY = dict(patch_size=8, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96)
TOO_MANY = 100_000
LIMIT_MESSAGE = rf"is {TOO_MANY:,} patches, above the limit of {MAX_NUM_PATCHES:,}"


def _flexible_model():
    return vit_keras.ViT(flexible=True, **TINY, classes=3, include_preprocessing=False)


def _batch(images=((16, 24),), max_num_patches=8):
    return naflex_patches([np.zeros((*size, 3), np.float32) for size in images], 8, max_num_patches, resize=False)


# ---- 1. sizes that become allocations are bounded first


def test_the_patch_limit_is_one_constant_checked_at_its_edge():
    assert check_max_num_patches(MAX_NUM_PATCHES) == MAX_NUM_PATCHES
    with pytest.raises(ValueError, match=rf"`max_num_patches` is {MAX_NUM_PATCHES + 1:,} patches, above the limit"):
        check_max_num_patches(MAX_NUM_PATCHES + 1)
    # One image's attention scores, N x N float32 per head, are what the limit bounds: 1 GiB at the limit.
    assert MAX_NUM_PATCHES ** 2 * 4 <= 2 ** 30


def test_numpy_helpers_refuse_a_patch_budget_above_the_limit():
    image = np.zeros((16, 24, 3), np.uint8)
    for call in (lambda: naflex_patches([image], 8, 10 ** 9), lambda: naflex_resize(image, 8, 10 ** 9),
                 lambda: naflex_size(16, 24, 8, 10 ** 9)):
        with pytest.raises(ValueError, match=r"`max_num_patches` is 1,000,000,000 patches, above the limit of "
                                             r"16,384 \(vit_keras.preprocessing.MAX_NUM_PATCHES\).*Use at most"):
            call()


def test_a_budget_whose_images_exceed_the_pixel_limit_is_refused():
    # 16,384 patches of 256 x 256 pixels: images of 1.07 billion pixels.
    with pytest.raises(ValueError, match=r"16,384 patches of 256x256 pixels make images of up to 1,073,741,824 "
                                         r"pixels, above the image limit of 89,478,485 pixels; use fewer patches "
                                         r"\(at most 1,365 of this size\), or raise the limit with "
                                         r"VIT_KERAS_MAX_IMAGE_PIXELS"):
        naflex_patches([np.zeros((256, 256, 3), np.uint8)], 256, MAX_NUM_PATCHES)


@pytest.mark.tf_only
def test_tf_data_helpers_refuse_a_patch_budget_above_the_limit():
    import tensorflow as tf

    from vit_keras.naflex_data import naflex_example, naflex_map
    from vit_keras.preprocessing import naflex_size_graph
    from vit_keras.training.naflex_pipelines import naflex_eval_pipeline, naflex_train_pipeline

    dataset = tf.data.Dataset.from_tensor_slices((tf.zeros((2, 16, 16, 3), tf.uint8), [0, 1]))
    calls = [lambda: naflex_map(8, TOO_MANY), lambda: naflex_example(tf.zeros((16, 16, 3)), 8, TOO_MANY),
             lambda: naflex_size_graph(16, 16, 8, TOO_MANY),
             lambda: naflex_train_pipeline(dataset, patch_size=8, max_num_patches=TOO_MANY, batch_size=2,
                                           num_classes=2, seed=0),
             lambda: naflex_eval_pipeline(dataset, patch_size=8, max_num_patches=TOO_MANY, batch_size=2,
                                          num_classes=2)]
    for call in calls:
        with pytest.raises(ValueError, match=rf"`max_num_patches` {LIMIT_MESSAGE}"):
            call()


@pytest.mark.tf_only
def test_naflex_exports_refuse_a_patch_budget_above_the_limit(tmp_path):
    from vit_keras.export.naflex import naflex_saved_model, naflex_tflite

    model = _flexible_model()
    with pytest.raises(ValueError, match=rf"`max_num_patches` {LIMIT_MESSAGE}"):
        naflex_saved_model(model, tmp_path / "saved", max_num_patches=TOO_MANY)
    with pytest.raises(ValueError, match=rf"`num_patches` {LIMIT_MESSAGE}"):
        naflex_tflite(model, tmp_path / "flex.tflite", num_patches=TOO_MANY)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("argv,flag", [
    (["export", "out.tflite", "--format", "tflite", "--keras-model", "flex.keras"], "--max-num-patches"),
    (["train", "--dataset", "vit_keras_digits"], "--max-patches"),
    (["predict", "cat.jpg", "--keras-model", "flex.keras"], "--max-patches"),
    (["evaluate", "--dataset", "vit_keras_digits", "--keras-model", "flex.keras"], "--max-patches"),
])
def test_the_command_line_refuses_a_patch_budget_above_the_limit(argv, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, flag, str(TOO_MANY)])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert re.search(rf"argument {flag}: the patch budget {LIMIT_MESSAGE}", error), error
    assert "Use at most 16,384 patches per image" in error


# ---- 2. naflex_size never exceeds the budget, whatever the aspect ratio


EXTREME_SHAPES = [(1, 10 ** 9), (10 ** 9, 1), (1, 1), (10 ** 9, 10 ** 9), (3, 10 ** 12), (10 ** 7, 10 ** 3),
                  (1, 50_000_000)]


@pytest.mark.parametrize("patch_size,budget", [(8, 16), (16, 256), (14, 729), (16, 1), (32, 3), (16, 16_384)])
def test_naflex_size_stays_within_the_budget_at_extreme_aspect_ratios(patch_size, budget):
    for height, width in EXTREME_SHAPES:
        out_height, out_width = naflex_size(height, width, patch_size, budget)
        assert out_height % patch_size == 0 and out_width % patch_size == 0, (height, width)
        rows, cols = out_height // patch_size, out_width // patch_size
        assert rows >= 1 and cols >= 1, (height, width)
        assert rows * cols <= budget, (height, width, rows, cols)


def test_a_thin_image_gets_its_whole_budget_along_its_long_side():
    # A 10^9 x 1 image: one patch column, as many rows as the budget allows (transformers' search, which starts at
    # a scale of 1e-6, gives 125 rows of 8 pixels or 63 of 16 for a budget of 16).
    assert naflex_size(10 ** 9, 1, 8, 16) == (16 * 8, 8)
    assert naflex_size(1, 10 ** 9, 8, 16) == (8, 16 * 8)
    assert naflex_size(10 ** 9, 1, 16, 16) == (16 * 16, 16)


@pytest.mark.tf_only
def test_naflex_size_graph_equals_naflex_size_at_extreme_aspect_ratios():
    import tensorflow as tf

    from vit_keras.preprocessing import naflex_size_graph

    @tf.function
    def sizes(height, width):
        return naflex_size_graph(height, width, 8, 16)

    for height, width in EXTREME_SHAPES + [(480, 640), (7, 300)]:
        graph = sizes(tf.constant(height, tf.int64), tf.constant(width, tf.int64))
        assert tuple(int(v) for v in graph) == naflex_size(height, width, 8, 16), (height, width)


# ---- 3. grids are whole numbers


def test_a_fractional_grid_is_refused_naming_the_image_and_its_value():
    batch = _batch(((16, 24), (16, 24)))
    grid = np.array([[2, 3], [2.5, 3]], np.float32)
    with pytest.raises(ValueError, match=r"NaFlex image 1: `grid` \(2.5, 3.0\) must be whole numbers"):
        check_flexible_inputs(batch["patches"], grid, batch["mask"])
    model = _flexible_model()
    for call in (lambda: model({**batch, "grid": grid}), lambda: model.predict({**batch, "grid": grid}, verbose=0)):
        with pytest.raises(ValueError, match=r"NaFlex image 1: `grid` \(2.5, 3.0\) must be whole numbers"):
            call()
    # Whole-number floats are exact: accepted as the integers they are.
    check_flexible_inputs(batch["patches"], batch["grid"].astype(np.float32), batch["mask"])


@pytest.mark.slow
@pytest.mark.tf_only
def test_the_tflite_runner_refuses_a_fractional_grid(tmp_path):
    pytest.importorskip("ai_edge_litert")
    from vit_keras.export.naflex import naflex_tflite, naflex_tflite_predict

    path = naflex_tflite(_flexible_model(), tmp_path / "flex.tflite", num_patches=8)
    batch = _batch()
    with pytest.raises(ValueError, match=r"NaFlex image 0: `grid` \(2.0, 3.5\) must be whole numbers"):
        naflex_tflite_predict(path, {**batch, "grid": np.array([[2.0, 3.5]])})


# ---- 4. 16-bit images are scaled to [0, 255]


def _image_pair(shape=(20, 36, 3)):
    """The same picture as 8-bit and as 16-bit (each 8-bit value v is 257 v in 16 bits)."""
    eight = np.random.default_rng(0).integers(0, 256, shape).astype(np.uint8)
    return eight, eight.astype(np.uint16) * 257


def test_a_16_bit_image_gives_the_patches_of_its_8_bit_twin():
    eight, sixteen = _image_pair()
    np.testing.assert_array_equal(naflex_pixels(sixteen), eight.astype(np.float32))
    for resize in (True, False):
        images = ([eight], [sixteen]) if resize else ([eight[:16, :32]], [sixteen[:16, :32]])
        expected, got = (naflex_patches(batch, 8, 16, resize=resize) for batch in images)
        np.testing.assert_allclose(got["patches"], expected["patches"], atol=1e-3)
        assert got["patches"].max() <= 255.0


def test_an_image_of_no_number_dtype_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"image 0 must be an array of RGB values in \[0, 255\], got dtype <U1"):
        naflex_patches([np.full((16, 16, 3), "a")], 8, 4)


@pytest.mark.tf_only
def test_tf_data_scales_a_16_bit_image_as_the_numpy_helpers_do():
    import tensorflow as tf

    from vit_keras.naflex_data import naflex_map
    from vit_keras.training.naflex_pipelines import naflex_eval_pipeline

    eight, sixteen = _image_pair()
    expected = naflex_patches([eight], 8, 16)
    got = next(iter(tf.data.Dataset.from_tensors(sixteen).map(naflex_map(8, 16)).batch(1)))
    np.testing.assert_allclose(got["patches"].numpy(), expected["patches"], atol=1e-3)
    labelled = tf.data.Dataset.from_tensors((sixteen, 0))
    evaluated, _ = next(iter(naflex_eval_pipeline(labelled, patch_size=8, max_num_patches=16, batch_size=1,
                                                  num_classes=2)))
    np.testing.assert_allclose(evaluated["patches"].numpy(), expected["patches"], atol=1e-3)


# ---- 5. tf.data explains an image it cannot cut as naflex_patches does


UNCUT = [((20, 16), 16, "not a multiple of the patch size 8"), ((4, 4), 16, "smaller than one 8x8 patch"),
         ((24, 16), 4, "more than max_num_patches 4")]


def _numpy_explanation(size, max_num_patches):
    with pytest.raises(ValueError) as error_info:
        naflex_patches([np.zeros((*size, 3), np.float32)], 8, max_num_patches, resize=False)
    return str(error_info.value).replace("image 0", "the image")


@pytest.mark.tf_only
@pytest.mark.parametrize("size,max_num_patches,what", UNCUT)
def test_tf_data_refuses_an_uncut_image_of_known_size_as_naflex_patches_does(size, max_num_patches, what):
    import tensorflow as tf

    from vit_keras.naflex_data import naflex_map

    explanation = _numpy_explanation(size, max_num_patches)
    assert what in explanation
    dataset = tf.data.Dataset.from_tensors(tf.zeros((*size, 3)))
    with pytest.raises(ValueError, match=re.escape(explanation)):
        dataset.map(naflex_map(8, max_num_patches, resize=False))


@pytest.mark.tf_only
@pytest.mark.parametrize("size,max_num_patches,what", UNCUT)
def test_tf_data_refuses_an_uncut_image_of_unknown_size_as_naflex_patches_does(size, max_num_patches, what):
    import tensorflow as tf

    from vit_keras.naflex_data import naflex_map

    explanation = _numpy_explanation(size, max_num_patches)
    dataset = tf.data.Dataset.from_generator(lambda: iter([np.zeros((*size, 3), np.float32)]),
                                             output_signature=tf.TensorSpec((None, None, 3), tf.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(explanation)):
        next(iter(dataset.map(naflex_map(8, max_num_patches, resize=False))))


# ---- 6. the flexible model checks a batch's shapes before tracing it


WRONG_SHAPES = [
    ("patches", lambda b: np.zeros((1, 8, 48), np.float32),
     r"NaFlex `patches` of shape \(1, 8, 48\) have 48 values per patch but the model takes 192"),
    ("grid", lambda b: np.array([[2, 3], [2, 3]], np.int32),
     r"NaFlex `grid` must be \(batch, 2\) = \(1, 2\) \(rows, cols per image\), got shape \(2, 2\)"),
    ("mask", lambda b: np.concatenate([b["mask"]] * 2),
     r"NaFlex `mask` must be \(batch, N\) = \(1, 8\), like `patches` \(1, 8, 192\), got shape \(2, 8\)"),
    ("mask", lambda b: b["mask"][:, :7],
     r"NaFlex `mask` must be \(batch, N\) = \(1, 8\), like `patches` \(1, 8, 192\), got shape \(1, 7\)"),
]


@pytest.fixture(scope="module")
def predicted_model():
    """A flexible model that has already run `predict` once (its predict step is traced)."""
    model = _flexible_model()
    model.predict(_batch(), verbose=0)
    return model


@pytest.mark.parametrize("key,wrong,message", WRONG_SHAPES)
def test_the_model_names_a_wrong_shape_before_tracing(predicted_model, key, wrong, message):
    batch = _batch()
    bad = {**batch, key: wrong(batch)}
    with pytest.raises(ValueError, match=message):
        predicted_model.predict(bad, verbose=0)
    with pytest.raises(ValueError, match=message):
        predicted_model(bad)
    with pytest.raises(ValueError, match=message):
        predicted_model.evaluate(bad, np.zeros((1, 3)), verbose=0)


def test_the_model_names_a_missing_key(predicted_model):
    batch = _batch()
    with pytest.raises(ValueError, match=r"A NaFlex batch is a dict of \['patches', 'grid', 'mask'\].*missing "
                                         r"\['mask'\]"):
        predicted_model.predict({"patches": batch["patches"], "grid": batch["grid"]}, verbose=0)


@pytest.mark.tf_only
def test_the_model_names_a_wrong_shape_inside_a_graph(predicted_model):
    import tensorflow as tf

    batch = _batch()
    in_graph = tf.function(lambda patches, grid, mask: predicted_model({"patches": patches, "grid": grid,
                                                                        "mask": mask}),
                           input_signature=[tf.TensorSpec((None, None, 192)), tf.TensorSpec((None, 2), tf.int32),
                                            tf.TensorSpec((None, None), tf.int32)])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"NaFlex `grid` must be \(batch, 2\) = \[1 2\] "
                                                             r"\(rows, cols per image\), got shape \[2 2\]"):
        in_graph(batch["patches"], np.array([[2, 3], [2, 3]], np.int32), batch["mask"])
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"NaFlex `mask` must be \(batch, N\) = \[1 8\], like "
                                                             r"`patches` \[1 8 192\], got shape \[1 7\]"):
        in_graph(batch["patches"], batch["grid"], batch["mask"][:, :7])


@pytest.mark.slow
@pytest.mark.tf_only
def test_the_saved_model_serving_default_names_a_wrong_shape(tmp_path):
    import tensorflow as tf

    from vit_keras.export.naflex import naflex_saved_model

    path = naflex_saved_model(_flexible_model(), tmp_path / "flex", max_num_patches=8)
    serve = tf.saved_model.load(path).signatures["serving_default"]
    batch = _batch()
    serve(**{key: tf.constant(value) for key, value in batch.items()})
    graph_messages = [r"NaFlex `patches` of shape \[1 8 48\] have 48 values per patch but the model takes 192",
                      r"NaFlex `grid` must be \(batch, 2\) = \[1 2\] \(rows, cols per image\), got shape \[2 2\]",
                      r"NaFlex `mask` must be \(batch, N\) = \[1 8\], like `patches` \[1 8 192\], got shape \[2 8\]",
                      r"NaFlex `mask` must be \(batch, N\) = \[1 8\], like `patches` \[1 8 192\], got shape \[1 7\]"]
    for (key, wrong, _), message in zip(WRONG_SHAPES, graph_messages):
        bad = {**batch, key: wrong(batch)}
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            serve(**{name: tf.constant(value) for name, value in bad.items()})


def test_naflex_map_names_an_empty_or_two_dimensional_image():
    import tensorflow as tf

    from vit_keras.naflex_data import naflex_map

    convert = naflex_map(8, 16)
    with pytest.raises(ValueError, match=r"image of 0x0 pixels, which has nothing to cut into patches"):
        convert(tf.zeros((0, 0, 3)))
    with pytest.raises(ValueError, match=r"one \(height, width, channels\) image, got shape \(8, 8\); add the "
                                         r"channel axis to a grayscale image"):
        convert(tf.zeros((8, 8)))
    # a side of 0 known only when the graph runs
    sizes = tf.data.Dataset.from_generator(lambda: iter([np.zeros((0, 5, 3), np.float32)]),
                                           output_signature=tf.TensorSpec((None, None, 3), tf.float32))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"image with no pixels"):
        list(sizes.map(convert))
