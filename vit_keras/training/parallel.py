"""Data and model parallelism on the JAX backend with `keras.distribution` (`tf.distribute` is the TensorFlow path).

`data_parallel()` replicates the model over the local devices and splits each batch; `model_parallel()` also
shards the Transformer blocks' weights Megatron-style (attention by heads, the MLP by its hidden units) over a
`model` mesh axis, for the variants too large for one device's memory. Pass either to `training.train(...,
distribution=...)`, or enter its `.scope()` around building, compiling and fitting a model yourself.

Example:
    >>> from vit_keras.training import parallel
    >>> distribution = parallel.data_parallel()
    >>> with distribution.scope():
    ...     model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
    ...                           mlp_dim=96)
"""

from __future__ import annotations

import keras

BATCH_AXIS, MODEL_AXIS = "batch", "model"


def _check_backend():
    if keras.backend.backend() != "jax":
        raise ValueError(
            f"keras.distribution runs on the JAX backend, not {keras.backend.backend()!r}: set KERAS_BACKEND=jax, "
            "or on TensorFlow pass a tf.distribute strategy (training.train(..., strategy=...))."
        )


def data_parallel(devices=None):
    """`keras.distribution.DataParallel` over `devices` (default: every local accelerator, else every CPU device).

    Example:
        >>> distribution = data_parallel()
        >>> distribution.device_mesh.shape == (len(keras.distribution.list_devices()),)
        True
    """
    _check_backend()
    return keras.distribution.DataParallel(devices=devices or keras.distribution.list_devices())


def vit_layout_map(device_mesh) -> keras.distribution.LayoutMap:
    """Shardings of a vit_keras ViT's weights over `device_mesh`'s `model` axis; other weights are replicated.

    Attention is split by heads (query/key/value kernels `(hidden, heads, head_dim)` on their heads axis, the
    output projection on its input heads axis), the MLP by its hidden units (first kernel by columns, second by
    rows), so each block needs one all-reduce after attention and one after the MLP. The number of heads and
    `mlp_dim` must be divisible by the `model` axis' size (12/16 heads for the paper's variants).

    Example:
        >>> mesh = keras.distribution.DeviceMesh((1, 2), (BATCH_AXIS, MODEL_AXIS), devices=["gpu:0", "gpu:1"])
        >>> vit_layout_map(mesh)["block_0/MultiHeadDotProductAttention_1/query/kernel"].axes
        (None, 'model', None)
    """
    layout_map = keras.distribution.LayoutMap(device_mesh)
    attention = ".*MultiHeadDotProductAttention.*"
    for projection in ("query", "key", "value"):
        layout_map[f"{attention}/{projection}/kernel"] = (None, MODEL_AXIS, None)
        layout_map[f"{attention}/{projection}/bias"] = (MODEL_AXIS, None)
    layout_map[f"{attention}/attention_output/kernel"] = (MODEL_AXIS, None, None)
    layout_map[".*MlpBlock.*/Dense_0/kernel"] = (None, MODEL_AXIS)
    layout_map[".*MlpBlock.*/Dense_0/bias"] = (MODEL_AXIS,)
    layout_map[".*MlpBlock.*/Dense_1/kernel"] = (MODEL_AXIS, None)
    return layout_map


def model_parallel(model_devices: int, devices=None):
    """`keras.distribution.ModelParallel`: `devices` in a `(batch, model)` mesh with `model_devices` on the model
    axis, the Transformer weights laid out by `vit_layout_map`, batches split over the batch axis.

    Example:
        >>> distribution = model_parallel(model_devices=2, devices=keras.distribution.list_devices()[:2])
        >>> distribution.device_mesh.shape, distribution.device_mesh.axis_names
        ((1, 2), ('batch', 'model'))

    Two devices are needed; on a CPU, `XLA_FLAGS=--xla_force_host_platform_device_count=2` gives JAX two.
    """
    _check_backend()
    devices = devices or keras.distribution.list_devices()
    if model_devices < 1 or len(devices) % model_devices:
        raise ValueError(
            f"model_devices={model_devices} must divide the {len(devices)} devices; the rest split the batch."
        )
    mesh = keras.distribution.DeviceMesh((len(devices) // model_devices, model_devices), (BATCH_AXIS, MODEL_AXIS),
                                         devices=devices)
    return keras.distribution.ModelParallel(layout_map=vit_layout_map(mesh), batch_dim_name=BATCH_AXIS)
