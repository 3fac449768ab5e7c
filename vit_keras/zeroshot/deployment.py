"""A zero-shot model as one SavedModel that TensorFlow loads without vit_keras (`tf.saved_model.load`, TF Serving).

Signatures (images are RGB in [0, 255]; the features are projected, not normalised, as `ZeroShotModel`'s; `texts`
are UTF-8 strings, tokenized inside the graph by the checkpoint's own tokenizer, `vit_keras.zeroshot.graph_tokenizer`):

- `encode_image`: `images` float32 (batch, H, W, 3) → `image_features`.
- `encode_image_bytes`: `image_bytes` string (batch,), encoded JPEG/PNG/GIF/BMP → `image_features`. A model of a
  fixed image size gets each image resized as `vit_keras.export` does (bilinear, no crop); a model of any image
  size (SigLIP 2 NaFlex) gets each image at its own aspect ratio, resized to at most `max_num_patches` patches as
  `naflex_saved_model` and SigLIP 2's processor do (bilinear, antialiased; `naflex_size`), one image at a time. A
  request with an image that cannot be decoded fails as a whole.
- `encode_text`: `texts` string (batch,) → `text_features`.
- `tokenize`: `texts` → `token_ids`, `attention_mask` int32 (batch, context_length), as `ZeroShotModel.tokenize`.
- `classify`: `images`, `texts` → `logits_per_image` (batch, texts) and `scores` (softmax over the texts for CLIP,
  a sigmoid per text for SigLIP); `classify_image_bytes`: the same from `image_bytes`.
- `encode_token_ids` and `classify_token_ids`: the same from `token_ids`, `attention_mask` int32 (batch,
  T ≤ context) instead of strings, for clients that tokenize themselves.
- `classify_labels` (when `class_names` are given at export): `images` → `scores` (batch, classes) over the class
  names, their text features (with `templates`, the prompt ensemble) computed once at export; `labels` string
  (classes,) and `top_labels` string (batch,) name them.

`strings=False` leaves out the string signatures (`encode_text`, `tokenize`, `classify`, `classify_image_bytes`),
for a tokenizer whose pipeline has no TensorFlow form (the export says which part) or a model without a tokenizer.

Written to a temporary directory beside `export_dir` and renamed into place. Exported from the TensorFlow backend.

`tflite(model, directory)` writes one TFLite file per tower (`image.tflite`, `text.tflite`), float32; the TFLite
text tower takes token ids.

Example (an export takes seconds; tests/test_zeroshot_export.py runs it)::

    m = zeroshot.from_pretrained("tests/fixtures/zeroshot/clip/checkpoint")
    saved_model(m, "clip_savedmodel", class_names=["cat", "dog"])
    served = tf.saved_model.load("clip_savedmodel").signatures
    served["classify_image_bytes"](image_bytes=tf.constant([open("cat.jpg", "rb").read()]),
                                   texts=tf.constant(["a photo of a cat", "a photo of a dog"]))["scores"]
"""

from __future__ import annotations

import os

import keras

from vit_keras.zeroshot.text import ATTENTION_MASK, TOKEN_IDS

IMAGES = "images"
IMAGE_BYTES = "image_bytes"
TEXTS = "texts"
# The patch budget of a model of any image size (SigLIP 2 NaFlex) when none is given: Siglip2ImageProcessor's.
DEFAULT_MAX_NUM_PATCHES = 256


def _check(model) -> None:
    if keras.backend.backend() != "tensorflow":
        raise ValueError("vit_keras.zeroshot.deployment writes a TensorFlow SavedModel from the TensorFlow backend; "
                         "save the towers (m.image_model.save('image.keras'), m.text_model.save('text.keras')) or run "
                         "the export in a process started with KERAS_BACKEND=tensorflow.")
    shape = model.image_model.input_shape
    if isinstance(shape, dict) or isinstance(model.image_model.input, dict):
        raise ValueError("The NaFlex (flexible=True) image model takes a dict of patches; export a model built with "
                         "flexible=False, which takes images.")
    if not model.include_preprocessing:
        raise ValueError("The image model was built with include_preprocessing=False; the SavedModel takes RGB in "
                         "[0, 255]: build it with vit_keras.zeroshot.from_pretrained(..., include_preprocessing=True).")


