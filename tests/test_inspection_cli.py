"""`vit-keras inspect`: a saved .keras model and image files in, PNG figures out."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from vit_keras import ViT
from vit_keras.cli import SUBCOMMANDS, build_parser, main
from vit_keras.inspection import FIGURE_NAMES


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inspect")
    keras.utils.set_random_seed(0)
    model = ViT(image_size=16, patch_size=4, hidden_size=48, num_layers=2, num_heads=3, mlp_dim=64, classes=4)
    model_path = folder / "tiny.keras"
    model.save(model_path)
    image = np.random.default_rng(0).integers(0, 256, size=(20, 24, 3), dtype=np.uint8)
    image_path = folder / "photo.png"
    keras.utils.save_img(image_path, image)
    return folder, str(model_path), str(image_path)


def test_inspect_is_a_registered_subcommand():
    assert "inspect" in SUBCOMMANDS
    args = build_parser().parse_args(["inspect", "a.png", "b.png", "--layer", "0", "--out", "figs"])
    assert args.images == ["a.png", "b.png"] and args.layer == 0 and args.out == "figs"


@pytest.mark.slow
def test_inspect_writes_the_figures(saved, capsys):
    folder, model_path, image_path = saved
    out = folder / "figures"
    assert main(["inspect", image_path, image_path, "--model", model_path, "--out", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / name) for name in FIGURE_NAMES]
    for name in FIGURE_NAMES:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--model", "missing.keras"], "does not exist"),
        (["--model", "Q/99"], "must be one of"),
        (["--layer", "7"], "Unknown layer index 7"),
    ],
)
def test_inspect_reports_bad_arguments(saved, capsys, extra, message):
    folder, model_path, image_path = saved
    argv = ["inspect", image_path, "--model", model_path, "--out", str(folder / "bad"), *extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_inspect_reports_a_missing_image(saved, capsys):
    folder, model_path, _ = saved
    assert main(["inspect", str(folder / "nope.png"), "--model", model_path, "--out", str(folder / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_models_without_preprocessing_get_images_in_minus_one_to_one():
    from vit_keras.cli.inspect import _rescales

    small = dict(image_size=16, patch_size=4, hidden_size=48, num_layers=1, num_heads=3, mlp_dim=8, classes=2)
    assert _rescales(ViT(**small))
    assert not _rescales(ViT(include_preprocessing=False, **small))
