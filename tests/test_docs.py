"""The docs site (mkdocs.yml, docs/): its generated model-zoo tables against the package, and the README's links into
the site. The site itself is built with `mkdocs build --strict` by `make docs`, which `make test` runs."""

import dataclasses
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import keras
import pytest

import vit_keras
from tests.test_configs import PAPER_PARAMS
from vit_keras.configs import VARIANTS
from vit_keras.models import _variant_function_name

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# A README is read on one screen or two; the rest is on the site.
README_MAX_LINES = 200


@pytest.fixture(scope="module")
def hooks():
    spec = importlib.util.spec_from_file_location("vit_keras_docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rows(table: str) -> list[list[str]]:
    """The body rows of a Markdown table, cell by cell (header and separator left out)."""
    lines = table.strip().splitlines()
    assert len(lines) >= 3 and set(lines[1].replace("|", "").replace(":", "").replace(" ", "")) == {"-"}, table[:200]
    return [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines[2:]]


def test_variants_table_matches_the_constructors(hooks):
    """One row per `VARIANTS` entry, in order, naming the constructor `vit_keras` exports for it, the variant's
    widths and depth, and the parameter count tests/test_configs.py asserts for the built model."""
    rows = _rows(hooks.variants_table())
    assert [row[1] for row in rows] == list(VARIANTS)
    for constructor, variant, patch, hidden, mlp, heads, layers, stages, params in rows:
        config = VARIANTS[variant]
        name = _variant_function_name(variant)
        assert constructor == f"`{name}`" and callable(getattr(vit_keras, name)), constructor
        assert patch.split()[0] == str(config.patch_size), (variant, patch)
        assert (int(hidden), int(mlp), int(heads), int(layers)) == (
            config.hidden_size, config.mlp_dim, config.num_heads, config.num_layers), variant
        assert (stages == "—") == (config.resnet is None), (variant, stages)
        assert int(params.replace(",", "")) == PAPER_PARAMS[name], variant


def test_weights_table_matches_the_registry(hooks):
    """Every row of the generated checkpoint table is a registry entry with the same constructor, name,
    resolution, classes (and pre_logits width), top-1, source, URL and size (the link's text); and every entry has
    its row."""
    entries = {(f"`{_variant_function_name(e.variant)}`", f"`{e.name}`"): e for e in vit_keras.list_weights()}
    seen = set()
    for row in _rows(hooks.weights_table()):
        assert len(row) == 7, row
        constructor, name, source, resolution, classes, top1, link = row
        entry = entries.get((constructor, name))
        assert entry is not None, f"row {constructor} {name} is not registered"
        assert (constructor, name) not in seen, f"{constructor} {name} is listed twice"
        seen.add((constructor, name))
        assert int(resolution) == entry.resolution, row
        classes_text = f"{entry.classes:,}" + (
            f" + pre_logits {entry.representation_size}" if entry.representation_size else "")
        assert classes == classes_text, row
        if entry.top1 is None:
            assert top1 == "—", row
        else:
            number, label = re.fullmatch(r"([\d.]+): (.+)", top1).groups()
            assert float(number) == entry.top1 and label == entry.top1_source, row
        url = re.fullmatch(r"\[([^\]]+)\]\(([^)]+)\)", link)
        assert url is not None, link
        assert url.group(2) == entry.url, row
        assert url.group(1) == (f"{entry.size_mib:,.0f} MiB" if entry.size_mib else "file"), row
        assert source.replace("→", "->") == entry.source, row
    assert seen == set(entries), f"registered but not in the table: {sorted(set(entries) - seen)}"


def test_every_marker_in_the_docs_is_a_known_table(hooks):
    """A page's `<!-- generated: NAME -->` line is replaced by its table; an unknown name fails the build."""
    pages = sorted(DOCS.rglob("*.md"))
    found = {name for page in pages for name in hooks.MARKER.findall(page.read_text(encoding="utf-8"))}
    assert found == set(hooks.TABLES), found
    for page in pages:
        assert not hooks.MARKER.search(hooks.render(page.read_text(encoding="utf-8"))), page
    with pytest.raises(ValueError, match="Unknown generated table 'nope'"):
        hooks.render("<!-- generated: nope -->")


def test_families_tables_list_every_family_of_the_readers(hooks):
    """Every family of the readers' tables has its row, with its size words and their (D, layers, heads), and every
    name part and transformers model type is listed: a family added to a table is in the docs without a second
    entry."""
    from vit_keras.weights import hf, hf_family_rows, timm, timm_eva

    rows = {row[0]: row for row in _rows(hooks.timm_families_table())}
    assert list(rows) == [timm.TABLE.family, timm.NAFLEX_TABLE.family, *(f.name for f in timm_eva.FAMILIES)]
    for family in timm_eva.FAMILIES:
        _, names, sizes, parts = rows[family.name]
        assert sizes == ", ".join(f"{word} ({a['embed_dim']}, {a['depth']}, {a['num_heads']})"
                                  for word, a in family.sizes.items()), family.name
        assert all(f"`{option}`" in parts for option in family.options), family.name
    assert "clip` (refused: a LayerNorm inside the attention" in rows["EVA-02"][3]  # timm_eva.UNSUPPORTED
    assert rows[timm.NAFLEX_TABLE.family][1] == ", ".join(f"`{name}`" for name in timm.NAFLEX_ARCHITECTURES)
    tokens = {row[0]: row[1] for row in _rows(hooks.timm_tokens_table())}
    assert list(tokens) == [f"`_{token}`" for token in timm.SWITCHES]
    assert tokens["`_siglip`"] == '`class_token=False`, `global_pool="map"`'
    model_types = [row[0].strip("`") for row in _rows(hooks.transformers_families_table())]
    assert model_types == list(hf.MODEL_TYPES) == [*hf_family_rows.FAMILIES, *hf_family_rows.WHOLE_MODELS]


def test_family_fields_table_is_what_the_readers_compute(hooks):
    """A row per timm example name, NaFlex, every Eva family and every transformers model type; the cells are the
    readers' own fields (an Eva family's sizes that differ are named: DINOv3's plus sizes and 7B have SwiGLU, as
    timm's eva.py registers them; EVA-02 T/S pack the SwiGLU weights, B/L add its LayerNorm)."""
    from vit_keras.weights import hf_family_rows, timm_eva

    rows = _rows(hooks.family_fields_table())
    assert [row[0] for row in rows] == [*(family for family, _ in hooks.TIMM_EXAMPLES), "SigLIP 2 NaFlex",
                                        *(f.name for f in timm_eva.FAMILIES),
                                        *(f"`{kind}`" for kind in hf_family_rows.FAMILIES)]
    cells = {row[0]: row[2] for row in rows}
    assert cells["ViT (paper, AugReg)"] == '`activation="gelu"`'  # timm's exact GELU; vit_jax's is gelu_tanh
    assert cells["DINOv2 + registers"] == ('`activation="gelu"`, `num_register_tokens=4`, `no_embed_class=True`, '
                                           '`layer_scale=True`')
    assert cells["DINOv3"].endswith('`mlp` by size: tiny/small/base/large `"gelu"`, small_plus/huge_plus/7b '
                                    '`"swiglu"`')
    assert '`mlp` by size: tiny/small `"swiglu_packed"`, base/large `"swiglu"`' in cells["EVA-02"]
    assert '`map_head="aimv2"`' in cells["`aimv2_vision_model`"]


@pytest.mark.parametrize("pattern, groups, names", [
    (r"^(vit|deit)_(tiny|small)(_distilled)?_patch(\d+)((?:_[a-z0-9]+)*)$", None,
     "{vit,deit}_{tiny,small}[_distilled]_patch<N>[_<word>]…"),
    (r"eva02_(?P<size>[a-z]+)_patch(?P<patch>\d+)(?P<options>(?:_clip)?)_(?P<res>\d+)",
     {"size": "{tiny,base}", "patch": "<P>", "res": "<res>"}, "eva02_{tiny,base}_patch<P>[_clip]_<res>"),
    (r"vit_(?P<size>[a-z]+)_rope(?P<options>_reg\d+_gap)", {"size": "base"}, "vit_base_rope_reg<N>_gap"),
])
def test_name_patterns_are_written_as_the_names_they_match(hooks, pattern, groups, names):
    assert hooks.name_pattern(pattern, groups) == names
    # Every name the written form stands for (one choice per alternative and placeholder) matches the pattern.
    filled = names.replace("<N>", "16").replace("<P>", "16").replace("<res>", "224").replace("<word>", "in1k")
    for pick, keep_optional in ((0, False), (-1, True)):
        name = re.sub(r"\{([^}]*)\}", lambda m, pick=pick: m.group(1).split(",")[pick], filled)
        name = re.sub(r"\[([^\]]*)\]…?", lambda m, keep=keep_optional: m.group(1) if keep else "", name)
        assert re.fullmatch(pattern, name), (name, pattern)


def test_a_name_pattern_the_docs_cannot_write_fails_the_build(hooks):
    with pytest.raises(ValueError, match="cannot write the name pattern"):
        hooks.name_pattern(r"vit_(?=base)base")


def test_the_tables_are_read_without_the_package_init(hooks):
    """The docs build reads the package's tables without its `__init__` (which imports Keras and TensorFlow): the
    bare read must work (else the build falls back to the slow import) and leave the imported package as it was."""
    before = {name: sys.modules[name] for name in ("vit_keras", "vit_keras.configs", "vit_keras.weights.registry")}
    with hooks._bare_package():
        configs = importlib.import_module("vit_keras.configs")
        registry = importlib.import_module("vit_keras.weights.registry")
        assert not hasattr(sys.modules["vit_keras"], "ViT")  # the bare package, not the real one
    assert list(configs.VARIANTS) == list(VARIANTS)
    # Equal field by field (the bare read's dataclass is a class of its own).
    assert [dataclasses.astuple(e) for e in registry.REGISTRY.values()] == [
        dataclasses.astuple(e) for e in vit_keras.list_weights()]
    assert all(sys.modules[name] is module for name, module in before.items())
    # Keras builds a loaded model's layers from the package's own classes, not from the bare read's copies.
    assert keras.saving.get_registered_object("vit_keras>TransformerBlock") is vit_keras.layers.TransformerBlock


def test_readme_is_short_and_links_every_page():
    """The README fits on a screen or two and links (relatively, so they work on GitHub) every page of the site;
    each link resolves to a file."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) < README_MAX_LINES
    links = set(re.findall(r"\]\(((?!https?://)[^)#]+)(?:#[^)]*)?\)", text))
    for link in links:
        assert (ROOT / link).is_file(), f"README links {link}, which does not exist"
    pages = {f"docs/{page.name}" for page in DOCS.glob("*.md")} - {"docs/index.md"}
    assert pages <= links, f"pages the README does not link: {sorted(pages - links)}"


def test_every_python_example_in_the_readme_and_the_docs_parses():
    """A Python block that does not even parse is a broken example (running them needs downloads and hours)."""
    for page in [README, *sorted(DOCS.rglob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        blocks = re.finditer(r"^( *)```python\n(.*?)^\1```", text, re.DOTALL | re.MULTILINE)
        for number, block in enumerate(blocks, 1):
            indent = len(block.group(1))
            code = "\n".join(line[indent:] for line in block.group(2).splitlines())
            try:
                compile(code, f"{page.name} python block {number}", "exec")
            except SyntaxError as error:
                pytest.fail(f"{page.relative_to(ROOT)}: python block {number} does not parse: {error}")


# How this package is installed, everywhere it is written: from its source tree (vit-keras3 is not on PyPI), with
# the extras setup.cfg defines. Other packages' installs (tensorflow-tpu, tensorflow-serving-api, ...) are left alone.
OWN_INSTALL = re.compile(r"""pip\ install\ (?:-c\ constraints\.txt\ )?(?:-e\ )?
                             (?:"\.(?:\[([a-z0-9,-]+)\])?"|'\.\[([a-z0-9,-]+)\]'|\.)(?=[\s`"']|$)""", re.VERBOSE)
INSTALL_LINE = re.compile(r"pip install [^\n`]*")


def _setup_extras() -> set:
    import configparser

    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    return set(parser["options.extras_require"])


def _install_commands():
    """(where, command) for every `pip install` in the README, the docs pages, the recipes and the package's own
    messages (its source and what `extras.install_command` returns for every extra)."""
    from vit_keras import extras

    files = [README, *sorted(DOCS.rglob("*.md")), *sorted((ROOT / "recipes").glob("*.py")),
             *sorted((ROOT / "vit_keras").rglob("*.py"))]
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in INSTALL_LINE.finditer(line):
                yield f"{path.relative_to(ROOT)}:{number}", match.group(0)
    for extra in sorted(_setup_extras()):
        yield f"extras.install_command({extra!r})", extras.install_command(extra)


def test_every_install_of_this_package_is_the_source_tree_form():
    """README, pages, recipes and error messages name one install form for vit-keras3, the one that works: `pip
    install -e ".[EXTRA]"` in the source tree, with extras that setup.cfg defines; never `pip install vit-keras3`,
    which would find nothing (or another project) on PyPI."""
    extras, seen = _setup_extras(), 0
    for where, command in _install_commands():
        assert "vit-keras3" not in command, f"{where}: {command!r} installs vit-keras3 from PyPI, where it is not"
        own = OWN_INSTALL.match(command)
        if own is None:
            continue  # another package (tensorflow-tpu, tensorflow-serving-api, keras-hub, ...)
        seen += 1
        for extra in (own.group(1) or own.group(2) or "").split(","):
            assert not extra or extra in extras, f"{where}: {command!r} names the extra {extra!r}, not in setup.cfg"
    assert seen >= 10, seen


def test_a_missing_extra_names_the_install_form():
    from vit_keras.extras import MissingExtraError, require

    with pytest.raises(MissingExtraError) as caught:
        require("no_such_module_for_the_docs_test", "inspection", "Drawing inspection figures")
    assert str(caught.value).endswith('it comes with the [inspection] extra of vit-keras3: '
                                      'pip install -e ".[inspection]" in the vit_keras source tree')


# --- recipes, families' hub ids, generated VARIANTS table, API examples, changelog, the browser check -------------

RECIPES = ROOT / "recipes"
SNIPPET = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)


def test_every_recipe_script_is_shown_whole_on_a_page():
    """Each recipes/*.py is included (pymdownx.snippets) by a page, under a title naming the file, so that the page
    shows the script the tests run; an included file that does not exist fails the build (check_paths)."""
    included = {}
    for page in sorted((DOCS / "recipes").glob("*.md")):
        text = page.read_text(encoding="utf-8")
        for path in SNIPPET.findall(text):
            included[path] = page
            assert f'```python title="{path}"\n--8<-- "{path}"\n```' in text, (page, path)
    scripts = {f"recipes/{path.name}" for path in RECIPES.glob("*.py")}
    assert scripts == set(included), f"not shown: {sorted(scripts - set(included))}"


# The families the loading page gives a hub id for, and the id a recipe loads by default must be among them.
FAMILIES_WITH_IDS = ("ViT (paper, AugReg)", "DINOv2", "DINOv3", "CLIP image tower", "SigLIP image tower",
                     "SigLIP 2 image tower", "SigLIP 2 NaFlex", "EVA-02", "Perception Encoder", "I-JEPA")


def _hub_id_rows() -> dict:
    text = (DOCS / "loading.md").read_text(encoding="utf-8")
    section = text[text.index("## Families and hub ids"):text.index("## Load your own checkpoint")]
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    return {row[0]: row[1] for row in _rows(table)}


def test_the_families_table_gives_a_well_formed_hub_id_for_every_family():
    from vit_keras.weights import hub

    rows = _hub_id_rows()
    for family in FAMILIES_WITH_IDS:
        assert any(name.startswith(family) for name in rows), f"no hub id for {family}"
    for family, cell in rows.items():
        source = cell.strip("`")
        assert hub.is_hub_id(source), (family, cell)
        hub.parse(source)  # a malformed id raises
    defaults = {f"`hf-hub:{line.split('hf-hub:')[1].split(chr(34))[0]}`"
                for path in RECIPES.glob("*.py") for line in path.read_text().splitlines()
                if line.startswith("DEFAULT_MODEL = ")}
    # image-text models are documented on the zero-shot page, image towers in the families table
    zeroshot_ids = set(re.findall(r"`hf-hub:[^`]+`", (DOCS / "zeroshot.md").read_text(encoding="utf-8")))
    assert defaults <= set(rows.values()) | zeroshot_ids, defaults - set(rows.values()) - zeroshot_ids


def test_variants_fields_table_is_the_package_table(hooks):
    """The configs API page's `VARIANTS` table: a row per variant, each cell the config's own value, every field
    that differs between variants a column and every other field named below the table."""
    table, _, note = hooks.variants_fields_table().partition("\n\n")
    header = [cell.strip().strip("`") for cell in table.splitlines()[0].strip("|").split("|")]
    rows = _rows(table)
    assert [row[0] for row in rows] == [f"`{key!r}`" for key in VARIANTS]
    for row in rows:
        config = VARIANTS[ast_literal(row[0].strip("`"))]
        for field, cell in zip(header[1:], row[1:]):
            value = getattr(config, field)
            if dataclasses.is_dataclass(value):
                assert cell == ", ".join(f"{k}={v!r}" for k, v in dataclasses.asdict(value).items()), cell
            else:
                assert cell == ("—" if value is None else hooks._value(value)), (row[0], field, cell)
    fields = {f.name for f in dataclasses.fields(next(iter(VARIANTS.values())))} - {"name"}
    assert set(header[1:]) | set(re.findall(r"`(\w+)=", note)) == fields


def ast_literal(text):
    import ast

    return ast.literal_eval(text)


@pytest.fixture(scope="module")
def griffe_examples():
    spec = importlib.util.spec_from_file_location("vit_keras_docs_griffe_examples", DOCS / "griffe_examples.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shown_setup_defines_what_the_doctest_setup_does(griffe_examples):
    """The lines the API pages show for the doctest setup's names make the same objects as tests/doctest_setup.py."""
    import numpy as np

    from tests import doctest_setup

    assert set(doctest_setup.EXAMPLE_NAMES) | set(doctest_setup.SESSION_FILES) <= set(griffe_examples.SETUP)
    namespace = {}
    for name in ("np", "keras", "vit_keras", "tiny_model", "images", "labels"):
        code = "\n".join(griffe_examples.SETUP[name])
        exec(compile(code, f"setup of {name}", "exec"), namespace)  # noqa: S102 (the docs' own lines)
    assert namespace["tiny_model"].get_config() == doctest_setup.tiny_model().get_config()
    np.testing.assert_array_equal(namespace["images"], doctest_setup.EXAMPLE_NAMES["images"]())
    np.testing.assert_array_equal(namespace["labels"], doctest_setup.EXAMPLE_NAMES["labels"]())


def _example_sections(docstring: str):
    """The code (prompts removed) of each `Examples:` section of a docstring."""
    for section in re.split(r"^\s*Examples:[ \t]*$", docstring, flags=re.MULTILINE)[1:]:
        yield "\n".join(line.strip()[4:] for line in section.splitlines()
                        if line.strip().startswith((">>> ", "... ")))


def test_every_api_example_defines_the_setup_names_it_uses(griffe_examples):
    """Every docstring example of the package, as the API pages show it, defines each doctest-setup name it uses
    before using it; `tiny_model` etc. in an example that defines nothing is the defect this guards against."""
    import ast

    setup_names = set(griffe_examples.SETUP)
    checked = 0
    for path in sorted((ROOT / "vit_keras").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.ClassDef))]
        for node in nodes:
            docstring = ast.get_docstring(node, clean=True)
            if not docstring or "Example" not in docstring:
                continue
            shown = griffe_examples.with_setup(griffe_examples.EXAMPLE_HEADING.sub(r"\1Examples:", docstring))
            for code in _example_sections(shown):
                used = {name for name in setup_names if re.search(rf"(?<![\w.]){name}\b", code)}
                for name in used:
                    first_use = re.search(rf"(?<![\w.]){name}\b", code).start()
                    assert griffe_examples._defines(code[:first_use + len(name) + 40], name), (
                        f"{path.relative_to(ROOT)}: an example uses {name} without defining it:\n{code[:400]}")
                checked += 1
    assert checked > 100, checked


