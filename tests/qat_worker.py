"""The fake-quantized matmuls' outputs and gradients on one Keras backend (KERAS_BACKEND, set by tests/test_qat.py).

Each case (a `Dense` on tokens and the two `EinsumDense` layouts of an attention: a query projection, an output
projection) is built from fixed weights, inputs and ranges, made fake-quantized, and run forward; the gradient of
`sum(outputs * upstream)` with respect to the input, the kernel and the bias is taken with the backend's own
autodiff. Then a tiny quantization-aware ViT trains two steps and reloads (`train_and_reload`). Written to
`<out>/<backend>.npz` as `<case>/<name>` and `model/<name>`.

Example:
    KERAS_BACKEND=jax python -m tests.qat_worker /tmp/out
"""

import sys

import numpy as np

# name: (layer factory arguments, input shape). Ranges are narrower than the data, so that inputs and outputs fall
# outside them and the straight-through gradient's zeros are exercised too.
CASES = {
    "dense": (("Dense", dict(units=6)), (2, 5, 8)),
    "query": (("EinsumDense", dict(equation="abc,cde->abde", output_shape=(None, 2, 3), bias_axes="de")), (2, 5, 8)),
    "output": (("EinsumDense", dict(equation="abcd,cde->abe", output_shape=(None, 8), bias_axes="e")), (2, 5, 2, 3)),
}
INPUT_RANGE = (-1.5, 2.0)
OUTPUT_RANGE = (-2.0, 1.5)


def case_arrays(name):
    """The fixed input, upstream gradient, kernel and bias of case `name` (NumPy, float32)."""
    (_, _), shape = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    return rng.normal(0, 1.2, shape).astype("float32"), rng


def build_case(name):
    import keras

    from vit_keras.quantization.layers import make_fake_quant

    (kind, arguments), shape = CASES[name]
    x, rng = case_arrays(name)
    layer = getattr(keras.layers, kind)(**arguments)
    layer.build(shape)
    layer.kernel.assign(rng.normal(0, 0.5, layer.kernel.shape).astype("float32"))
    layer.bias.assign(rng.normal(0, 0.1, layer.bias.shape).astype("float32"))
    make_fake_quant(layer)
    for activation_range, (low, high) in ((layer.input_range, INPUT_RANGE), (layer.output_range, OUTPUT_RANGE)):
        activation_range.minimum.assign(low)
        activation_range.maximum.assign(high)
    # Small, so that the gradients (sums of upstream x input) stay near 1, where float32 steps are 1.2e-7.
    upstream = rng.normal(0, 0.1, tuple(layer(x).shape)).astype("float32")
    return layer, x, upstream


def run_case(name) -> dict:
    """`{outputs, d_inputs, d_kernel, d_bias, kernel, bias}` on the current backend."""
    import keras

    layer, x, upstream = build_case(name)
    backend = keras.backend.backend()
    kernel, bias = (keras.ops.convert_to_numpy(v) for v in (layer.kernel, layer.bias))
    if backend == "tensorflow":
        import tensorflow as tf

        inputs = tf.constant(x)
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = layer(inputs)
            loss = tf.reduce_sum(outputs * upstream)
        grads = tape.gradient(loss, [inputs, layer.kernel.value, layer.bias.value])
    elif backend == "jax":
        import jax

        def loss_fn(trainable, inputs):
            outputs, _ = layer.stateless_call(trainable, [v.value for v in layer.non_trainable_variables], inputs)
            return (outputs * upstream).sum(), outputs

        trainable = [v.value for v in layer.trainable_variables]
        (_, outputs), (d_trainable, d_inputs) = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(
            trainable, jax.numpy.asarray(x))
        by_name = {v.name: g for v, g in zip(layer.trainable_variables, d_trainable)}
        grads = [d_inputs, by_name["kernel"], by_name["bias"]]
    else:
        import torch

        inputs = torch.tensor(x, requires_grad=True)
        outputs = layer(inputs)
        (outputs * torch.tensor(upstream)).sum().backward()
        grads = [inputs.grad, layer.kernel.value.grad, layer.bias.value.grad]
    values = [outputs, *grads]
    values = [v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v) for v in values]
    return dict(zip(("outputs", "d_inputs", "d_kernel", "d_bias"), values), kernel=kernel, bias=bias,
                upstream=upstream, inputs=x)


def train_and_reload(out) -> dict:
    """A tiny ViT (its head zero-initialised, as built) made quantization-aware, trained two steps with `fit`,
    saved and reloaded in safe mode: its ranges, and whether the reloaded model predicts identically."""
    import os

    import keras

    from tests.model_kinds import build, images
    from vit_keras.quantization import activation_ranges, quantize_aware

    qat = quantize_aware(build("vit"))
    x = images(8)
    qat.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    qat.fit(x, np.arange(8) % 5, batch_size=4, epochs=1, verbose=0)
    path = os.path.join(out, "qat.keras")
    qat.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    ranges = activation_ranges(qat)
    same = np.array_equal(keras.ops.convert_to_numpy(reloaded(x)), keras.ops.convert_to_numpy(qat(x)))
    return {"model/ranges": np.array([ranges[name] for name in sorted(ranges)]),
            "model/reload_identical": np.array(same and activation_ranges(reloaded) == ranges)}


def main(out):
    import os

    import keras

    results = {f"{name}/{key}": value for name in CASES for key, value in run_case(name).items()}
    results.update(train_and_reload(out))
    np.savez(os.path.join(out, f"{keras.backend.backend()}.npz"), **results)
    print(f"KERAS_BACKEND={keras.backend.backend()} wrote {len(results)} arrays")


if __name__ == "__main__":
    main(sys.argv[1])
