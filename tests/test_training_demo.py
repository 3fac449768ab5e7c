"""The demo's path on a few steps (both stages, resampled position embeddings, logs, demo steps), and its export
and inspection steps on a trained digits model, held to the deployment agreement targets."""

import os

import keras
import pytest

from vit_keras import demo

EPOCHS = 10  # ~97% held-out with 4x4 patches; fewer leaves near-ties that int8 flips


@pytest.mark.slow
def test_demo_runs_both_stages_and_every_demo_step(tmp_path, monkeypatch, capsys):
    seen = []
    # Export and inspection have their own tests; here the demo's own steps and the step protocol are checked.
    monkeypatch.setattr(demo.steps, "DEMO_STEPS", [demo.save_and_reload, lambda *args: seen.append(args)])
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


@pytest.mark.slow
@pytest.mark.numerics
def test_trained_digits_model_meets_the_export_agreement_targets(tmp_path, record_property):
    # A trained model, not a random one: quantisation flips near-ties, and an untrained model is all near-ties.
    # 4x4 patches (a 2x2 grid) train to ~97% in seconds where the demo's 2x2 patches need a minute.
    keras.utils.set_random_seed(0)
    x_train, y_train = demo.digits_at(demo.PRETRAIN_SIZE, "train")
    x_test, y_test = demo.digits_at(demo.PRETRAIN_SIZE, "test")
    model = demo.build_demo_model(demo.PRETRAIN_SIZE, patch_size=4, num_layers=2)
    steps = EPOCHS * -(-len(x_train) // 64)
    model.compile(optimizer=keras.optimizers.Adam(keras.optimizers.schedules.CosineDecay(3e-3, steps)),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    model.fit(x_train, y_train, batch_size=64, epochs=EPOCHS, verbose=0)
    accuracy = model.evaluate(x_test, y_test, verbose=0)[1]
    record_property("keras_accuracy", round(accuracy, 4))
    record_property("bound:keras_accuracy", ">= 0.9")
    # A guard (worst measured 96.94% across the 7 settings of `make test-numerics` on an AVX2 EPYC: 3.3x margin).
    assert accuracy >= 0.9, "the model must be trained for agreement to mean anything"

    data = demo.DemoData(x_test, y_test, x_train)
    rows = {row.format: row for row in demo.export_for_deployment(model, data, str(tmp_path))}
    agreement = {name: row.top1_agreement for name, row in rows.items()}
    print("\ntop-1 agreement with Keras on 360 held-out digits: "
          + ", ".join(f"{name} {value:.2%}" for name, value in agreement.items()))
    for name, value in agreement.items():
        record_property(f"top1_agreement_{name}", round(value, 4))
        record_property(f"max_abs_diff_{name}", float(f"{rows[name].max_abs_diff:.3g}"))
    targets = {"saved_model": ">= 1.0", "tflite_float32": ">= 0.99", "tflite_float16": ">= 0.99",
               "tflite_dynamic_int8": ">= 0.985", "tflite_int8": ">= 0.97"}
    for name, target in targets.items():
        record_property(f"bound:top1_agreement_{name}", target)
    # The deployment targets, export.AGREEMENT_TARGETS (which export_for_deployment also enforces): requirements,
    # not fitted bounds. Across the 7 settings of `make test-numerics` on an AVX2 EPYC the worst are int8 98.89%
    # (2.7x inside 97%) and dynamic int8 99.44% (2.7x inside 98.5%).
    assert agreement["saved_model"] == 1.0 and agreement["tflite_float32"] >= 0.99
    assert agreement["tflite_float16"] >= 0.99
    assert agreement["tflite_dynamic_int8"] >= 0.985
    assert agreement["tflite_int8"] >= 0.97
    assert sorted(os.listdir(tmp_path / "export")) == [
        "saved_model", "vit_dynamic_int8.tflite", "vit_float16.tflite", "vit_float32.tflite", "vit_int8.tflite",
    ]

    paths = demo.write_inspection_figures(model, data, str(tmp_path))
    names = ["attention_maps.png", "attention_distance.png", "position_embedding_similarity.png",
             "embedding_filters.png"]
    assert [os.path.basename(path) for path in paths] == names
    for path in paths:
        with open(path, "rb") as file:
            assert file.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize(path) > 1000, path