def _any_size_image_decoder(model, max_num_patches: int, max_pixels: int):
    """Encoded images → image features (batch, E) for a model of any image size: each image decoded, resized to its
    own aspect ratio at most `max_num_patches` patches, and run alone (the sizes differ, so they cannot stack)."""
    import tensorflow as tf

    from vit_keras.export.image_bytes import check_encoded_image
    from vit_keras.preprocessing import check_max_num_patches, naflex_size_graph

    if model.patch_size is None:
        raise ValueError("This model takes images of any size, and its vision config names no patch_size to size "
                         "them by: export it with a fixed size, vit_keras.zeroshot.from_pretrained(..., "
                         "image_size=(height, width)).")
    patch_size = int(model.patch_size)
    max_num_patches = check_max_num_patches(max_num_patches, patch_size)
    width = int(model.image_model.output_shape[-1])

    def features(data):
        data = check_encoded_image(data, max_pixels)
        image = tf.io.decode_image(data, channels=3, expand_animations=False, dtype=tf.uint8)
        height, width_ = naflex_size_graph(tf.shape(image)[0], tf.shape(image)[1], patch_size, max_num_patches)
        image = tf.image.resize(tf.cast(image, tf.float32), tf.stack([height, width_]), method="bilinear",
                                antialias=True)
        return model.image_model(image[None], training=False)[0]

    def decode(image_bytes):
        return tf.map_fn(features, image_bytes, fn_output_signature=tf.TensorSpec((width,), tf.float32))

    return decode