def test_setup_lines_follow_dependencies(griffe_examples):
    assert griffe_examples.setup_lines("tflite_predict(tflite_file, images)") == [
        "import numpy as np", "import vit_keras", *griffe_examples.SETUP["tiny_model"],
        *griffe_examples.SETUP["images"], *griffe_examples.SETUP["tflite_file"]]
    assert griffe_examples.setup_lines("tiny_model = 1\ntiny_model.summary()") == []


def test_table_code_of_several_words_may_wrap_one_word_may_not(hooks):
    html = "<p><code>a b</code></p><table><td><code>a b</code> <code>augreg-imagenet21k</code></td></table>"
    assert hooks.mark_wrappable_code(html) == ('<p><code>a b</code></p><table><td><code class="vk-words">a b</code>'
                                               ' <code>augreg-imagenet21k</code></td></table>')


def test_the_changelog_has_the_current_version_and_the_header_shows_it(hooks):
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(vit_keras.__version__)}\b", changelog, re.MULTILINE), "no heading"
    assert (DOCS / "changelog.md").read_text(encoding="utf-8").strip() == '--8<-- "CHANGELOG.md"'
    assert hooks.package_version() == vit_keras.__version__
    assert hooks.on_config({"site_name": "vit_keras"})["site_name"] == f"vit_keras {vit_keras.__version__}"


