"""vit-keras 0.2.0's `vit`, `utils` and `visualize` modules: its names and argument semantics on today's models.

Outputs are checked against the NumPy ViT of tests/reference_numpy.py (the paper's equations, float64) and against
NumPy transcriptions of 0.2.0's documented behaviour (class-token output without the top, attention rollout with
0.2.0's normalisation, half-pixel bilinear resizing as its cv2.resize). Pretrained paths run offline: the tests
write tiny Google-format checkpoints and register them under 0.2.0's names with file:// URLs.
"""

import contextlib
import dataclasses
import functools
import hashlib
import http.server
import importlib
import inspect
import io
import socket
import threading
import warnings

import keras
import numpy as np
import PIL.Image
import pytest
import tensorflow as tf

import vit_keras
from tests.image_bombs import bomb_png
from tests.reference_numpy import interpolate_posembed, params_from_model, randomize_weights, vit_forward
from tests.tiny import TINY
from vit_keras import inspection, migration, utils, visualize, vit
from vit_keras.weights import registry

TOLERANCE = 2e-5  # float32 model vs float64 reference: float32 rounding (~1e-6 on O(1) outputs), 20x
PATCH, HIDDEN = TINY["patch_size"], TINY["hidden_size"]
TINY_BUILD = dict(patch_size=PATCH, num_layers=TINY["num_layers"], hidden_size=HIDDEN, num_heads=TINY["num_heads"],
                  mlp_dim=TINY["mlp_dim"], name="tiny")

NAMES_0_2_0 = {
    vit: ["ConfigDict", "CONFIG_B", "CONFIG_L", "BASE_URL", "WEIGHTS", "SIZES", "ImageSizeArg", "preprocess_inputs",
          "interpret_image_size", "build_model", "validate_pretrained_top", "load_pretrained", "vit_b16", "vit_b32",
          "vit_l16", "vit_l32"],
    utils: ["get_imagenet_classes", "read", "apply_embedding_weights", "load_weights_numpy"],
    visualize: ["attention_map"],
}


@pytest.fixture(autouse=True)
def _fresh_warnings():
    migration.warned.clear()
    yield
    migration.warned.clear()


