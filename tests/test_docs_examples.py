"""The pages' code and what it prints: the `python exec` blocks of every page run as the site's build runs them
(docs/code_output.py), and each page shows under such a block exactly what it printed; a block that prints but is
not run when the site is built is one of the few listed here, with the reason."""

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

# Python blocks that print but are not run when the site is built: (page, a line of the block) -> why.
NOT_RUN = {
    ("fine-tuning.md", 'print(training.evaluate(result.model, "cifar10", "test"))'): "downloads CIFAR-10, trains",
    ("fine-tuning.md", "print(result.metrics[\"val_accuracy\"])"): "trains for minutes",
    ("fine-tuning.md", 'print(result["top1"], result["l2"]'): "downloads CIFAR-10 and a checkpoint",
    ("pretraining.md", "print(training.few_shot_probe(probe,"): "downloads CIFAR-10, pre-trains",
    ("migration.md", "print(utils.get_imagenet_classes()"): "downloads a checkpoint and an image",
    ("gpu.md", "print(hardware.summary())"): "its answer is a GPU machine's; the site is built on a CPU",
    ("deployment.md", "print(tf.make_ndarray(stub.Predict("): "needs a TF Serving server",
    ("dense-features.md", 'print(model.evaluate(test, return_dict=True)["mean_iou"])'): "trains for minutes",
    # run by tests/test_zeroshot_docs.py after the page's exec blocks (a SavedModel export: 20 s of the build)
    ("zeroshot.md", 'print(result["scores"].numpy().shape)'): "exports and loads a SavedModel",
}


@pytest.fixture(scope="module")
def code_output():
    spec = importlib.util.spec_from_file_location("vit_keras_docs_code_output", DOCS / "code_output.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages():
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def _python_blocks(code_output, text):
    return [block for block in code_output.FENCE.finditer(text)
            if block.group("info").strip().split(" ")[0] == "python"]


PAGE = '''# A page

```python exec
x = 6 * 7
print("x is", x)
```

Text.

- A list item:

    ```python exec
    y = x + 1   # the same namespace as the block above
    ```

```python
print("not run")
```

```python exec
print(y)
print([1, 2])
```
'''


def test_exec_blocks_run_in_order_and_show_what_they_print(code_output):
    rendered = code_output.render(PAGE, "page.md")
    assert rendered == PAGE.replace("```python exec\n", "```python\n").replace(
        'print("x is", x)\n```', 'print("x is", x)\n```\n\n```text title="Output"\nx is 42\n```').replace(
        "print([1, 2])\n```", 'print([1, 2])\n```\n\n```text title="Output"\n43\n[1, 2]\n```')
    assert not code_output.exec_blocks(rendered)


def test_a_block_that_raises_fails_the_build_naming_page_and_block(code_output):
    page = "```python exec\nx = 1\n```\n\n```python exec\nprint(images)\n```\n"
    with pytest.raises(code_output.ExampleError, match=r"page\.md: python block 2 raised NameError: name 'images'"):
        code_output.render(page, "page.md")


def test_every_printing_block_is_run_or_says_why_not(code_output):
    """A block that prints shows what it printed: it runs when the site is built, or it is listed in NOT_RUN (a
    download, a GPU, a server, minutes of training)."""
    listed = set()
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for block in _python_blocks(code_output, text):
            if block.group("info").strip() == code_output.EXEC or "print(" not in block.group("code"):
                continue
            why = [key for key in NOT_RUN if key[0] == page.name and key[1] in block.group("code")]
            assert why, (f"{page.relative_to(ROOT)}: a block prints but does not run when the site is built "
                         f"(fence it as ```python exec, or add it to NOT_RUN):\n{block.group('code')[:300]}")
            listed.update(why)
    assert listed == set(NOT_RUN), f"NOT_RUN lists blocks no page has: {sorted(set(NOT_RUN) - listed)}"


def _exec_pages(code_output):
    return [page for page in _pages() if code_output.exec_blocks(page.read_text(encoding="utf-8"))]


@pytest.fixture(scope="module")
def printed(code_output):
    """page -> (its text, its exec blocks, what each printed), every page run once as the build runs it."""
    found = {}
    for page in _exec_pages(code_output):
        text = page.read_text(encoding="utf-8")
        blocks = code_output.exec_blocks(text)
        found[page] = text, blocks, code_output.run_blocks([code_output._code(b) for b in blocks], page.name)
    return found


@pytest.mark.slow
def test_every_page_shows_what_its_code_prints(code_output, printed, monkeypatch):
    """Every page's exec blocks run (in one namespace per page, as the build runs them), and the page the build
    makes shows each block's printed lines under it, and nothing under a silent block."""
    assert {page.name for page in printed} >= {"getting-started.md", "zeroshot.md", "dense-features.md",
                                               "fine-tuning.md", "finetune-folder.md", "model-zoo.md"}
    for page, (text, blocks, outputs) in printed.items():
        assert any(out.strip() for out in outputs), f"{page.name}: no exec block prints anything"
        # The page as the build renders it, from the outputs just printed (not run a second time).
        monkeypatch.setattr(code_output, "run_blocks", lambda codes, where, outputs=outputs: outputs)
        rendered = code_output.render(text, page.name)
        position = 0
        for block, out in zip(blocks, outputs):
            shown = f"```python\n{block.group('code')}{block.group('indent')}```" + code_output.output_block(
                out, block.group("indent"))
            found = rendered.find(shown, position)
            assert found >= 0, f"{page.name}: the output shown under a block is not what it printed:\n{out}"
            position = found + len(shown)
            if not out.strip():
                assert not rendered[position:].lstrip("\n").startswith('```text title="Output"'), page.name


@pytest.mark.slow
def test_the_lora_count_stated_is_the_one_printed(code_output, printed):
    """The fine-tuning pages state LoRA's trainable count only through the block that computes it: Keras
    factorises each (384, 6, 64) query and value kernel of a ViT-S/16 as A (384, 6, 8) and B (8, 64)."""
    for name in ("fine-tuning.md", "finetune-folder.md"):
        text, blocks, outputs = next(value for page, value in printed.items() if page.name == name)
        (out,) = [out for block, out in zip(blocks, outputs) if "training.lora(" in block.group("code")]
        adapters = int(re.search(r"adapters ([\d,]+)", out).group(1).replace(",", ""))
        assert adapters == 12 * 2 * (384 * 6 * 8 + 8 * 64), out
        assert "147,456" not in text, name
