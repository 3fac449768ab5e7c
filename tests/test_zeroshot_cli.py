"""`vit-keras zeroshot`: image files classified into labels given as words, with the reference checkpoints."""

import os

import numpy as np
import pytest

from tests import zeroshot_cases as cases
from vit_keras import zeroshot
from vit_keras.cli import SUBCOMMANDS, main


def _write_images(tmp_path, case, sizes):
    from PIL import Image

    images = np.load(os.path.join(cases.case_dir(case), "input.npy")).astype(np.uint8)
    paths = []
    for index, (image, size) in enumerate(zip(images, sizes)):
        path = str(tmp_path / f"{case}_{index}.png")
        Image.fromarray(image).resize(size[::-1]).save(path)
        paths.append(path)
    return paths


@pytest.mark.slow
@pytest.mark.parametrize("case", ["clip", "siglip2"])
def test_zeroshot_prints_each_images_labels_as_the_api_scores_them(case, tmp_path, capsys):
    assert "zeroshot" in SUBCOMMANDS
    paths = _write_images(tmp_path, case, [(32, 32), (32, 32)])
    checkpoint = os.path.join(cases.case_dir(case), "checkpoint")
    labels = ["cat", "dog", "red car"]
    code = main(["zeroshot", *paths, "--model", checkpoint, "--labels", " cat,dog , red car", "--top", "2",
                 "--template", "a photo of a {}.", "--template", "{}",
                 # SigLIP 2 resizes to the patch budget: 16 patches of 8 keep the 32x32 images as they are.
                 "--max-patches", "16"])
    assert code == 0, capsys.readouterr().err
    lines = capsys.readouterr().out.splitlines()
    assert [lines[0], lines[3]] == paths and len(lines) == 6
    model = zeroshot.from_pretrained(checkpoint)
    images = np.load(os.path.join(cases.case_dir(case), "input.npy")).astype(np.uint8).astype(np.float32)
    scores = model.classify(images, labels, templates=["a photo of a {}.", "{}"])
    for row, first in zip(scores, (1, 4)):
        best = int(np.argmax(row))
        assert lines[first].split(maxsplit=1)[1] == labels[best]
        assert float(lines[first].split()[0]) == pytest.approx(float(row[best]), abs=1e-4)  # printed to 4 places


def test_zeroshot_refuses_bad_labels_and_missing_files(tmp_path, capsys):
    checkpoint = os.path.join(cases.case_dir("clip"), "checkpoint")
    paths = _write_images(tmp_path, "clip", [(32, 32)])
    assert main(["zeroshot", *paths, "--model", checkpoint, "--labels", "cat,,dog"]) == 2
    assert "empty label" in capsys.readouterr().err
    assert main(["zeroshot", *paths, "--model", checkpoint, "--labels", "cat,cat"]) == 2
    assert "repeats ['cat']" in capsys.readouterr().err
    assert main(["zeroshot", str(tmp_path / "nope.png"), "--model", checkpoint, "--labels", "cat"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["zeroshot", *paths, "--model", str(tmp_path), "--labels", "cat"]) == 2
    assert "has no config.json" in capsys.readouterr().err
