"""Quantization-aware training: fine-tune a ViT under int8 rounding, then export a full-integer TFLite file.

Example:
    >>> from vit_keras import export
    >>> from vit_keras.quantization import quantize_aware
    >>> qat = quantize_aware(tiny_model)  # a float model, e.g. fine-tuned on your data
    >>> qat.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    >>> _ = qat.fit(images, labels, batch_size=4, verbose=0)  # a few epochs at a low learning rate in practice
    >>> export.tflite(qat, "vit_qat_int8.tflite", quantization="int8")
    'vit_qat_int8.tflite'
"""

from vit_keras.quantization.layers import (
    ActivationRange,
    FakeQuantDense,
    FakeQuantEinsumDense,
    fake_quant,
    fake_quant_kernel,
)
from vit_keras.quantization.qat_model import (
    QuantizeAwareModel,
    activation_ranges,
    calibrate,
    check_learned_ranges,
    fake_quant_layers,
    is_quantize_aware,
    quantize_aware,
)

__all__ = [
    "ActivationRange",
    "FakeQuantDense",
    "FakeQuantEinsumDense",
    "QuantizeAwareModel",
    "activation_ranges",
    "calibrate",
    "check_learned_ranges",
    "fake_quant",
    "fake_quant_kernel",
    "fake_quant_layers",
    "is_quantize_aware",
    "quantize_aware",
]
