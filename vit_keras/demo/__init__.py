"""`python -m vit_keras.demo`: pre-train a small ViT on the bundled digits, fine-tune it at a higher resolution.

The whole path a user takes with a real dataset, offline and in a few minutes on a laptop CPU:

1. scikit-learn's digits served as the tfds dataset "vit_keras_digits" (no download; `digits`);
2. `pretrain` recipe (AdamW, weight decay, warmup, dropout 0.1) at 8x8 pixels with `vit_keras.training.train`
   (`stages`, on the model of `model`);
3. `finetune` recipe (SGD momentum, cosine, clip 1.0) at 12x12, both stages with label smoothing 0.1:
   `transfer_weights` resamples the position embeddings from the 4x4 to the 6x6 patch grid and starts a fresh
   zero-initialised head;
4. both stages validate on the last 10% of the training digits, held out from training (it picks each stage's
   `best.keras`); the demo goes on with the final weights and scores the 360 test digits once, at the end
   (`report`): top-1/top-5 accuracy (exit status 1 below 95%) and the few-shot linear probe; TensorBoard logs under
   `<output-dir>/*/logs`;
5. the demo steps in `DEMO_STEPS` (`steps`), each `step(model, data, output_dir)` with `data` a `DemoData`: saving
   a `.keras` file and reloading it with `safe_mode=True` must give identical predictions; exporting a TF Serving
   SavedModel and four TFLite files, with their agreement with Keras; the inspection figures.

`run` holds the command line that ties them together.

Example:
    $ python -m vit_keras.demo --output-dir demo_output
    $ python -m vit_keras.demo --output-dir /tmp/seed3 --seed 3 --threads 1 --train-only
    $ tensorboard --logdir demo_output
"""

from vit_keras.demo.digits import DATASET, digits_at, load_digits_rgb, test_arrays
from vit_keras.demo.digits_model import FINETUNE_SIZE, PATCH_SIZE, PRETRAIN_SIZE, build_demo_model
from vit_keras.demo.report import ACCURACY_BAR
from vit_keras.demo.run import build_parser, main
from vit_keras.demo.steps import DEMO_STEPS, DemoData, export_for_deployment, save_and_reload, write_inspection_figures

__all__ = [
    "ACCURACY_BAR",
    "DATASET",
    "DEMO_STEPS",
    "DemoData",
    "FINETUNE_SIZE",
    "PATCH_SIZE",
    "PRETRAIN_SIZE",
    "build_demo_model",
    "build_parser",
    "digits_at",
    "export_for_deployment",
    "load_digits_rgb",
    "main",
    "save_and_reload",
    "test_arrays",
    "write_inspection_figures",
]
