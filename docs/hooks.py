"""MkDocs hook: the model zoo's tables, generated from the package's own tables when the site is built.

A page asks for a table with a marker line, `<!-- generated: NAME -->` (NAME in `TABLES`); an unknown name fails
the build. The facts come from where they are written once:

- the variants: `vit_keras.configs.VARIANTS`;
- the constructor of each variant: the `ViTB16 = _CONSTRUCTORS["B/16"]` lines of `vit_keras/models.py`;
- the parameter counts: `PAPER_PARAMS` in `tests/test_configs.py` (vit_jax's counts, which that test asserts
  every built model has);
- the checkpoints: `vit_keras.weights.registry.REGISTRY` (what `vit_keras.list_weights()` returns).

`vit_keras.configs` and `vit_keras.weights.registry` are plain Python tables; they are read without running the
package's `__init__` (which imports Keras and TensorFlow, 5-20 s), and through a normal import where that fails.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import pathlib
import re
import sys
import types

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vit_keras"
MARKER = re.compile(r"^<!-- generated: ([a-z_]+) -->$", re.MULTILINE)


@contextlib.contextmanager
def _bare_package():
    """`vit_keras` as a namespace without its `__init__`, for as long as the tables are read; sys.modules is
    restored afterwards, so nothing else in the build sees the bare package."""
    saved = {name: module for name, module in sys.modules.items()
             if name == "vit_keras" or name.startswith("vit_keras.")}
    for name in saved:
        del sys.modules[name]
    for name, path in (("vit_keras", PACKAGE), ("vit_keras.weights", PACKAGE / "weights")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    try:
        yield
    finally:
        for name in [n for n in sys.modules if n == "vit_keras" or n.startswith("vit_keras.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def _tables():
    """(VARIANTS, REGISTRY, BASE_URL) from the package in this checkout."""
    try:
        with _bare_package():
            configs = importlib.import_module("vit_keras.configs")
            registry = importlib.import_module("vit_keras.weights.registry")
    except ImportError:  # the tables came to import something else: take the slow, ordinary way
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        configs = importlib.import_module("vit_keras.configs")
        registry = importlib.import_module("vit_keras.weights.registry")
    return configs.VARIANTS, registry.REGISTRY, registry.BASE_URL


def _assignments(path: pathlib.Path) -> dict[str, ast.expr]:
    """The module-level `NAME = value` statements of a Python file, by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}


def constructors() -> dict[str, str]:
    """Variant -> the named constructor `vit_keras/models.py` defines for it (`"B/16"` -> `"ViTB16"`)."""
    found = {}
    for name, value in _assignments(PACKAGE / "models.py").items():
        if (isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name)
                and value.value.id == "_CONSTRUCTORS" and isinstance(value.slice, ast.Constant)):
            found[value.slice.value] = name
    return found


def paper_params() -> dict[str, int]:
    """Constructor -> parameter count at 224 with 1000 classes, as `tests/test_configs.py` asserts it."""
    return ast.literal_eval(_assignments(ROOT / "tests" / "test_configs.py")["PAPER_PARAMS"])


def _row(cells) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def variants_table() -> str:
    variants, _, _ = _tables()
    names, params = constructors(), paper_params()
    lines = [_row(("constructor", "variant", "patch", "D", "MLP", "heads", "layers", "ResNet stages",
                   "params (224, 1000 classes)")),
             _row(("---",) * 2 + ("---:",) * 5 + ("---", "---:"))]
    for variant, config in variants.items():
        if variant not in names:
            raise ValueError(f"vit_keras/models.py defines no named constructor for the variant {variant!r}")
        constructor = names[variant]
        patch = config.patch_size if config.resnet is None else f"{config.patch_size} on the ResNet feature map"
        stages = "—" if config.resnet is None else (
            ", ".join(map(str, config.resnet.num_layers)) or "root only")
        lines.append(_row((f"`{constructor}`", variant, patch, config.hidden_size, config.mlp_dim, config.num_heads,
                           config.num_layers, stages, f"{params[constructor]:,}")))
    return "\n".join(lines)


def weights_table() -> str:
    variants, registry, base_url = _tables()
    names = constructors()
    name_order = list(dict.fromkeys(entry.name for entry in registry.values()))
    variant_order = list(variants)
    entries = sorted(registry.values(),
                     key=lambda e: (variant_order.index(e.variant), name_order.index(e.name)))
    lines = [_row(("constructor", "`weights=`", "source", "resolution", "classes", "size", "ImageNet top-1 (published)",
                   "file")),
             _row(("---",) * 3 + ("---:",) * 3 + ("---", "---"))]
    for entry in entries:
        classes = f"{entry.classes:,}"
        if entry.representation_size:
            classes += f" + pre_logits {entry.representation_size}"
        size = f"{round(entry.size_mib):,} MiB" if entry.size_mib else "—"
        top1 = f"{entry.top1:.2f}: {entry.top1_source}" if entry.top1 is not None else "—"
        file = entry.url[len(base_url) + 1:] if entry.url.startswith(base_url + "/") else entry.url
        lines.append(_row((f"`{names[entry.variant]}`", f"`{entry.name}`", entry.source.replace("->", "→"),
                           entry.resolution, classes, size, top1, f"[`{file}`]({entry.url})")))
    return "\n".join(lines)


TABLES = {"variants": variants_table, "weights": weights_table}


def render(markdown: str) -> str:
    """Replace every marker line with its table."""
    def table(match):
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"Unknown generated table {name!r} in a docs page; known: {sorted(TABLES)}")
        return TABLES[name]()
    return MARKER.sub(table, markdown)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (MkDocs' hook signature)
    return render(markdown)
