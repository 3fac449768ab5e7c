"""MkDocs hook: the model zoo's tables, generated from the package's own tables when the site is built.

A page asks for a table with a marker line, `<!-- generated: NAME -->` (NAME in `TABLES`); an unknown name fails
the build. The facts come from where they are written once:

- the variants: `vit_keras.configs.VARIANTS`;
- the constructor of each variant: the `ViTB16 = _CONSTRUCTORS["B/16"]` lines of `vit_keras/models/applications.py`;
- the parameter counts: `PAPER_PARAMS` in `tests/test_configs.py` (vit_jax's counts, which that test asserts
  every built model has);
- the checkpoints: `vit_keras.weights.registry.REGISTRY` (what `vit_keras.list_weights()` returns);
- the families each checkpoint library's reader takes: the architecture tables of `vit_keras.weights.timm`
  (`SIZES`, `SWITCHES`, `NAFLEX_ARCHITECTURES`), `vit_keras.weights.timm_eva` (`FAMILIES`) and
  `vit_keras.weights.hf_family_rows` (`FAMILIES`, `WHOLE_MODELS`), so that a family added to
  one of them is in the docs with no second entry.

These modules are read without running the package's `__init__` (which imports Keras and TensorFlow, 5-20 s), and
through a normal import where that fails; the readers' tables import Keras all the same (through
`vit_keras.layers`), once per build.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import importlib.util
import json
import pathlib
import re
import sys
import types
from re import _constants as regex_ops
from re import _parser as regex_parser

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vit_keras"
MARKER = re.compile(r"^<!-- generated: ([a-z_]+) -->$", re.MULTILINE)


@contextlib.contextmanager
def _bare_package():
    """`vit_keras` as a namespace without its `__init__`, for as long as the tables are read; sys.modules and Keras'
    registry of serializable classes are restored afterwards, so nothing else in the process sees the bare package
    (the layers it imports register classes of their own under the same names, which `keras.models.load_model`
    would otherwise build in place of the package's)."""
    keras = sys.modules.get("keras")
    custom_objects = keras.saving.get_custom_objects() if keras is not None else None
    saved_objects = dict(custom_objects) if custom_objects is not None else None
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
        if custom_objects is not None:
            custom_objects.clear()
            custom_objects.update(saved_objects)


def _modules(*names):
    """The modules `names` of the package in this checkout."""
    try:
        with _bare_package():
            return [importlib.import_module(name) for name in names]
    except ImportError:  # the tables came to import something else: take the slow, ordinary way
        if str(ROOT) not in sys.path:
            sys.path.insert(0, str(ROOT))
        return [importlib.import_module(name) for name in names]


def _tables():
    """(VARIANTS, REGISTRY, BASE_URL) from the package in this checkout."""
    configs, registry = _modules("vit_keras.configs", "vit_keras.weights.registry")
    return configs.VARIANTS, registry.REGISTRY, registry.BASE_URL


@functools.cache
def _readers():
    """The checkpoint readers whose tables name the families: (timm, timm_eva, hf, hf_family_rows)."""
    return tuple(_modules(*(f"vit_keras.weights.{name}" for name in ("timm", "timm_eva", "hf", "hf_family_rows"))))


def _assignments(path: pathlib.Path) -> dict[str, ast.expr]:
    """The module-level `NAME = value` statements of a Python file, by name."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
            for target in node.targets if isinstance(target, ast.Name)}


def constructors() -> dict[str, str]:
    """Variant -> the named constructor the models module defines for it (`"B/16"` -> `"ViTB16"`), from its
    `ViTB16 = _CONSTRUCTORS["B/16"]` lines (`vit_keras/models.py`, or the modules of a `vit_keras/models/` package)."""
    found = {}
    for path in [PACKAGE / "models.py", *sorted((PACKAGE / "models").glob("*.py"))]:
        if not path.is_file():
            continue
        for name, value in _assignments(path).items():
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
                   "params")),
             _row(("---",) * 2 + ("---:",) * 5 + ("---", "---:"))]
    for variant, config in variants.items():
        if variant not in names:
            raise ValueError(f"vit_keras/models/ defines no named constructor for the variant {variant!r}")
        constructor = names[variant]
        patch = config.patch_size if config.resnet is None else f"{config.patch_size} (ResNet map)"
        stages = "—" if config.resnet is None else (
            ", ".join(map(str, config.resnet.num_layers)) or "root only")
        lines.append(_row((f"`{constructor}`", variant, patch, config.hidden_size, config.mlp_dim, config.num_heads,
                           config.num_layers, stages, f"{params[constructor]:,}")))
    return "\n".join(lines)


def weights_table() -> str:
    """The registered checkpoints; the last cell links the file, its text the download size (or "file" where the
    registry states none). Seven columns, so that the table fits the page's column."""
    variants, registry, _ = _tables()
    names = constructors()
    name_order = list(dict.fromkeys(entry.name for entry in registry.values()))
    variant_order = list(variants)
    entries = sorted(registry.values(),
                     key=lambda e: (variant_order.index(e.variant), name_order.index(e.name)))
    lines = [_row(("constructor", "`weights=`", "source", "res.", "classes", "ImageNet top-1 (published)",
                   "download")),
             _row(("---",) * 3 + ("---:",) * 2 + ("---", "---:"))]
    for entry in entries:
        classes = f"{entry.classes:,}"
        if entry.representation_size:
            classes += f" + pre_logits {entry.representation_size}"
        size = f"{round(entry.size_mib):,} MiB" if entry.size_mib else "file"
        top1 = f"{entry.top1:.2f}: {entry.top1_source}" if entry.top1 is not None else "—"
        lines.append(_row((f"`{names[entry.variant]}`", f"`{entry.name}`", entry.source.replace("->", "→"),
                           entry.resolution, classes, top1, f"[{size}]({entry.url})")))
    return "\n".join(lines)


def name_pattern(pattern: str, groups=None) -> str:
    """A name regex as the names it matches: `{a,b}` for alternatives, `[x]` for an optional part, `[x]…` for a
    repeated one, `<N>` for digits, `<word>` for other characters; `groups` writes named groups' text itself.

    Example:
        >>> name_pattern(r"vit_(?P<size>small|base)_patch(?P<patch>\\d+)(?:_qkvb)?", {"patch": "<P>"})
        'vit_{small,base}_patch<P>[_qkvb]'
    """
    groups = groups or {}
    parsed = regex_parser.parse(pattern)
    group_names = {index: name for name, index in parsed.state.groupdict.items()}

    def characters(items) -> str | None:
        if len(items) == 1 and items[0][0] is regex_ops.IN:
            return "<N>" if items[0][1] == [(regex_ops.CATEGORY, regex_ops.CATEGORY_DIGIT)] else "<word>"
        return None

    def render(items) -> str:
        out = []
        for op, value in items:
            if op is regex_ops.LITERAL:
                out.append(chr(value))
            elif op is regex_ops.AT:  # ^ and $
                continue
            elif op is regex_ops.SUBPATTERN:
                name = group_names.get(value[0])
                out.append(groups[name] if name in groups else render(value[-1]))
            elif op is regex_ops.BRANCH:
                out.append("{" + ",".join(render(branch) for branch in value[1]) + "}")
            elif op in (regex_ops.MAX_REPEAT, regex_ops.MIN_REPEAT) and value[0] == 1 and characters(value[2]):
                out.append(characters(value[2]))
            elif op in (regex_ops.MAX_REPEAT, regex_ops.MIN_REPEAT) and value[0] == 0:
                out.append(f"[{render(value[2])}]" + ("" if value[1] == 1 else "…"))
            else:
                raise ValueError(f"The docs cannot write the name pattern {pattern!r} as names (at {op}): write it "
                                 "with literal text, groups, alternatives, optional parts and \\d+ only.")
        return "".join(out)

    return render(parsed.data)


def _sizes(sizes) -> str:
    """`{word: (D, layers, heads)}` as a table cell."""
    return ", ".join(f"{word} ({', '.join(map(str, shape))})" for word, shape in sizes.items())


def _fields(fields) -> str:
    """`ViTConfig` fields as the keyword arguments that set them."""
    return ", ".join(f"`{key}={_value(value)}`" for key, value in fields.items())


def timm_families_table() -> str:
    """The timm families: the architecture names each reads, its sizes and the parts a name may add."""
    timm, timm_eva, _, _ = _readers()
    lines = [_row(("family", "timm architecture names", "sizes (D, layers, heads)", "name parts")),
             _row(("---",) * 4)]
    tokens = ", ".join(f"`{token}`" for token in timm.SWITCHES)
    lines.append(_row((timm.TABLE.family, f"`{name_pattern(timm._NAME.pattern)}`", _sizes(timm.SIZES),
                       f"{tokens} (the table below)")))
    naflex = timm.NAFLEX_ARCHITECTURES
    lines.append(_row((timm.NAFLEX_TABLE.family, ", ".join(f"`{name}`" for name in naflex),
                       _sizes({name.split("_")[1]: (a["hidden_size"], a["num_layers"], a["num_heads"])
                               for name, a in naflex.items()}), "—")))
    for family in timm_eva.FAMILIES:
        sizes = {word: (a["embed_dim"], a["depth"], a["num_heads"]) for word, a in family.sizes.items()}
        names = name_pattern(family.pattern, {"size": "{" + ",".join(family.sizes) + "}" if len(sizes) > 1
                                              else next(iter(family.sizes)), "patch": "<P>", "res": "<res>"})
        parts = []
        for option, args in family.options.items():
            merged = {**family.args, **args}
            refused = [what for key, default, what in timm_eva.UNSUPPORTED if merged.get(key, default) != default]
            parts.append(f"`{option}`" + (f" (refused: {refused[0]})" if refused else ""))
        lines.append(_row((family.name, f"`{names}`", _sizes(sizes), ", ".join(parts) or "—")))
    return "\n".join(lines)


def timm_tokens_table() -> str:
    """The parts of a timm ViT architecture name and the `ViTConfig` fields each sets."""
    timm = _readers()[0]
    lines = [_row(("name part", "`ViTConfig` fields it sets")), _row(("---", "---"))]
    for token, fields in timm.SWITCHES.items():
        cell = _fields(fields)
        if token == "radio":  # the one switch that differs between sizes
            cell += f"; `layer_scale=True` for {', '.join(timm.RADIO_LAYER_SCALE_SIZES)}"
        lines.append(_row((f"`_{token}`", cell)))
    return "\n".join(lines)


def transformers_families_table() -> str:
    """The transformers model types each reader takes, with the classes that write them."""
    _, _, _, hf_family_rows = _readers()
    lines = [_row(("`model_type`", "transformers classes", "read by")), _row(("---",) * 3)]
    lines += [_row((f"`{kind}`", ", ".join(f"`{c}`" for c in family.classes.split(", ")),
                    f"`{hf_family_rows.__name__}`")) for kind, family in hf_family_rows.FAMILIES.items()]
    lines += [_row((f"`{kind}`", f"its vision tower, as `{tower}`", f"`{hf_family_rows.__name__}`"))
              for kind, (tower, _) in hf_family_rows.WHOLE_MODELS.items()]
    return "\n".join(lines)


# One architecture name per family of timm's vision_transformer.py that the reader takes (its name parts are the
# timm_tokens table); the Eva families are listed whole, every size.
TIMM_EXAMPLES = (("ViT (paper, AugReg)", "vit_base_patch16_224"), ("DINOv2", "vit_base_patch14_dinov2"),
                 ("DINOv2 + registers", "vit_base_patch14_reg4_dinov2"),
                 ("CLIP image tower", "vit_base_patch16_clip_224"),
                 ("CLIP, OpenAI weights", "vit_base_patch16_clip_quickgelu_224"),
                 ("ViT, no class token, average pooling", "vit_base_patch16_gap_224"),
                 ("SigLIP image tower", "vit_base_patch16_siglip_224"),
                 ("DeiT (distilled)", "deit_base_distilled_patch16_224"), ("DeiT III", "deit3_base_patch16_224"),
                 ("C-RADIOv3 (timm)", "vit_base_patch16_radio_v3"))
# The config.json keys (beyond the sizes) without which a transformers type cannot be read; example values.
HF_REQUIRED_KEYS = {"siglip2_vision_model": {"num_patches": 256},
                    "radio": {"max_img_size": 2048, "norm_mean": [0.5] * 3, "norm_std": [0.5] * 3,
                              "num_cls_tokens": 2, "num_registers": 2, "summary_idxs": [0, 1]}}
_SIZE_FIELDS = {"name", "patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers", "image_size",
                "map_mlp_dim"}


@functools.cache
def _defaults() -> dict:
    """`ViTConfig`'s field defaults: the paper ViT's (read once per build, not once per table row)."""
    import dataclasses

    (configs,) = _modules("vit_keras.configs")
    return {field.name: field.default for field in dataclasses.fields(configs.ViTConfig)}


def _switched(fields) -> dict:
    """The fields of `fields` that differ from `ViTConfig`'s defaults, sizes left out."""
    defaults = _defaults()
    return {key: value for key, value in fields.items()
            if key not in _SIZE_FIELDS and key in defaults and defaults[key] != value}


def _value(value) -> str:
    return json.dumps(value) if isinstance(value, str) else repr(value)


def _per_size(by_size: dict) -> str:
    """`{size: switched fields}` -> the fields every size sets alike, then each field that differs between sizes
    with its value (the default where a size leaves it) size by size."""
    defaults = _defaults()
    keys = list(dict.fromkeys(key for fields in by_size.values() for key in fields))
    values = {key: {size: fields.get(key, defaults[key]) for size, fields in by_size.items()} for key in keys}
    common = {key: next(iter(v.values())) for key, v in values.items() if len(set(map(repr, v.values()))) == 1}
    cells = [_fields(common)] if common else []
    for key in (key for key in keys if key not in common):
        groups = {}
        for size, value in values[key].items():
            groups.setdefault(_value(value), []).append(size)
        cells.append(f"`{key}` by size: "
                     + ", ".join(f"{'/'.join(sizes)} `{value}`" for value, sizes in groups.items()))
    return "; ".join(cells) or "—"


def family_fields_table() -> str:
    """What each family sets in `ViTConfig`, as its reader computes it: for timm, from architecture names (every size
    of the Eva families); for transformers, from a config.json of each `model_type` with transformers' defaults."""
    timm, timm_eva, hf, hf_family_rows = _readers()
    lines = [_row(("family", "read from", "`ViTConfig` fields it sets (beyond sizes; the rest are the paper ViT's)")),
             _row(("---",) * 3)]
    for family, name in TIMM_EXAMPLES:
        lines.append(_row((family, f"timm `{name}`", _fields(_switched(timm.architecture_switches(name))) or "—")))
    naflex = {name: _switched(timm._naflex_fields(name, timm.CONFIG_NAME)) for name in timm.NAFLEX_ARCHITECTURES}
    lines.append(_row(("SigLIP 2 NaFlex", ", ".join(f"timm `{name}`" for name in naflex), _per_size(naflex))))
    for family in timm_eva.FAMILIES:
        by_size = {size: _switched(timm_eva.eva_fields({**timm_eva.EVA_DEFAULTS, **family.args, **args,
                                                         "patch_size": 16})[0])
                   for size, args in family.sizes.items()}
        lines.append(_row((family.name, "timm `eva.py`, every size", _per_size(by_size))))
    sizes = {"hidden_size": 48, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 96,
             "patch_size": 16, "image_size": 224}
    for kind in hf_family_rows.FAMILIES:
        config = {"model_type": kind, **sizes, **HF_REQUIRED_KEYS.get(kind, {})}
        lines.append(_row((f"`{kind}`", "transformers `config.json`",
                           _fields(_switched(hf.architecture(config, "."))) or "—")))
    return "\n".join(lines)


def variants_fields_table() -> str:
    """`vit_keras.configs.VARIANTS` as a table for its API page: one row per variant, one column per `ViTConfig`
    field that differs between variants (the others are the same for all, and listed under the table)."""
    import dataclasses

    variants, _, _ = _tables()
    configs = list(variants.values())
    names = [field.name for field in dataclasses.fields(configs[0]) if field.name != "name"]
    varying = [name for name in names if len({repr(getattr(c, name)) for c in configs}) > 1]

    def cell(value) -> str:
        if dataclasses.is_dataclass(value):  # the ResNet stem of a hybrid
            return ", ".join(f"{key}={_value(item)}" for key, item in dataclasses.asdict(value).items())
        return "—" if value is None else _value(value)

    lines = [_row(("key", *(f"`{name}`" for name in varying))), _row(("---",) + ("---:",) * len(varying))]
    lines += [_row((f"`{key!r}`", *(cell(getattr(config, name)) for name in varying)))
              for key, config in variants.items()]
    same = [name for name in names if name not in varying]
    lines.append("")
    lines.append("Every variant has " + ", ".join(f"`{name}={_value(getattr(configs[0], name))}`" for name in same)
                 + ".")
    return "\n".join(lines)


TABLES = {"variants": variants_table, "weights": weights_table, "timm_families": timm_families_table,
          "timm_tokens": timm_tokens_table, "transformers_families": transformers_families_table,
          "family_fields": family_fields_table, "variants_fields": variants_fields_table}

def render(markdown: str) -> str:
    """Replace every marker line with its table."""
    def table(match):
        name = match.group(1)
        if name not in TABLES:
            raise ValueError(f"Unknown generated table {name!r} in a docs page; known: {sorted(TABLES)}")
        return TABLES[name]()
    return MARKER.sub(table, markdown)


def package_version() -> str:
    """`vit_keras.__version__`, read from the package's `__init__.py` without importing it."""
    value = _assignments(PACKAGE / "__init__.py")["__version__"]
    return ast.literal_eval(value)


def on_config(config):
    """The header shows the version: "vit_keras 0.1.0"."""
    config["site_name"] = f"{config['site_name']} {package_version()}"
    return config


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (MkDocs' hook signature)
    return render(markdown)


TABLE = re.compile(r"<table>.*?</table>", re.DOTALL)
CODE_WITH_SPACES = re.compile(r"<code>([^<]*\s[^<]*)</code>")


def mark_wrappable_code(html: str) -> str:
    """In tables, code holding spaces (a call with arguments, a command) gets the class `vk-words`: the stylesheet
    keeps one-word code (a `weights=` name, a hub id, a flag) on one line and lets these wrap between words.

    Example:
        >>> mark_wrappable_code("<table><td><code>a b</code> <code>imagenet21k</code></td></table>")
        '<table><td><code class="vk-words">a b</code> <code>imagenet21k</code></td></table>'
    """
    return TABLE.sub(lambda table: CODE_WITH_SPACES.sub(r'<code class="vk-words">\1</code>', table.group(0)), html)


def on_page_content(html, page, config, files):  # noqa: ARG001 (MkDocs' hook signature)
    return mark_wrappable_code(html)


# --- the dense-features page's figure ---------------------------------------------------------------------------

DENSE_FIGURE = "dense_features_pca.png"
DENSE_CHECKPOINT = ROOT / "tests" / "fixtures" / "dense" / "timm_dinov3_rect" / "checkpoint"


def _scene(height: int = 128, width: int = 192):
    """An RGB test picture: a shaded floor, a red square, a blue disc and a green triangle."""
    import numpy as np

    rows, cols = np.mgrid[:height, :width]
    image = np.stack([90 + 60 * rows / height, 110 + 40 * cols / width, 150 - 50 * rows / height], axis=-1)
    image[(rows > 30) & (rows < 80) & (cols > 20) & (cols < 70)] = (220, 60, 40)
    image[(rows - 70) ** 2 + (cols - 120) ** 2 < 32 ** 2] = (40, 90, 220)
    image[(rows > 60) & (rows < 120) & (cols > 150) & (np.abs(cols - 170) < (rows - 60) / 2)] = (50, 190, 70)
    return image.astype("float32")


def pca_rgb(feature_map):
    """The first three principal components of a `(H, W, C)` map's patch features, each scaled to [0, 1]: the
    picture DINO users make of their features."""
    import numpy as np

    tokens = feature_map.reshape(-1, feature_map.shape[-1]).astype("float64")
    tokens -= tokens.mean(axis=0)
    _, _, components = np.linalg.svd(tokens, full_matrices=False)
    projected = tokens @ components[:3].T
    projected = (projected - projected.min(axis=0)) / np.maximum(np.ptp(projected, axis=0), 1e-12)
    return projected.reshape(*feature_map.shape[:2], 3)


def dense_figure_png() -> bytes:
    """The dense-features page's figure: a picture and the PCA of a DINOv3-architecture model's last block."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import vit_keras
    from vit_keras import features

    image = _scene()
    model = vit_keras.from_pretrained(str(DENSE_CHECKPOINT), include_top=False, image_size=image.shape[:2])
    (feature_map,) = features.intermediate_model(model, 1, norm=True).predict(image[None], verbose=0)
    figure, axes = plt.subplots(1, 2, figsize=(8, 2.9))
    axes[0].imshow(image.astype("uint8"))
    axes[0].set_title(f"image ({image.shape[0]}x{image.shape[1]})")
    axes[1].imshow(pca_rgb(np.asarray(feature_map)), interpolation="nearest")
    rows, cols = np.asarray(feature_map).shape[:2]
    axes[1].set_title(f"PCA of {features.feature_names(model, 1)[0]}'s features ({rows}x{cols} patches)")
    for axis in axes:
        axis.axis("off")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def on_files(files, config):
    from mkdocs.structure.files import File

    files.append(File.generated(config, DENSE_FIGURE, content=dense_figure_png()))
    return files