# --- the browser check (scripts/docs_check.py), where Chromium is installed -------------------------------------

CHROMIUM = next((shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")
                 if shutil.which(name)), None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)")
BAD_PAGE = """<!doctype html><html><head><style>
body { margin: 0; } article { width: 600px; } pre > code { display: block; overflow: auto; white-space: pre; }
</style></head><body><article>
<pre><code>short line
a line far too long for a column of six hundred pixels: {long}</code></pre>
<table><tr><th>name</th></tr><tr><td><code>{long_name}</code></td></tr></table>
<table style="width: 60px"><tr><td>
<code style="word-break: break-all; white-space: normal">augreg-imagenet21k+imagenet2012</code></td></tr></table>
</article></body></html>"""


def _docs_check(*args):
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "docs_check.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@needs_chromium
def test_docs_check_finds_clipped_code_wide_tables_and_broken_names(tmp_path):
    (tmp_path / "index.html").write_text(BAD_PAGE.replace("{long}", "x" * 120).replace("{long_name}", "y" * 150))
    result = _docs_check(tmp_path, "--width", 800)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "code block clipped by" in result.stdout, result.stdout
    assert "table 1" in result.stdout and "columns hidden behind a scroll bar" in result.stdout, result.stdout
    assert "broken across lines: 'augreg-imagenet21k+imagenet2012'" in result.stdout, result.stdout
    assert "the page scrolls sideways" in result.stdout, result.stdout
    (tmp_path / "index.html").write_text("<html><body><article><pre><code>fits</code></pre></article></body></html>")
    fine = _docs_check(tmp_path, "--width", 800)
    assert fine.returncode == 0 and fine.stdout.strip().endswith("OK"), fine.stdout + fine.stderr


