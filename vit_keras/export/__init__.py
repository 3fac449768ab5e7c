"""Ship a ViT: a SavedModel that TF Serving serves as it is, TFLite files for devices, ONNX for ONNX Runtime.

Example:
    >>> from vit_keras import export
    >>> model = tiny_model  # a trained 10-class ViT on 32x32 images
    >>> export.saved_model(model, "models/vit", version=1)
    'models/vit/1'
    >>> export.tflite(model, "vit.tflite")  # or quantization="int8" with a representative_dataset
    'vit.tflite'

`export.to_onnx(model, "vit.onnx")` writes the ONNX file the same way (see `vit_keras.export.onnx`).
"""

from vit_keras.export.compare import (
    AGREEMENT_TARGETS,
    DEFAULT_FORMATS,
    FORMATS,
    ExportCheck,
    export_and_compare,
    exported_predict,
    format_table,
    measure_agreement,
    measure_latency,
    path_size,
)
from vit_keras.export.lite import QUANTIZATIONS, non_builtin_operators, tflite, tflite_operators, tflite_predict
from vit_keras.export.naflex import naflex_saved_model, naflex_tflite, naflex_tflite_predict
from vit_keras.export.onnx import DEFAULT_OPSET, onnx_predict, onnx_session, to_onnx
from vit_keras.export.serving import saved_model, signature_summary
from vit_keras.export.signatures import BYTES_INPUT, IMAGES_INPUT, SERVE_BYTES, SERVING_DEFAULT, describe_model

__all__ = [
    "AGREEMENT_TARGETS",
    "BYTES_INPUT",
    "DEFAULT_FORMATS",
    "DEFAULT_OPSET",
    "FORMATS",
    "IMAGES_INPUT",
    "QUANTIZATIONS",
    "SERVE_BYTES",
    "SERVING_DEFAULT",
    "ExportCheck",
    "describe_model",
    "export_and_compare",
    "exported_predict",
    "format_table",
    "measure_agreement",
    "measure_latency",
    "naflex_saved_model",
    "naflex_tflite",
    "naflex_tflite_predict",
    "non_builtin_operators",
    "onnx_predict",
    "onnx_session",
    "path_size",
    "saved_model",
    "signature_summary",
    "tflite",
    "tflite_operators",
    "tflite_predict",
    "to_onnx",
]
