"""Speed and memory of vit_keras beside its peers, each at its best setting, measured in one run as ratios.

Every case (library x task x batch x precision x XLA / torch.compile) runs in a fresh process, so each has its
own peak RSS and no precision policy, XLA cache or thread pool leaks from one case into the next. All models are
ViT-B/16 at 224 px with random weights (weights do not change the speed) and compute the same thing, what an
image classifier serves: 1000-class logits from the class token (inference; training: a fine-tuning step on
them). vit_keras runs with `head_tokens_only=True`, its setting for such a classifier (the last block computes
the class token alone: the same logits, 7% fewer FLOPs); the report also gives vit_keras computing every token
of the last block ("all tokens", on TensorFlow at each XLA setting) so that the gain is visible. The same run
measures the machine's matmul peak (`tf.matmul`, n=2048, float32 and bfloat16, with and without XLA; at the start
and again at the end, the faster counting) and reports vit_keras' fraction of it; the CPU model and its
matmul-relevant flags head the report and the JSON.

    python scripts/benchmark.py                            # inference: batch 1 and 16, fp32 and bf16
    python scripts/benchmark.py --suite training           # fine-tune step: fp32 and bf16, XLA on and off
    python scripts/benchmark.py --suite attention          # the attention implementations and paths, one block
    python scripts/benchmark.py --suite naflex             # NaFlex batches padded to N=256 vs bucketed by length
    python scripts/benchmark.py --backends jax,torch       # the Keras libraries on Keras' other backends
    python scripts/benchmark.py --quick                    # a tiny model: checks the script in seconds
    python scripts/benchmark.py --json results.json        # also write every measurement
    python scripts/benchmark.py --dinov3                   # also DINOv3 ViT-B/16 in vit_keras and timm

Peers, each measured at every setting it has and reported at the best: keras-hub's `ViTBackbone`
(`pip install --no-deps keras-hub==0.32.0`; XLA on/off like vit_keras), timm's `VisionTransformer` (eager and
under `torch.compile`, which needs a C++ compiler on CPU), ONNX Runtime on timm's ONNX export (float32
inference; `pip install onnxruntime==1.31.1 onnx==1.23.2`, the `benchmark` extra) and the earlier Keras port
vit-keras 0.2.0, which imports as `vit_keras` too and so runs from its own directory (`--vit-keras-0.2.0-path`,
installed with `pip install --target DIR --no-deps vit-keras==0.2.0 validators opencv-python-headless`). A peer
that is not installed is reported as skipped. `make benchmark` installs them and runs the inference and training
suites.

DINOv3 (`--dinov3`): vit_keras and timm (`vit_base_patch16_dinov3`) also run DINOv3's ViT-B/16 (2-D RoPE on q and
k, 4 registers, LayerScale, no position table), each at the settings it has, in the same run as the plain ViT-B/16:
the report gives each library's DINOv3 images/s as a fraction of its own ViT-B/16's, the cost of RoPE and the
registers.

Keras' fit loop (`--suite training`): beside its `train_on_batch` rows, vit_keras runs `model.fit` over 8 batches
per call (2 with `--quick`) from host memory, fed as `vit_keras.training.train` feeds it (a `tf.data` pipeline on
TensorFlow, through the input path `vit_keras.training.device_prefetch` picks for the backend and hardware), at
each backend and setting. The report gives each fit row's images/s as a fraction of `train_on_batch` on a batch
already on the device at the same setting: what the fit loop and the input pipeline cost over the bare step.

NaFlex (`--suite naflex`): a flexible vit_keras ViT-B/16 (`flexible=True`) runs its forward pass (float32, batches
of `--batch-sizes`, default 8) over one fixed set of 32 images of mixed sizes and aspect ratios, once with every batch
padded to N=256 patches (`naflex_map(...).batch(...)`) and once bucketed by patch count (`naflex_buckets` at every
64 patches): images/s over the whole set and the share of the computed tokens that are padding. Two image sets:
"fit to N" (each image resized to fill the 256-patch budget, as SigLIP 2 and `vit-keras train --max-patches` do)
and "native size" (each image cut at its own size, from 64x64 to 256x256 px: 16 to 256 patches).

Inputs (`--inputs`, default both): every library is measured with its input where its users keep it, on the
device — timm's tensor, a `jax.Array` / `torch.Tensor` for the Keras libraries on JAX / PyTorch called through a
compiled function (`jax.jit` of `stateless_call`; the model under `torch.compile`) or `train_on_batch`, a
`tf.constant` on TensorFlow — and, in rows marked "from host", a NumPy batch copied over on every call (Keras'
`predict_on_batch` / `train_on_batch`, TensorFlow's `model.predict`, timm fed a NumPy array, ONNX Runtime always).
The comparison at each library's best uses the device rows; the from-host rows have a table of their own.

GPU: float32 rows run with TF32 matmuls off and on for every library (`--tf32`; PyTorch's `allow_tf32`, JAX's
default matmul precision, which is TF32 on Ampere and later); every row records whether TF32 was on. Training rows
give each library's MFU, its FLOPs per image (stated once at the top: `image_gflop`) times images/s over the matmul
peak measured in the same run. vit_keras' rows name the attention path their layers ran
(`vit_keras.layers.attention_path`); `--attention auto,keras` also measures vit_keras forced onto Keras' own path.
Without TensorFlow (a GPU machine with JAX and PyTorch only) its cases are reported as skipped, the matmul peak is
JAX's or PyTorch's, and the GPUs are named by PyTorch or JAX; `scripts/gpu_benchmark.sh` runs the GPU set.

Backends: vit_keras and keras-hub run on every Keras backend named by `--backends` (default: tensorflow, jax,
torch), each at its settings: TensorFlow with XLA on and off (a `tf.function` for inference, plus `model.predict`
with XLA to show what the Keras API costs on top), JAX always compiled (`jit`; un-jitted JAX runs op by op and
is no setting anyone deploys), PyTorch eager and with Keras' `jit_compile=True` (`torch.compile`). A library's
best is its fastest backend and setting; the report also gives vit_keras' best on each backend.

Runtimes: for float32 inference vit_keras is also measured exported, in the runtimes it exports to
(`--runtimes`, default all): TFLite (`vit_keras.export.tflite`, XNNPACK with one thread per core) in float32
and with dynamic-range int8 weights (`quantization="dynamic_int8"`), and ONNX Runtime on its own ONNX export
(`vit_keras.export.to_onnx`; needs tf2onnx, in the `benchmark` extra).
"""
