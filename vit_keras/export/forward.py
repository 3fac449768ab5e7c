"""The model's forward pass as a TensorFlow callable, whatever Keras backend built it.

SavedModel and TFLite files are TensorFlow graphs. Under the TensorFlow backend the model is called as it is;
under JAX its stateless call is converted with `jax2tf` (StableHLO inside an `XlaCallModule` op, which TF Serving
runs and the TFLite converter lowers to builtin ops), with the weights copied into `tf.Variable`s. The PyTorch
backend has no TensorFlow conversion here: its models are exported from the TensorFlow backend after `load_model`.
"""

from __future__ import annotations

import keras

TORCH_EXPORT_FIX = (
    "save the model (model.save('vit.keras')), then load and export it in a Python process started with "
    "KERAS_BACKEND=tensorflow (keras.models.load_model('vit.keras', safe_mode=True)); export.to_onnx does that "
    "by itself"
)


def tensorflow_forward(model, image_size, batch_size=None):
    """`(forward, variables)`: `forward(images)` runs `model` on a float32 `tf.Tensor` (batch, H, W, 3) inside a
    `tf.function`, and `variables` are the `tf.Variable`s it reads (for the `tf.Module` that saves it).

    Args:
        model: a built Keras model.
        image_size: (height, width) of its input.
        batch_size: None for any batch; a fixed int makes the converted graph static (the TFLite converter needs
            that for a JAX model, whose dynamic-batch gathers it cannot lower).

    Example:
        >>> import tensorflow as tf
        >>> forward, variables = tensorflow_forward(tiny_model, (32, 32))  # a 10-class ViT on 32x32 images
        >>> tf.function(forward)(tf.zeros((1, 32, 32, 3))).shape
        TensorShape([1, 10])
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        return (lambda images: model(images, training=False)), list(model.variables)
    if backend == "jax":
        return _jax_forward(model, image_size, batch_size)
    raise ValueError(
        f"SavedModel and TFLite export run under the TensorFlow and JAX backends, not {backend!r} "
        f"(KERAS_BACKEND); {TORCH_EXPORT_FIX}."
    )


def _jax_forward(model, image_size, batch_size):
    import tensorflow as tf
    from jax.experimental import jax2tf

    def as_tf_variables(variables):
        return [
            tf.Variable(keras.ops.convert_to_numpy(v.value), trainable=False, name=v.path.replace("/", "_"))
            for v in variables
        ]

    trainable = as_tf_variables(model.trainable_variables)
    non_trainable = as_tf_variables(model.non_trainable_variables)

    def stateless_forward(trainable_values, non_trainable_values, images):
        outputs, _ = model.stateless_call(trainable_values, non_trainable_values, images, training=False)
        return outputs

    batch = "batch" if batch_size is None else str(int(batch_size))
    height, width = image_size
    converted = jax2tf.convert(
        stateless_forward,
        polymorphic_shapes=[None, None, f"({batch}, {height}, {width}, 3)"],  # weights static, batch symbolic
        with_gradient=False,
    )

    def forward(images):
        return converted(trainable, non_trainable, images)

    return forward, trainable + non_trainable