def build_module(model, class_names=None, templates=None, max_image_pixels=None, strings: bool = True,
                 max_text_length=None, max_num_patches=None):
    """`(module, signatures)`: a `tf.Module` holding the towers' variables, the tokenizer's tables and the serving
    `tf.function`s."""
    import tensorflow as tf

    from vit_keras.export.image_bytes import decode_images
    from vit_keras.probabilities import probabilities
    from vit_keras.zeroshot.graph_tokenizer import GraphTokenizer

    _check(model)
    image_size = model.image_size
    module = tf.Module(name="zeroshot_serving")
    if strings:
        if model.tokenizer is None:
            raise ValueError("This model has no tokenizer, so the SavedModel cannot take strings; export with "
                             "strings=False (token ids) or load the model with its tokenizer.json.")
        module.tokenizer = GraphTokenizer.from_tokenizer(
            model.tokenizer, **({} if max_text_length is None else {"max_text_length": max_text_length}))
        model_reads_mask = model.tokenizer.return_mask

    def image_features(images):
        return model.image_model(images, training=False)

    def text_features(ids, mask):
        return model.text_model({TOKEN_IDS: ids, ATTENTION_MASK: mask}, training=False)

    def string_features(texts):
        ids, mask = module.tokenizer(texts)
        # as ZeroShotModel.encode_text: a tokenizer that gives no mask (SigLIP) means every position is read
        return text_features(ids, mask if model_reads_mask else tf.ones_like(mask))

    def scored(logits):
        return {"logits_per_image": logits,
                "scores": probabilities(logits, model.probabilities, ops=tf.nn)}

    height, width = (None, None) if image_size is None else image_size
    images_spec = tf.TensorSpec((None, height, width, 3), tf.float32, name=IMAGES)
    bytes_spec = tf.TensorSpec((None,), tf.string, name=IMAGE_BYTES)
    texts_spec = tf.TensorSpec((None,), tf.string, name=TEXTS)
    ids_spec = tf.TensorSpec((None, None), tf.int32, name=TOKEN_IDS)
    mask_spec = tf.TensorSpec((None, None), tf.int32, name=ATTENTION_MASK)
    functions = {}

    @tf.function(input_signature=[images_spec], autograph=False)
    def encode_image(images):
        return {"image_features": image_features(images)}

    @tf.function(input_signature=[ids_spec, mask_spec], autograph=False)
    def encode_token_ids(token_ids, attention_mask):
        return {"text_features": text_features(token_ids, attention_mask)}

    @tf.function(input_signature=[images_spec, ids_spec, mask_spec], autograph=False)
    def classify_token_ids(images, token_ids, attention_mask):
        return scored(model.logits_layer(image_features(images), text_features(token_ids, attention_mask)))

    functions.update(encode_image=encode_image, encode_token_ids=encode_token_ids,
                     classify_token_ids=classify_token_ids)
    if strings:
        @tf.function(input_signature=[texts_spec], autograph=False)
        def encode_text(texts):
            return {"text_features": string_features(texts)}

        @tf.function(input_signature=[texts_spec], autograph=False)
        def tokenize(texts):
            ids, mask = module.tokenizer(texts)
            return {TOKEN_IDS: ids, ATTENTION_MASK: mask}

        @tf.function(input_signature=[images_spec, texts_spec], autograph=False)
        def classify(images, texts):
            return scored(model.logits_layer(image_features(images), string_features(texts)))

        functions.update(encode_text=encode_text, tokenize=tokenize, classify=classify)
    from vit_keras.images import max_image_pixels as default_max_pixels

    limit = default_max_pixels() if max_image_pixels is None else int(max_image_pixels)
    if image_size is not None:
        if max_num_patches is not None:
            raise ValueError(f"max_num_patches={max_num_patches} sizes the images of a model of any image size "
                             f"(SigLIP 2 NaFlex); this one takes {image_size[0]}x{image_size[1]} images: drop it.")

        def bytes_features(image_bytes):
            return image_features(decode_images(image_bytes, image_size, limit))
    else:
        bytes_features = _any_size_image_decoder(
            model, DEFAULT_MAX_NUM_PATCHES if max_num_patches is None else max_num_patches, limit)

    @tf.function(input_signature=[bytes_spec], autograph=False)
    def encode_image_bytes(image_bytes):
        return {"image_features": bytes_features(image_bytes)}

    functions["encode_image_bytes"] = encode_image_bytes
    if strings:
        @tf.function(input_signature=[bytes_spec, texts_spec], autograph=False)
        def classify_image_bytes(image_bytes, texts):
            return scored(model.logits_layer(bytes_features(image_bytes), string_features(texts)))

        functions["classify_image_bytes"] = classify_image_bytes
    if class_names is not None:
        names = list(class_names)
        class_features = tf.constant(model.class_text_features(names, templates), tf.float32)
        labels = tf.constant(names, tf.string)
        module.class_features = class_features

        @tf.function(input_signature=[images_spec], autograph=False)
        def classify_labels(images):
            class_scores = scored(model.logits_layer(image_features(images), class_features))["scores"]
            return {"scores": class_scores, "labels": labels,
                    "top_labels": tf.gather(labels, tf.argmax(class_scores, axis=-1))}

        functions["classify_labels"] = classify_labels
    # The towers' variables, not the Keras models: a compiled model would drag its optimizer state along.
    module.model_variables = [*model.image_model.variables, *model.text_model.variables,
                              *model.logits_layer.variables]
    for name, function in functions.items():
        setattr(module, name, function)
    return module, functions


def saved_model(model, export_dir, *, class_names=None, templates=None, overwrite: bool = False,
                max_image_pixels=None, strings: bool = True, max_text_length=None, max_num_patches=None) -> str:
    """Write the SavedModel of `model` (a `ZeroShotModel` built with `include_preprocessing=True`) to
    `export_dir` and return its path; `class_names` (and `templates`) add `classify_labels`; `strings=False`
    leaves out the signatures that take text as strings; `max_text_length`: the most characters a text may have
    (default `graph_tokenizer.MAX_TEXT_LENGTH`, 2,048), a bound on a request's cost; `max_num_patches`: for a model
    of any image size (SigLIP 2 NaFlex), the most patches the bytes signatures resize an image to (default 256,
    SigLIP 2's processor's)."""
    import tensorflow as tf

    from vit_keras.files import atomic_directory

    export_dir = os.fspath(export_dir)
    if class_names is not None and not list(class_names):
        raise ValueError("class_names is empty; pass the labels classify_labels should score, or None.")
    module, functions = build_module(model, class_names, templates, max_image_pixels, strings=strings,
                                     max_text_length=max_text_length, max_num_patches=max_num_patches)
    with atomic_directory(export_dir, overwrite=overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures=functions)
    return export_dir