def quiet(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def checkpoint_params(classes=1000, representation_size=None, seed=0):
    """A tiny random checkpoint in Google's .npz layout (float32), trained on a 32x32 image (4x4 grid)."""
    model = vit_keras.ViT(image_size=32, classes=classes, representation_size=representation_size,
                          include_preprocessing=False, **TINY)
    randomize_weights(model, seed=seed)
    params = params_from_model(model)
    params["embedding/kernel"] = params["embedding/kernel"].reshape(PATCH, PATCH, 3, HIDDEN)
    return {key: value.astype(np.float32) for key, value in params.items()}


def features(params, x):
    """The reference's class-token vector (after pre_logits when present): its head replaced by the identity."""
    width = params["head/kernel"].shape[0]
    p = {**params, "head/kernel": np.eye(width), "head/bias": np.zeros(width)}
    return vit_forward(x, p, patch_size=PATCH)


def bilinear_half_pixel(image, size):
    """cv2.resize INTER_LINEAR / tf.image.resize(antialias=False) on the first two axes, float64."""

    def axis(n_in, n_out):
        m = np.zeros((n_out, n_in))
        for i in range(n_out):
            src = min(max((i + 0.5) * n_in / n_out - 0.5, 0.0), n_in - 1)
            lo = int(np.floor(src))
            hi = min(lo + 1, n_in - 1)
            m[i, lo] += 1 - (src - lo)
            m[i, hi] += src - lo
        return m

    image = np.asarray(image, np.float64)
    return np.einsum("ri,cj,ij...->rc...", axis(image.shape[0], size[0]), axis(image.shape[1], size[1]), image)


@pytest.fixture
def registered(tmp_path, monkeypatch):
    """0.2.0's ViT-B_16 checkpoints replaced by tiny ones served from file:// (offline), in a private cache."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.setitem(vit._CONSTRUCTORS, "B_16", (functools.partial(vit_keras.ViT, **TINY), HIDDEN))
    checkpoints = {
        "imagenet21k": checkpoint_params(classes=registry.IMAGENET21K_CLASSES, representation_size=HIDDEN, seed=1),
        "imagenet21k+imagenet2012": checkpoint_params(classes=registry.IMAGENET_CLASSES, seed=2),
    }
    for name, params in checkpoints.items():
        path = tmp_path / f"{name}.npz"
        np.savez(path, **params)
        key = f"B/16:{name}"
        monkeypatch.setitem(registry.REGISTRY, key, dataclasses.replace(
            registry.REGISTRY[key], url=path.as_uri(), sha256=hashlib.sha256(path.read_bytes()).hexdigest()))
    return checkpoints


@pytest.fixture
def images():
    return np.random.default_rng(3).uniform(0, 255, (2, 32, 32, 3)).astype(np.float32)


def test_0_2_0_names_exist():
    for module, names in NAMES_0_2_0.items():
        missing = [name for name in names if not hasattr(module, name)]
        assert not missing, f"{module.__name__} lacks {missing}"
    assert vit.WEIGHTS == {"imagenet21k": 21843, "imagenet21k+imagenet2012": 1000}
    assert vit.SIZES == {"B_16", "B_32", "L_16", "L_32"}
    assert vit.CONFIG_B == {"dropout": 0.1, "mlp_dim": 3072, "num_heads": 12, "num_layers": 12, "hidden_size": 768}
    assert vit.CONFIG_L == {"dropout": 0.1, "mlp_dim": 4096, "num_heads": 16, "num_layers": 24, "hidden_size": 1024}


def test_modules_import_the_0_2_0_ways():
    import vit_keras.vit as by_path

    assert by_path is vit
    for name in ("vit", "utils", "visualize"):
        # The earlier names are the compat modules themselves (one module object, whichever name imports it).
        assert vit_keras.__getattr__(name) is importlib.import_module(f"vit_keras.compat.{name}")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        vit_keras.__getattr__("nothing")


@pytest.mark.slow
def test_every_0_2_0_function_warns_once_naming_its_replacement(registered, tmp_path):
    model = quiet(vit.build_model, image_size=32, classes=10, **TINY_BUILD)
    np.savez(tmp_path / "c.npz", **checkpoint_params(classes=10))
    image = np.zeros((32, 32, 3), np.uint8)
    table = model.get_layer("patch_encoder").pos_embedding.numpy()
    calls = {
        "vit_keras.vit.preprocess_inputs": lambda: vit.preprocess_inputs(image),
        "vit_keras.vit.interpret_image_size": lambda: vit.interpret_image_size(32),
        "vit_keras.vit.build_model": lambda: vit.build_model(image_size=32, classes=10, **TINY_BUILD),
        "vit_keras.vit.validate_pretrained_top": lambda: vit.validate_pretrained_top(
            True, True, 1000, "imagenet21k+imagenet2012"),
        "vit_keras.vit.load_pretrained": lambda: vit.load_pretrained(
            "B_16", "imagenet21k+imagenet2012", False, model, 32, PATCH),
        "vit_keras.vit.vit_b16": lambda: vit.vit_b16(image_size=32, pretrained=False, pretrained_top=False),
        "vit_keras.utils.get_imagenet_classes": utils.get_imagenet_classes,
        "vit_keras.utils.read": lambda: utils.read(image, 32),
        "vit_keras.utils.apply_embedding_weights": lambda: utils.apply_embedding_weights(
            model.get_layer("patch_encoder"), table, 4, 4),
        "vit_keras.utils.load_weights_numpy": lambda: utils.load_weights_numpy(model, str(tmp_path / "c.npz"), True,
                                                                                4, 4),
        "vit_keras.visualize.attention_map": lambda: visualize.attention_map(model, image),
    }
    migration.warned.clear()  # building `model` above used build_model already
    for name, call in calls.items():
        for attempt in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                call()
            ours = [w for w in caught if issubclass(w.category, FutureWarning) and "vit-keras 0.2.0" in str(w.message)]
            if attempt == 0:
                assert len(ours) == 1, f"{name}: {[str(w.message) for w in ours]}"
                message = str(ours[0].message)
                assert message.startswith(f"{name} is vit-keras 0.2.0's API") and "instead" in message
                assert ours[0].filename == __file__, f"{name} warns from {ours[0].filename}, not the caller"
            else:
                assert not ours, f"{name} warned twice"


@pytest.mark.parametrize("size", [(32, 32), (48, 40)])
@pytest.mark.parametrize("include_top", [True, False])
def test_build_model_and_load_weights_numpy_match_the_reference(tmp_path, size, include_top):
    params = checkpoint_params(classes=10, representation_size=24)
    np.savez(tmp_path / "c.npz", **params)
    model = quiet(vit.build_model, image_size=size, classes=10, activation="sigmoid", include_top=include_top,
                  representation_size=24, **TINY_BUILD)
    quiet(utils.load_weights_numpy, model, tmp_path / "c.npz", pretrained_top=True,
          num_x_patches=size[1] // PATCH, num_y_patches=size[0] // PATCH)
    x = np.random.default_rng(0).uniform(0, 255, (2, *size, 3)).astype(np.float32)
    scaled = quiet(vit.preprocess_inputs, x)
    if include_top:
        expected = 1 / (1 + np.exp(-vit_forward(scaled, params, patch_size=PATCH)))
        assert model.output_shape == (None, 10)
    else:  # 0.2.0: the class token's vector (here after its pre_logits layer), not the token sequence
        expected = features(params, scaled)
        assert model.output_shape == (None, 24)
    np.testing.assert_allclose(model.predict(scaled, verbose=0), expected, rtol=0, atol=TOLERANCE)
    assert model.name == "tiny" and model.input_shape == (None, *size, 3)
    assert not any(isinstance(layer, keras.layers.Rescaling) for layer in model.layers)  # takes [-1, 1]
    assert model.get_layer("Transformer_encoderblock_0").block.dropout_rate == 0.1


def test_vit_b16_pretrained_top_keeps_the_checkpoint_head(registered, images):
    with pytest.warns(UserWarning, match="Can only use pretrained_top with imagenet21k\\+imagenet2012 if classes = "
                                         "1000. Setting manually."):
        model = quiet_future(vit.vit_b16, image_size=32, classes=5, activation="sigmoid", pretrained=True,
                             include_top=True, pretrained_top=True)
    assert model.output_shape == (None, 1000) and model.name == "vit-b16"
    scaled = quiet(vit.preprocess_inputs, images)
    logits = vit_forward(scaled, registered["imagenet21k+imagenet2012"], patch_size=PATCH)
    np.testing.assert_allclose(model.predict(scaled, verbose=0), 1 / (1 + np.exp(-logits)), rtol=0, atol=TOLERANCE)


def quiet_future(function, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return function(*args, **kwargs)


@pytest.mark.slow
def test_vit_b16_fine_tuning_head_starts_fresh(registered, images):
    model = quiet(vit.vit_b16, image_size=32, classes=7, pretrained=True, include_top=True, pretrained_top=False)
    assert model.output_shape == (None, 7)
    head = model.get_layer("head")
    assert not np.any(head.kernel.numpy()) and not np.any(head.bias.numpy())
    # The body is the checkpoint's: with the head cut off, the class-token vector equals the reference's.
    body = keras.Model(model.inputs, model.get_layer("pool").output)
    scaled = quiet(vit.preprocess_inputs, images)
    np.testing.assert_allclose(body.predict(scaled, verbose=0),
                               features(registered["imagenet21k+imagenet2012"], scaled), rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("size", [(32, 32), (48, 40)])
def test_vit_b16_imagenet21k_without_top_returns_the_pre_logits_vector(registered, size):
    model = quiet(vit.vit_b16, image_size=size, pretrained=True, include_top=False, pretrained_top=False,
                  weights="imagenet21k")
    assert model.output_shape == (None, HIDDEN)
    x = quiet(vit.preprocess_inputs, np.random.default_rng(4).uniform(0, 255, (2, *size, 3)))
    # (48, 40): the checkpoint's 4x4 position embeddings resampled to 6x5 as vit_jax (and 0.2.0) do.
    np.testing.assert_allclose(model.predict(x, verbose=0), features(registered["imagenet21k"], x), rtol=0,
                               atol=TOLERANCE)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"pretrained": False}, "pretrained_top=True needs pretrained=True"),
        ({"include_top": False}, "pretrained_top=True needs include_top=True"),
        ({"weights": "imagenet"}, "Unexpected weights 'imagenet'"),
        ({"weights": "imagenet", "pretrained_top": False}, "Unexpected weights 'imagenet'"),
        ({"image_size": 30, "pretrained": False, "pretrained_top": False}, "not divisible by patch_size"),
        ({"image_size": "big", "pretrained": False, "pretrained_top": False}, "image_size argument must be"),
    ],
)
def test_bad_0_2_0_arguments_are_explained(registered, kwargs, match):
    with pytest.raises(ValueError, match=match):
        quiet(vit.vit_b16, **kwargs)


def test_named_functions_map_onto_todays_constructors():
    assert vit._CONSTRUCTORS["B_32"][0] is vit_keras.ViTB32
    assert vit._CONSTRUCTORS["L_16"][0] is vit_keras.ViTL16
    assert vit._CONSTRUCTORS["L_32"][0] is vit_keras.ViTL32
    for function, size in ((vit.vit_b16, 224), (vit.vit_b32, 224), (vit.vit_l16, 384), (vit.vit_l32, 384)):
        defaults = {k: p.default for k, p in inspect.signature(function).parameters.items()}
        assert defaults == {"image_size": (size, size), "classes": 1000, "activation": "linear", "include_top": True,
                            "pretrained": True, "pretrained_top": True, "weights": "imagenet21k+imagenet2012"}


@pytest.mark.slow
def test_vit_b32_builds_the_real_variant():
    model = quiet(vit.vit_b32, image_size=64, pretrained=False, include_top=False, pretrained_top=False)
    assert model.name == "vit-b32" and model.input_shape == (None, 64, 64, 3) and model.output_shape == (None, 768)
    architecture = vit_keras.weights.architecture_of(model)
    config = vit_keras.configs.VARIANTS["B/32"]
    assert vit_keras.weights.registry.variant_of(architecture) == "B/32"
    assert (architecture["hidden_size"], architecture["mlp_dim"]) == (config.hidden_size, config.mlp_dim)
    blocks = [layer for layer in model.layers if layer.name.startswith("Transformer_encoderblock_")]
    assert len(blocks) == 12 and model.get_layer("patches").patch_size == 32


@pytest.mark.slow
def test_saving_round_trips(tmp_path, images):
    base = quiet(vit.build_model, image_size=32, classes=10, include_top=False, **TINY_BUILD)
    inputs = keras.Input((32, 32, 3))
    model = keras.Model(inputs, keras.layers.Dense(5, activation="softmax")(base(inputs)))
    expected = model.predict(images, verbose=0)
    model.save(tmp_path / "m.keras")
    reloaded = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    np.testing.assert_allclose(reloaded.predict(images, verbose=0), expected, rtol=0, atol=1e-6)
    model.save(tmp_path / "weights.h5")  # 0.2.0's own test saves the legacy HDF5 format and a SavedModel
    tf.saved_model.save(model, str(tmp_path / "saved"))


# utils.read ------------------------------------------------------------------------------------------------------


@pytest.fixture
def picture(tmp_path):
    pixels = np.random.default_rng(5).integers(0, 256, (37, 53, 3)).astype(np.uint8)
    path = tmp_path / "picture.png"
    PIL.Image.fromarray(pixels).save(path)
    return path, pixels


def test_read_decodes_and_resizes_like_0_2_0(picture):
    path, pixels = picture
    same = quiet(utils.read, str(path), (37, 53))
    assert same.dtype == np.uint8
    np.testing.assert_array_equal(same, pixels)
    resized = quiet(utils.read, path, 32)
    assert resized.shape == (32, 32, 3) and resized.dtype == np.uint8
    expected = bilinear_half_pixel(pixels, (32, 32))
    assert np.abs(resized - expected).max() <= 0.5 + 1e-3  # rounding only


def test_read_takes_buffers_pil_images_arrays_and_urls(picture):
    path, pixels = picture
    expected = quiet(utils.read, path, 24)
    np.testing.assert_array_equal(quiet(utils.read, io.BytesIO(path.read_bytes()), 24), expected)
    np.testing.assert_array_equal(quiet(utils.read, PIL.Image.open(path), 24), expected)
    np.testing.assert_array_equal(quiet(utils.read, pixels, 24), expected)
    body = path.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/picture.png"
        np.testing.assert_array_equal(quiet(utils.read, url, 24, timeout=10), expected)
    finally:
        server.shutdown()
        server.server_close()


def test_read_does_not_hang_on_a_silent_server():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts the connection, never answers
    try:
        with pytest.raises(ValueError, match="Cannot download the image at"):
            quiet(utils.read, f"http://127.0.0.1:{listener.getsockname()[1]}/x.png", 8, timeout=0.5)
    finally:
        listener.close()


def test_read_errors_name_the_problem(tmp_path, picture):
    with pytest.raises(FileNotFoundError, match="Could not find image at path"):
        quiet(utils.read, str(tmp_path / "missing.png"), 8)
    garbage = tmp_path / "garbage.png"
    garbage.write_bytes(b"not an image")
    with pytest.raises(ValueError, match="garbage.png' is a text file; accepted image formats: JPEG, PNG, GIF, BMP"):
        quiet(utils.read, garbage, 8)
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(picture[0].read_bytes()[:200])
    with pytest.raises(ValueError, match="Cannot decode .*truncated.png.* as an image"):
        quiet(utils.read, truncated, 8)
    with pytest.raises(ValueError, match="`size` must be a positive int"):
        quiet(utils.read, picture[0], 0)
    with open(picture[0], encoding="latin-1") as text:
        with pytest.raises(ValueError, match="open the file in binary mode"):
            quiet(utils.read, text, 8)
    with pytest.raises(ValueError, match="Cannot read an image from int"):
        quiet(utils.read, 3, 8)


@contextlib.contextmanager
def serving(body, mode="length"):
    """The URL of `body` on a 127.0.0.1 server: sent with a Content-Length ('length'), without one, until the
    connection closes ('no_length'), or a byte every 0.2 s for at most 6 s ('trickle')."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            self.send_response(200)
            if mode != "no_length":
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if mode != "trickle":
                self.wfile.write(body)
                return
            for i in range(30):
                try:
                    self.wfile.write(body[i : i + 1])
                    self.wfile.flush()
                except OSError:  # the client gave up
                    return
                threading.Event().wait(0.2)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/image.png"
    finally:
        server.shutdown()
        server.server_close()


def test_read_refuses_a_decompression_bomb_from_every_source(tmp_path, picture, monkeypatch):
    """A 20000x20000 PNG of ~50 KB (1.2 GB decoded) is refused from its header, whatever it comes from."""
    bomb = bomb_png(20000, 20000)
    path = tmp_path / "bomb.png"
    path.write_bytes(bomb)
    refused = r"is a 20000x20000 PNG \(400,000,000 pixels\), above the limit of 89,478,485 pixels .*" + (
        "VIT_KERAS_MAX_IMAGE_PIXELS=400000000")
    with pytest.raises(ValueError, match="bomb.png' " + refused):
        quiet(utils.read, str(path), 8)
    with pytest.raises(ValueError, match="the BytesIO contents " + refused):
        quiet(utils.read, io.BytesIO(bomb), 8)
    with serving(bomb) as url:
        with pytest.raises(ValueError, match=f"the image at '{url}' " + refused):
            quiet(utils.read, url, 8, timeout=10)
    # PIL reads the header when it opens a file and decodes on convert(): the size is checked in between.
    picture_path, pixels = picture
    monkeypatch.setenv("VIT_KERAS_MAX_IMAGE_PIXELS", "1000")
    with pytest.raises(ValueError, match=r"the PIL image is a 53x37 PNG \(1,961 pixels\), above the limit of 1,000"):
        quiet(utils.read, PIL.Image.open(picture_path), 8)
    monkeypatch.delenv("VIT_KERAS_MAX_IMAGE_PIXELS")
    with pytest.raises(ValueError, match=r"53x37 PNG \(1,961 pixels\), above the limit of 1,960"):
        quiet(utils.read, io.BytesIO(picture_path.read_bytes()), 8, max_pixels=53 * 37 - 1)
    assert quiet(utils.read, picture_path, (37, 53), max_pixels=53 * 37).tolist() == pixels.tolist()


@pytest.mark.parametrize("mode", ["length", "no_length"])
def test_read_caps_the_bytes_of_a_url(picture, monkeypatch, mode):
    """A stated Content-Length above the limit is refused before reading; without one, the bytes are counted as
    they arrive. The limit comes from VIT_KERAS_MAX_IMAGE_BYTES."""
    body = picture[0].read_bytes()
    monkeypatch.setenv("VIT_KERAS_MAX_IMAGE_BYTES", "1000")
    with serving(body, mode) as url:
        with pytest.raises(ValueError) as caught:
            quiet(utils.read, url, 8, timeout=10)
        message = str(caught.value)
        assert message.startswith(f"The image at '{url}' is larger than the limit of 1,000 bytes")
        assert "raise the limit with VIT_KERAS_MAX_IMAGE_BYTES=BYTES" in message
        monkeypatch.setenv("VIT_KERAS_MAX_IMAGE_BYTES", str(len(body)))
        np.testing.assert_array_equal(quiet(utils.read, url, (37, 53), timeout=10), picture[1])


def test_read_of_a_trickling_url_ends_at_the_download_deadline(picture, monkeypatch):
    """A byte every 0.2 s never trips the 10 s timeout between bytes; the overall deadline (1 s here) ends it."""
    monkeypatch.setenv("VIT_KERAS_DOWNLOAD_DEADLINE", "1")
    with serving(picture[0].read_bytes(), "trickle") as url:
        with pytest.raises(ValueError, match=rf"Downloading '{url}' did not finish within its overall deadline of 1 s "
                                             r"\([1-9]\d* bytes received\).*VIT_KERAS_DOWNLOAD_DEADLINE=SECONDS"):
            quiet(utils.read, url, 8, timeout=10)


def test_get_imagenet_classes():
    classes = quiet(utils.get_imagenet_classes)
    assert isinstance(classes, list) and len(classes) == 1000 and all(isinstance(c, str) for c in classes)
    assert classes == [name for _, name in vit_keras.imagenet_classes()]
    assert classes[285] == "Egyptian_cat" and classes[0] == "tench"


# visualize.attention_map -------------------------------------------------------------------------------------------


def rollout_overlay_0_2_0(model, image):
    """0.2.0's algorithm in NumPy: head mean + I, each matrix divided by its total, multiplied from the last layer
    down; the class token's row over the patches, scaled to max 1, resized to the image, times the image."""
    x = quiet(vit.preprocess_inputs, image)[np.newaxis]
    weights = inspection.attention_weights(model, x)[:, 0].astype(np.float64)  # (layers, heads, T, T)
    matrices = weights.mean(axis=1) + np.eye(weights.shape[-1])
    matrices = matrices / matrices.sum(axis=(1, 2))[:, np.newaxis, np.newaxis]
    v = matrices[-1]
    for n in range(1, len(matrices)):
        v = v @ matrices[-1 - n]
    grid = model.get_layer("patch_encoder").grid_size
    mask = v[0, 1:].reshape(grid)
    mask = bilinear_half_pixel(mask / mask.max(), image.shape[:2])[..., np.newaxis]
    return mask * image


def test_attention_map_is_0_2_0_rollout(tmp_path):
    np.savez(tmp_path / "c.npz", **checkpoint_params(classes=10))
    model = quiet(vit.build_model, image_size=32, classes=10, **TINY_BUILD)
    quiet(utils.load_weights_numpy, model, tmp_path / "c.npz", True, 4, 4)
    image = np.random.default_rng(6).integers(0, 256, (32, 32, 3)).astype(np.uint8)
    overlay = quiet(visualize.attention_map, model, image)
    assert overlay.shape == image.shape and overlay.dtype == np.uint8
    expected = rollout_overlay_0_2_0(model, image)
    assert np.abs(overlay - expected).max() <= 1.0  # uint8 truncation of float32 vs float64 products
    # A model that rescales inside (today's default) gets the raw image and gives the same map.
    inside = vit_keras.ViT(image_size=32, classes=10, classifier_activation=None, **TINY)
    inside.set_weights(model.get_weights())
    np.testing.assert_array_equal(quiet(visualize.attention_map, inside, image), overlay)
    other = np.random.default_rng(7).integers(0, 256, (50, 40, 3)).astype(np.uint8)
    assert quiet(visualize.attention_map, model, other).shape == (50, 40, 3)
    with pytest.raises(ValueError, match="`image` must be one \\(height, width, 3\\) RGB image"):
        quiet(visualize.attention_map, model, image[np.newaxis])


# utils' weight helpers ---------------------------------------------------------------------------------------------


def test_apply_embedding_weights_resamples_like_vit_jax():
    model = quiet(vit.build_model, image_size=(48, 40), classes=10, **TINY_BUILD)
    table = checkpoint_params()["Transformer/posembed_input/pos_embedding"]  # 4x4 grid + class token
    layer = model.get_layer("patch_encoder")
    quiet(utils.apply_embedding_weights, layer, table, num_x_patches=5, num_y_patches=6)
    np.testing.assert_allclose(layer.pos_embedding.numpy(), interpolate_posembed(table, (6, 5)), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="num_y_patches x num_x_patches = 5x6 but the layer's patch grid is 6x5"):
        quiet(utils.apply_embedding_weights, layer, table, num_x_patches=6, num_y_patches=5)
    with pytest.raises(ValueError, match="has no learned position embeddings; pass the model's 'patch_encoder'"):
        quiet(utils.apply_embedding_weights, model.get_layer("head"), table, 5, 6)


def test_load_weights_numpy_checks_the_grid_and_can_leave_the_head_fresh(tmp_path):
    np.savez(tmp_path / "c.npz", **checkpoint_params(classes=10))
    model = quiet(vit.build_model, image_size=32, classes=10, **TINY_BUILD)
    with pytest.raises(ValueError, match="num_y_patches x num_x_patches = 8x8 but the model's patch grid is 4x4"):
        quiet(utils.load_weights_numpy, model, tmp_path / "c.npz", True, 8, 8)
    quiet(utils.load_weights_numpy, model, tmp_path / "c.npz", False, 4, 4)
    assert not np.any(model.get_layer("head").kernel.numpy())
    np.testing.assert_array_equal(model.get_layer("patch_encoder").cls.numpy(), checkpoint_params(classes=10)["cls"])
