"""The demo's path on a few steps: both stages, resampled position embeddings, logs, demo steps."""

import os

from vit_keras import demo


def test_demo_runs_both_stages_and_every_demo_step(tmp_path, monkeypatch, capsys):
    seen = []
    # Export and inspection have their own tests; here the demo's own steps and the step protocol are checked.
    monkeypatch.setattr(demo, "DEMO_STEPS", [demo.save_and_reload, lambda *args: seen.append(args)])
    code = demo.main(["--output-dir", str(tmp_path), "--pretrain-steps", "8", "--finetune-steps", "4"])
    out = capsys.readouterr().out
    assert code in (0, 1)  # 1: below the 95% bar, expected after 12 steps
    assert "'resampled': True, 'head': 'zero-init'" in out and "held-out accuracy" in out
    assert "reloaded with safe_mode=True: identical predictions" in out
    (model, data, output_dir), = seen
    assert model.input_shape == (None, demo.FINETUNE_SIZE, demo.FINETUNE_SIZE, 3)
    size = demo.FINETUNE_SIZE
    assert data.test_images.shape == (360, size, size, 3) and data.test_labels.shape == (360,)
    assert data.train_images.shape == (1437, size, size, 3)
    assert output_dir == str(tmp_path)
    for stage in ("pretrain", "finetune"):
        assert os.listdir(tmp_path / stage / "logs" / "train")
        assert (tmp_path / stage / "checkpoints" / "last.keras").is_file()
