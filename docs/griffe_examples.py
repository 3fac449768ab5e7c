"""Griffe extension for the API pages' examples.

- The package's docstrings head their doctests `Example:`, which Google style (as griffe reads it) knows only as
  `Examples:`; without the rename, the doctest lines would be rendered as Markdown prose.
- The doctests run with names made by the doctest setup (`tests/doctest_setup.py`: `np`, `keras`, `vit_keras`,
  `tiny_model`, `images`, `digits`, `tflite_file`, ...). A reader has no such setup, so an example that uses one of
  them is shown with the lines that define it first, under a `# Setup` comment: every example on the site defines
  what it uses. `SETUP` holds those lines; tests/test_docs.py checks them against the doctest setup.
"""

import re

import griffe

EXAMPLE_HEADING = re.compile(r"^(\s*)Example:[ \t]*$", re.MULTILINE)
SECTION_HEADING = re.compile(r"^(\s*)Examples:[ \t]*\n", re.MULTILINE)

# Name -> the doctest lines that define it (as the doctest setup does), in the order they must run.
SETUP = {
    "np": ["import numpy as np"],
    "keras": ["import keras"],
    "vit_keras": ["import vit_keras"],
    "tiny_model": ["tiny_model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2,",
                   "                          num_heads=3, mlp_dim=96, classes=10)"],
    "images": ['images = np.random.default_rng(0).uniform(0, 255, (8, 32, 32, 3)).astype("float32")'],
    "labels": ["labels = np.arange(8) % 10"],
    "digits": ["import tensorflow as tf",
               "from vit_keras.datasets.digits import digits_arrays",
               'digits = vit_keras.data.load(tf.data.Dataset.from_tensor_slices(digits_arrays("train")),',
               "                             num_classes=10)"],
    "digits_test": ["import tensorflow as tf",
                    "from vit_keras.datasets.digits import digits_arrays",
                    'digits_test = vit_keras.data.load(tf.data.Dataset.from_tensor_slices(digits_arrays("test")),',
                    "                                  num_classes=10)"],
    "saved_model_dir": ['saved_model_dir = vit_keras.export.saved_model(tiny_model, "saved_model", version=1)'],
    "tflite_file": ['tflite_file = vit_keras.export.tflite(tiny_model, "vit.tflite")'],
    "onnx_file": ['onnx_file = vit_keras.export.to_onnx(tiny_model, "vit.onnx")'],
}
# What a name's definition itself uses.
NEEDS = {"tiny_model": ("vit_keras",), "images": ("np",), "labels": ("np",), "digits": ("vit_keras",),
         "digits_test": ("vit_keras",), "saved_model_dir": ("tiny_model",), "tflite_file": ("tiny_model",),
         "onnx_file": ("tiny_model",)}


def _defines(code: str, name: str) -> bool:
    """Whether the example's own code defines `name` (assignment, import, def, for, with ... as)."""
    return bool(re.search(rf"^\s*(?:(?:>>>|\.\.\.)\s*)?(?:{name}\s*(?:,[^=\n]*)?=(?!=)|import\s[^#\n]*\b{name}\b"
                          rf"|from\s+\S+\s+import\s[^#\n]*\b{name}\b|def {name}\b|for {name}\b)|\bas {name}\b",
                          code, re.MULTILINE))


def setup_lines(code: str) -> list[str]:
    """The setup lines (without prompts) an example's doctest `code` needs for the names it uses and does not
    define, in SETUP's order, each line once."""
    used = {name for name in SETUP if re.search(rf"(?<![\w.]){name}\b", code) and not _defines(code, name)}
    pending = list(used)
    while pending:  # and what their definitions use
        for needed in NEEDS.get(pending.pop(), ()):
            if needed not in used and not _defines(code, needed):
                used.add(needed)
                pending.append(needed)
    lines = []
    for name in SETUP:
        if name in used:
            lines += [line for line in SETUP[name] if line.startswith(" ") or line not in lines]
    return lines


def with_setup(docstring: str) -> str:
    """`docstring` with each `Examples:` section's setup lines inserted before its first line."""
    out, position = [], 0
    for heading in SECTION_HEADING.finditer(docstring):
        body_start = heading.end()
        indent = len(heading.group(1))
        body_end = body_start
        lines = docstring[body_start:].split("\n")
        first = next((line for line in lines if line.strip()), "")
        body_indent = " " * (len(first) - len(first.lstrip()))
        for line in lines:
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break
            body_end += len(line) + 1
        body = docstring[body_start:min(body_end, len(docstring))]
        code = "\n".join(line.strip()[4:] for line in body.split("\n") if line.strip().startswith((">>> ", "... ")))
        setup = setup_lines(code)
        out.append(docstring[position:body_start])
        if setup:
            prompts = [f"{body_indent}>>> # Setup: the names this example uses"]
            prompts += [f"{body_indent}{'...' if line.startswith(' ') else '>>>'} {line}" for line in setup]
            out.append("\n".join(prompts) + "\n")
        position = body_start
    out.append(docstring[position:])
    return "".join(out)


class ExampleSections(griffe.Extension):
    def on_object(self, *, obj, **kwargs):  # noqa: ARG002 (griffe's hook signature)
        if obj.docstring is not None:
            obj.docstring.value = with_setup(EXAMPLE_HEADING.sub(r"\1Examples:", obj.docstring.value))