@pytest.mark.slow
@needs_chromium
def test_the_site_fits_1280_and_1400_pixels(tmp_path):
    """The built site's busiest pages at 1280 and 1400 px (the docs check's default widths): no clipped or wrapped
    code, no hidden table columns, no sideways scroll, no broken names (`make docs-check` runs every page)."""
    env = {**os.environ, "KERAS_HOME": str(tmp_path / "keras"), "MPLCONFIGDIR": str(tmp_path / "mpl"),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stderr[-3000:]
    pages = ["index.html", "model-zoo/index.html", "loading/index.html", "migration/index.html",
             "recipes/embeddings/index.html", "recipes/finetune-folder/index.html", "api/configs/index.html",
             "troubleshooting/index.html", "gpu/index.html", "recipes/zeroshot-serving/index.html"]
    result = _docs_check(tmp_path / "site", "--pages", *pages)
    assert "at 1280 and 1400 px" in result.stdout, result.stdout
    assert result.returncode == 0, result.stdout + result.stderr


def _message(call) -> str:
    import warnings

    try:
        with warnings.catch_warnings():  # a model built against its checkpoint's numerics warns first
            warnings.simplefilter("ignore")
            call()
    except Exception as error:  # noqa: BLE001 (any error: its message is what the page quotes)
        return str(error)
    raise AssertionError("no error was raised")


def test_troubleshooting_quotes_the_messages_the_package_gives(tmp_path):
    """Each entry of the troubleshooting page quotes an error as the package words it: the errors are raised here
    and the words the page quotes are looked for in them, so a reworded message fails this test until the page
    follows."""
    import json

    import numpy as np
    from safetensors.numpy import load_file, save_file

    from vit_keras.extras import require
    from vit_keras.images import naflex_patches

    page = (DOCS / "troubleshooting.md").read_text(encoding="utf-8")
    timm_dir = ROOT / "tests" / "fixtures" / "family" / "timm_avg_fcnorm" / "checkpoint"
    tiny = dict(patch_size=8, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=96)

    def copy(name, edit_config=None, edit_tensors=None):
        target = tmp_path / name
        target.mkdir()
        config = json.loads((timm_dir / "config.json").read_text())
        tensors = load_file(str(timm_dir / "model.safetensors"))
        (target / "config.json").write_text(json.dumps(edit_config(config) if edit_config else config))
        save_file(edit_tensors(tensors) if edit_tensors else tensors, str(target / "model.safetensors"))
        return str(target)

    def with_nan(tensors):
        key = sorted(tensors)[3]
        tensors[key] = tensors[key].copy()
        tensors[key].flat[0] = np.nan
        return tensors

    whole = tmp_path / "whole"
    whole.mkdir()
    (whole / "config.json").write_text(json.dumps({"model_type": "siglip2", "vision_config": {}, "text_config": {}}))
    (tmp_path / "x.pth").write_bytes(b"PK\x03\x04")
    flexible = vit_keras.ViT(flexible=True, classes=2, **tiny)
    cases = {
        "is a gated repository and no token was sent": None,  # raised by the hub: tests/test_recipes.py
        "is not in the Hugging Face cache and HF_HUB_OFFLINE is set": None,  # tests/test_hub.py
        "is not a hub repository id; write ORG/NAME": lambda: vit_keras.from_pretrained("hf-hub:not a repo"),
        "holds a whole siglip2 model (text and vision); save its vision tower (Siglip2VisionModel)":
            lambda: vit_keras.from_pretrained(str(whole)),
        "is a PyTorch pickle file; vit_keras does not load pickles (unpickling can run code).":
            lambda: vit_keras.from_pretrained(str(tmp_path / "x.pth")),
        "is not a ViT vit_keras knows":
            lambda: vit_keras.from_pretrained(copy("arch", lambda c: {**c, "architecture": "convnext_tiny"})),
        "does not fit this model; nothing was loaded.": lambda: vit_keras.load_weights(
            vit_keras.ViT(image_size=32, classes=2, gelu_approximate=None, layer_norm_epsilon=None,
                          **{**tiny, "hidden_size": 64, "num_heads": 4}), str(timm_dir)),
        "has 1 NaN / 0 infinite values; the file is corrupt or was saved after training diverged. Nothing was "
        "loaded": lambda: vit_keras.from_pretrained(copy("nan", edit_tensors=with_nan)),
        "Unknown weights 'imagenet22k' for ViT-B/16. Did you mean":
            lambda: vit_keras.ViTB16(weights="imagenet22k"),
        "Image height 30 is not divisible by patch_size 16; use 16 or 32 instead.":
            lambda: vit_keras.ViT(image_size=30, classes=2, **{**tiny, "patch_size": 16}),
        "not a multiple of the patch size 16 on each side; resize it first": lambda: naflex_patches(
            [np.zeros((20, 32, 3))], patch_size=16, max_num_patches=16, resize=False),
        "expects 3 named input(s) with keys ['grid', 'mask', 'patches'], but it received 1 input tensors.":
            lambda: flexible(np.zeros((1, 32, 32, 3), "float32")),
        "it comes with the [inspection] extra of vit-keras3: pip install -e \".[inspection]\" in the vit_keras source "
        "tree": lambda: require("matplotlib_not_here", "inspection", "Drawing inspection figures"),
    }
    flat_page = " ".join(page.replace("*", "").split())
    for quoted, call in cases.items():
        assert quoted in flat_page, f"the page does not quote {quoted!r}"
        if call is not None:
            message = " ".join(_message(call).split())
            assert quoted in message, f"the package now says {message[:300]!r}, the page {quoted!r}"


# --- the home page's map, the extras table, where the source is ----------------------------------------------------

def _mkdocs_config() -> dict:
    import yaml

    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def _nav_pages(section) -> list[str]:
    """The page files of a nav section (nested sections and their index pages included)."""
    pages = []
    for item in section:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += _nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_home_table_leads_to_every_guide_page():
    """Each User guide page (zero-shot, dense features, GPU included) and the Recipes are a row of the home page's
    table, so that a reader finds them from the first page."""
    nav = {next(iter(item)): next(iter(item.values())) for item in _mkdocs_config()["nav"]}
    home = (DOCS / "index.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"^\|.*\]\(([^)#]+)", home, re.MULTILINE)) | set(
        re.findall(r"\]\(([^)#]+)", "\n".join(line for line in home.splitlines() if line.startswith("|"))))
    wanted = set(_nav_pages(nav["User guide"])) | {"recipes/index.md"}
    assert wanted <= linked, f"pages the home table does not lead to: {sorted(wanted - linked)}"


def test_the_extras_table_names_every_extra():
    text = (DOCS / "getting-started.md").read_text(encoding="utf-8")
    table = text[text.index("| extra | brings | needed for |"):]
    table = table[:table.index("\n\n")]
    named = {name for row in _rows(table) for name in re.findall(r"`([a-z-]+)`", row[0])}
    assert named == _setup_extras(), f"extras not in the table: {sorted(_setup_extras() - named)}"


def test_the_source_repository_is_named_in_setup_cfg_mkdocs_and_the_readme():
    import configparser

    parser = configparser.ConfigParser()
    parser.read(ROOT / "setup.cfg")
    urls = dict(line.split(" = ", 1) for line in parser["metadata"]["project_urls"].strip().splitlines())
    source = urls["Source"]
    assert re.fullmatch(r"https://\S+", source), source
    assert _mkdocs_config()["repo_url"] == source
    assert source in README.read_text(encoding="utf-8")
    assert source in (DOCS / "getting-started.md").read_text(encoding="utf-8")


def test_the_user_gpu_page_leaves_the_projects_own_device_setup_to_contributing():
    """Running on a GPU is about the user's GPU; bringing wheels to an offline GPU machine for the project's
    benchmark (the ignored .gpu/ folder, pip download) is the contributors' business."""
    setup = (".git/info/exclude", ".gpu/whl", "pip download")
    gpu = (DOCS / "gpu.md").read_text(encoding="utf-8")
    contributing = (DOCS / "contributing.md").read_text(encoding="utf-8")
    assert not [words for words in setup if words in gpu], "docs/gpu.md carries the offline device set-up"
    assert all(words in contributing for words in setup)


TIME = re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s|min|minutes?|seconds?|hours?)\b")


def test_every_recipe_states_its_hardware_and_time():
    """Each recipe says what it runs on and how long it took there (a measurement, with the machine named), in its
    header and in the Recipes page's table."""
    import ast

    index = (DOCS / "recipes" / "index.md").read_text(encoding="utf-8")
    assert "## Hardware and time" in index, "docs/recipes/index.md has no hardware and time section"
    section = index[index.index("## Hardware and time"):]
    section = section[:section.find("\n## ", 1) if "\n## " in section[1:] else len(section)]
    for path in sorted(RECIPES.glob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        assert "Hardware and time:" in doc, f"{path.name} states no hardware and time in its header"
        stated = " ".join(doc[doc.index("Hardware and time:"):].split())
        assert re.search(r"\b(?:CPU|GPU)\b", stated) and TIME.search(stated), (path.name, stated[:300])
        assert "Intel Xeon" in stated or "GPU" in stated, (path.name, stated[:300])
        row = next((line for line in section.splitlines() if f"`recipes/{path.name}`" in line), None)
        assert row is not None and TIME.search(row), f"the Recipes page's table has no time for {path.name}"
