"""What a run can measure: the networks (ViT-B/16 and a tiny one for `--quick`, DINOv3's), the libraries,
Keras backends, runtimes and precisions, and the FLOPs each network costs per image."""

from __future__ import annotations

import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "benchmark.py")  # the command line, which also runs each case's worker
ARCHITECTURES = {
    "B/16": dict(image_size=224, patch_size=16, hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072),
    # --quick: small enough to run every case in seconds; it checks the script, not the libraries.
    "tiny": dict(image_size=64, patch_size=16, hidden_size=64, num_layers=2, num_heads=2, mlp_dim=128),
}
LIBRARIES = ("vit_keras", "keras-hub", "vit-keras-0.2.0", "timm", "onnxruntime")
# The networks: the paper's ViT, and DINOv3's (timm `vit_base_patch16_dinov3`; vit_keras `ViTConfig` fields).
MODELS = ("vit", "dinov3")
DINOV3_LIBRARIES = ("vit_keras", "timm")
DINOV3 = dict(rope="rotate_half", num_register_tokens=4, layer_scale=True, qkv_bias=False, position_embedding="none",
              activation="gelu", layer_norm_epsilon=1e-5)
KERAS_LIBRARIES = ("vit_keras", "keras-hub", "vit-keras-0.2.0")
BACKENDS = ("tensorflow", "jax", "torch")
MULTI_BACKEND = ("vit_keras", "keras-hub")  # vit-keras 0.2.0 is written for TensorFlow only
RUNTIMES = ("keras", "tflite", "tflite_int8", "onnxruntime")  # how vit_keras runs: Keras itself, or exported
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16", "float16": "mixed_float16"}
CLASSES = 1000
MATMUL = "tf.matmul"
PEAK_LIBRARIES = {"tensorflow": MATMUL, "jax": "jax.numpy.matmul", "torch": "torch.matmul"}
PEAK_PRECISIONS = ("float32", "bfloat16")  # the matmul peak is measured for these


def forward_gflop(arch, head_tokens_only=False, prefix_tokens=1) -> float:
    """GFLOP of one image's forward pass (multiply-adds x 2): patch embedding, then per layer the QKV, attention
    logits and mix, output projection and MLP; the head is left out. ViT-B/16 at 224: 35.1, and 32.7 when the
    last block computes the class token alone (its keys and values still come from all 197 tokens).
    `prefix_tokens`: tokens before the patches (DINOv3: the class token and 4 registers; RoPE adds no matmul).

    Example:
        >>> round(forward_gflop(ARCHITECTURES["B/16"]), 1), round(forward_gflop(ARCHITECTURES["B/16"], True), 1)
        (35.1, 32.7)
    """
    width, mlp, patch = arch["hidden_size"], arch["mlp_dim"], arch["patch_size"]
    patches = (arch["image_size"] // patch) ** 2
    tokens = patches + prefix_tokens

    def layer(queries):
        return 2 * tokens * width * 2 * width + 2 * queries * width * width + 2 * 2 * queries * tokens * width \
            + 2 * queries * width * width + 2 * 2 * queries * width * mlp

    embedding = 2 * patches * (patch * patch * 3) * width
    last = layer(1 if head_tokens_only else tokens)
    return (embedding + (arch["num_layers"] - 1) * layer(tokens) + last) / 1e9


def image_gflop(arch, task, head_tokens_only=False, model="vit") -> float:
    """GFLOP per image of `task`: the forward pass, or forward + backward (3x) for a training step."""
    prefix_tokens = 1 + DINOV3["num_register_tokens"] if model == "dinov3" else 1
    return forward_gflop(arch, head_tokens_only, prefix_tokens) * (3 if task == "training" else 1)
