"""The demo steps that run on the trained model: save and reload, export for deployment, inspection figures.

Each step takes (model, `DemoData`, output directory); add one by appending a function to `DEMO_STEPS`.

Example:
    >>> [step.__name__ for step in DEMO_STEPS]
    ['save_and_reload', 'export_for_deployment', 'write_inspection_figures']
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np


@dataclasses.dataclass(frozen=True)
class DemoData:
    """What the demo steps get besides the model: held-out images and labels, and training images.

    Images are float32 RGB in [0, 255] at the fine-tuning resolution, as the eval pipeline feeds them.
    """

    test_images: np.ndarray
    test_labels: np.ndarray
    train_images: np.ndarray


def save_and_reload(model, data: DemoData, output_dir) -> dict:
    """Demo step: save `.keras`, reload with `safe_mode=True`, demand identical predictions.

    Example:
        >>> from vit_keras.demo import build_demo_model, test_arrays
        >>> images, labels = test_arrays(16)
        >>> data = DemoData(images[:8], labels[:8], images[:8])
        >>> model = build_demo_model(image_size=16, num_layers=1)
        >>> os.makedirs("demo_output")
        >>> save_and_reload(model, data, "demo_output")
        saved demo_output/vit_digits.keras; reloaded with safe_mode=True: identical predictions
        {'saved': 'demo_output/vit_digits.keras', 'identical': True}
    """
    import keras

    test_images = data.test_images
    path = os.path.join(output_dir, "vit_digits.keras")
    model.save(path)
    reloaded = keras.models.load_model(path, safe_mode=True)
    same = bool(np.array_equal(model.predict_on_batch(test_images), reloaded.predict_on_batch(test_images)))
    print(f"saved {path}; reloaded with safe_mode=True: {'identical' if same else 'DIFFERENT'} predictions")
    if not same:
        raise RuntimeError("The reloaded model predicts differently from the saved one.")
    return {"saved": path, "identical": same}


def export_for_deployment(model, data: DemoData, output_dir) -> list:
    """Demo step: a TF Serving SavedModel and float32/float16/dynamic-int8/int8 TFLite files, checked against Keras.

    Full int8 is calibrated on training digits, never on the held-out ones it is then scored on.

    Example (about a minute for the demo's model: five conversions, and int8 calibration)::

        rows = export_for_deployment(model, data, "demo_output")
    """
    from vit_keras import export

    rows = export.export_and_compare(
        model,
        data.test_images,
        os.path.join(output_dir, "export"),
        labels=data.test_labels,
        representative_dataset=data.train_images[:200],
        class_names=[str(digit) for digit in range(10)],
    )
    missed = [row.format for row in rows if row.meets_target is False]
    if missed:
        raise RuntimeError(f"Exported formats below their top-1 agreement target: {missed}.")
    return rows


def write_inspection_figures(model, data: DemoData, output_dir) -> list:
    """Demo step: the paper's four analyses of the trained model, as PNGs under `<output_dir>/inspection`.

    Example:
        >>> from vit_keras.demo import build_demo_model, test_arrays
        >>> images, labels = test_arrays(16)
        >>> data = DemoData(images[:4], labels[:4], images[:4])
        >>> model = build_demo_model(image_size=16, num_layers=1)
        >>> len(write_inspection_figures(model, data, "demo_output"))
        inspection figures: demo_output/inspection/attention_maps.png, ...
        4
    """
    from vit_keras.inspection import write_figures

    paths = write_figures(model, data.test_images[:64], os.path.join(output_dir, "inspection"))
    print("inspection figures: " + ", ".join(paths))
    return paths


# Each step takes (model, DemoData, output directory); add one by appending a function.
DEMO_STEPS = [save_and_reload, export_for_deployment, write_inspection_figures]