IMAGE_TFLITE = "image.tflite"
TEXT_TFLITE = "text.tflite"


def tflite(model, directory, *, overwrite: bool = False) -> dict:
    """One float32 TFLite file per tower in `directory` (builtin ops only): `image.tflite` (`images` float32
    (batch, H, W, 3), RGB in [0, 255] → `features`, as `vit_keras.export.tflite` writes it) and `text.tflite`
    (`token_ids`, `attention_mask` int32 (batch, context_length) → `text_features`: pad to the context length, as
    `ZeroShotModel.tokenize` does). The logits are `exp(logit_scale) · cosine (+ logit_bias)` of their outputs
    (`text_tflite_predict`, `ZeroShotModel.logits`). Needs a fixed image size: build SigLIP 2 with
    `image_size=(height, width)`. Returns `{"image": path, "text": path}`.
    """
    import tensorflow as tf

    from vit_keras.export.lite import tflite as image_tflite
    from vit_keras.export.lite import write_tflite
    from vit_keras.files import atomic_directory

    _check(model)
    if model.image_size is None:
        raise ValueError("TFLite needs a fixed image size; build the model with "
                         "vit_keras.zeroshot.from_pretrained(..., image_size=(height, width)).")
    context = model.context_length
    module = tf.Module(name="zeroshot_text_tflite")
    module.model_variables = list(model.text_model.variables)

    @tf.function(input_signature=[tf.TensorSpec((None, context), tf.int32, name=TOKEN_IDS),
                                  tf.TensorSpec((None, context), tf.int32, name=ATTENTION_MASK)], autograph=False)
    def serve(token_ids, attention_mask):
        return {"text_features": model.text_model({TOKEN_IDS: token_ids, ATTENTION_MASK: attention_mask},
                                                  training=False)}

    module.serve = serve
    directory = os.fspath(directory)
    with atomic_directory(directory, overwrite=overwrite) as tmp:
        image_tflite(model.image_model, os.path.join(tmp, IMAGE_TFLITE), include_preprocessing=True)
        write_tflite(module, serve, os.path.join(tmp, TEXT_TFLITE))
    return {"image": os.path.join(directory, IMAGE_TFLITE), "text": os.path.join(directory, TEXT_TFLITE)}


def text_tflite_predict(path, token_ids, attention_mask=None, num_threads=None):
    """Run `text.tflite` from `tflite()` on token ids (texts, context_length) with ai_edge_litert; the text
    features, float32 (texts, E). `attention_mask` None: every position is real (SigLIP)."""
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter

    token_ids = np.asarray(token_ids, np.int32)
    mask = np.ones_like(token_ids) if attention_mask is None else np.asarray(attention_mask, np.int32)
    interpreter = Interpreter(model_path=os.fspath(path), num_threads=num_threads)
    context = int(interpreter.get_input_details()[0]["shape_signature"][1])
    if token_ids.ndim != 2 or token_ids.shape[1] != context or mask.shape != token_ids.shape:
        raise ValueError(f"{os.fspath(path)!r} takes token_ids and attention_mask of shape (texts, {context}); got "
                         f"{token_ids.shape} and {mask.shape}. Tokenize with ZeroShotModel.tokenize.")
    for detail in interpreter.get_input_details():
        interpreter.resize_tensor_input(detail["index"], list(token_ids.shape))
    interpreter.allocate_tensors()
    runner = interpreter.get_signature_runner("serving_default")
    return np.asarray(runner(token_ids=token_ids, attention_mask=mask)["text_features"])
