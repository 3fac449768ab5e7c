"""MkDocs hook: a page's runnable Python examples are run when the site is built, and what they print is shown.

A block fenced as `` ```python exec `` runs; the blocks of one page run in order, in one namespace (as a reader
pastes them into one session), in a scratch directory where `tests/` (the bundled test checkpoints) is at hand,
with Keras' progress bars off. Each block that prints is followed on the page by an "Output" block holding exactly
what it printed; a block that raises fails the build, naming the page and the block. Blocks without `exec` are
shown as written (they download checkpoints, or need a GPU or a server).

`tests/test_docs_examples.py` runs every page's `exec` blocks through `run_blocks` and holds the pages to this.
"""

from __future__ import annotations

import contextlib
import io
import os
import pathlib
import re
import tempfile
import traceback

ROOT = pathlib.Path(__file__).resolve().parent.parent
# A fenced block: its indent, its info string and its code (up to a closing fence of the same indent).
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
                   re.DOTALL | re.MULTILINE)
EXEC = "python exec"
OUTPUT_TITLE = "Output"


class ExampleError(RuntimeError):
    """A page's example raised while the site was built."""


def exec_blocks(markdown: str) -> list[re.Match]:
    """The `` ```python exec `` blocks of a page, in order."""
    return [block for block in FENCE.finditer(markdown) if block.group("info").strip() == EXEC]


def _code(block: re.Match) -> str:
    indent = len(block.group("indent"))
    return "\n".join(line[indent:] for line in block.group("code").splitlines())


def run_blocks(codes: list[str], where: str = "<page>") -> list[str]:
    """Run `codes` in order in one namespace, in a scratch directory holding a link to `tests/`; what each
    printed to stdout. A block that raises ends the run with `ExampleError` naming `where` and the block."""
    import keras

    keras.utils.disable_interactive_logging()  # predict/fit progress bars are not the example's output
    outputs, namespace = [], {"__name__": "__main__"}
    previous = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="vit_keras_docs_") as scratch:
        os.symlink(ROOT / "tests", pathlib.Path(scratch) / "tests")
        os.chdir(scratch)
        try:
            for number, code in enumerate(codes, 1):
                printed = io.StringIO()
                try:
                    with contextlib.redirect_stdout(printed):
                        exec(compile(code, f"{where}, python block {number}", "exec"), namespace)  # noqa: S102
                except Exception as error:
                    raise ExampleError(f"{where}: python block {number} raised {type(error).__name__}: {error}\n"
                                       + traceback.format_exc(limit=-3)) from error
                outputs.append(printed.getvalue())
        finally:
            os.chdir(previous)
            keras.utils.enable_interactive_logging()
    return outputs


def output_block(printed: str, indent: str = "") -> str:
    """What a block printed, as the fenced block the page shows under it ("" when it printed nothing)."""
    if not printed.strip():
        return ""
    body = "".join(f"{indent}{line}\n" for line in printed.rstrip("\n").split("\n"))
    return f'\n\n{indent}```text title="{OUTPUT_TITLE}"\n{body}{indent}```'


def render(markdown: str, where: str = "<page>") -> str:
    """The page with its `exec` blocks run: each fence becomes a plain `` ```python `` one and is followed by its
    Output block."""
    blocks = exec_blocks(markdown)
    if not blocks:
        return markdown
    outputs = run_blocks([_code(block) for block in blocks], where)
    pieces, end = [], 0
    for block, printed in zip(blocks, outputs):
        indent = block.group("indent")
        pieces += [markdown[end:block.start()], f"{indent}```python\n{block.group('code')}{indent}```",
                   output_block(printed, indent)]
        end = block.end()
    return "".join(pieces) + markdown[end:]


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (MkDocs' hook signature)
    return render(markdown, page.file.src_uri)
