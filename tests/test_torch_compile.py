"""A ViT compiles under `torch.compile` as one graph: no graph break in vit_keras' layers.

Why it matters: when a frame breaks inside Keras' layer call (under its name and autocast scopes), torch._dynamo
gives that frame up and compiles every layer's call on its own instead. Keras' torch layers share one `forward`,
so the layers' different calls (float32 images and bfloat16 tokens, rank-4 patches and rank-3 tokens, 196 and 197
tokens, attention's two inputs, the `training` keyword) each take one of its 8 cached compilations; past them the
rest of every block runs op by op (measured on ViT-B/16 in bfloat16: 702 ms per batch of 16 against 601 with room
for every compilation). `fullgraph=True` makes any graph break an error, so this test names it.
"""

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHECK = textwrap.dedent("""
    import torch

    import vit_keras
    from tests.tiny import TINY

    # A classifier's setting (the last block for the class token) in bfloat16, and every token in float32.
    for policy, head_tokens_only in (("mixed_bfloat16", True), ("float32", False)):
        model = vit_keras.ViT(**{**TINY, "image_size": 32}, classes=10, include_preprocessing=False,
                              classifier_activation=None, head_tokens_only=head_tokens_only, dtype=policy)
        images = torch.rand(2, 32, 32, 3) * 2 - 1
        with torch.no_grad():
            logits = torch.compile(model, fullgraph=True)(images, training=False)
        print(policy, head_tokens_only, "one graph", tuple(logits.shape))
""")


@pytest.mark.slow
def test_a_vit_compiles_as_one_graph_under_torch_compile():
    env = dict(os.environ, KERAS_BACKEND="torch",
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    lines = [line for line in done.stdout.splitlines() if "one graph" in line]
    assert len(lines) == 2 and all(line.endswith("(2, 10)") for line in lines), done.stdout
