"""The recipes run in this process (`main(argv)` of each script): what each refuses before any model is read, that
it leaves your files alone, and what the serving query says of a SavedModel without its signature.
tests/test_recipes.py runs them as a user does, each in a process of its own."""

import importlib.util
import pathlib

import pytest

RECIPES = pathlib.Path(__file__).resolve().parent.parent / "recipes"


def recipe(name: str):
    """The module of recipes/NAME.py (its `main(argv)`), loaded without running it."""
    spec = importlib.util.spec_from_file_location(f"recipe_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _users_folder(path: pathlib.Path) -> pathlib.Path:
    (path / "data").mkdir(parents=True)
    (path / "thesis.txt").write_text("mine")
    return path


def _intact(path: pathlib.Path) -> bool:
    return (path / "thesis.txt").read_text() == "mine" and (path / "data").is_dir()


@pytest.mark.parametrize("script, argv, existing", [
    ("zeroshot_export", ["--export-dir", "{dir}"], "{dir}"),
    ("serve_export", ["--export-dir", "{dir}", "--version", "2"], "{dir}/2"),
])
def test_an_export_recipe_refuses_an_existing_folder_and_leaves_it_intact(tmp_path, capsys, script, argv, existing):
    folder = _users_folder(pathlib.Path(existing.format(dir=tmp_path / "mydir")))
    # --model names nothing that exists: the refusal comes before any model is read.
    argv = [arg.format(dir=tmp_path / "mydir") for arg in argv] + ["--model", str(tmp_path / "no-model")]
    with pytest.raises(SystemExit) as exit_info:
        recipe(script).main(argv)
    assert exit_info.value.code == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert _intact(folder)


def test_finetune_folder_refuses_a_learning_rate_of_zero(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        recipe("finetune_folder").main([str(tmp_path), "--learning-rate", "0"])
    assert exit_info.value.code == 2
    assert "argument --learning-rate: must be a number > 0, got '0'" in capsys.readouterr().err


def test_the_command_line_twin_of_finetune_folder_trains_the_same_recipe():
    """docs/recipes/finetune-folder.md's `vit-keras train` command: the recipe's model, learning rate, warmup and
    validation schedule (5 evaluations), not the CLI's own defaults."""
    import argparse
    import shlex

    from vit_keras.cli import build_parser
    from vit_keras.cli.train import config_from_args

    page = (RECIPES.parent / "docs" / "recipes" / "finetune-folder.md").read_text(encoding="utf-8")
    command = page[page.index("vit-keras train "):]
    command = command[:command.index("\nvit-keras ")].replace("\\\n", " ").split("#")[0]
    args = build_parser().parse_args(shlex.split(command)[1:])
    module = recipe("finetune_folder")
    assert args.model == module.DEFAULT_MODEL and args.lora is None
    cli = config_from_args(args)
    own = module.config_for(argparse.Namespace(steps=args.steps, batch_size=args.batch_size, learning_rate=None,
                                               lora=None))
    fields = ("total_steps", "batch_size", "learning_rate", "warmup_steps", "steps_per_epoch", "schedule",
              "optimizer")
    assert {field: getattr(cli, field) for field in fields} == {field: getattr(own, field) for field in fields}


def test_the_zeroshot_query_names_a_missing_signature(tmp_path, capsys):
    import tensorflow as tf

    module = tf.Module()
    module.encode_image = tf.function(lambda images: {"image_features": images},
                                      input_signature=[tf.TensorSpec((None, 3), tf.float32)])
    tf.saved_model.save(module, str(tmp_path / "old"), signatures={"encode_image": module.encode_image})
    (tmp_path / "cat.jpg").write_bytes(b"\xff\xd8\xff")
    with pytest.raises(SystemExit) as exit_info:
        recipe("zeroshot_query").main([str(tmp_path / "cat.jpg"), "--labels", "cat,dog", "--saved-model",
                                       str(tmp_path / "old")])
    assert "has no classify_image_bytes signature (it has ['encode_image']): export it again" in str(
        exit_info.value)

