"""The command line refuses bad flags and inputs with an error naming the flag (or file) and what it takes: exit
code 2, before any data is read or any model is built; never a raw trace from deep inside TensorFlow."""

import argparse
import os
import socket

import pytest

from vit_keras.cli import build_parser, main

BASE = {"train": ["train", "--dataset", "vit_keras_digits"],
        "pretrain": ["pretrain", "--dataset", "vit_keras_digits"]}

# Flags both commands declare through vit_keras.cli.arguments, with a value each refuses and the range it states.
SHARED_REFUSALS = [
    (["--num-layers", "0"], "argument --num-layers: must be a positive integer, got 0"),
    (["--patch-size", "0"], "argument --patch-size: must be a positive integer, got 0"),
    (["--patch-size", "-4"], "argument --patch-size: must be a positive integer, got -4"),
    (["--image-size", "0"], "argument --image-size: must be a positive integer, got 0"),
    (["--classes", "-1"], "argument --classes: must be a positive integer, got -1"),
    (["--steps", "0"], "argument --steps: must be a positive integer, got 0"),
    (["--steps-per-epoch", "-1"], "argument --steps-per-epoch: must be a positive integer, got -1"),
    (["--batch-size", "0"], "argument --batch-size: must be a positive integer, got 0"),
    (["--accumulation-steps", "0"], "argument --accumulation-steps: must be a positive integer, got 0"),
    (["--learning-rate", "0"], "argument --learning-rate: must be a number in (0, inf), got 0"),
    (["--learning-rate", "nan"], "argument --learning-rate: must be a number in (0, inf), got nan"),
    (["--warmup-steps", "-1"], "argument --warmup-steps: must be an integer >= 0, got -1"),
    (["--seed", "-3"], "argument --seed: must be an integer >= 0, got -3"),
    (["--backup-every", "0"], "argument --backup-every: must be a positive integer, got 0"),
    (["--tpu", "my tpu!"], "argument --tpu: expected 'local' (a TPU VM's own), a TPU name such as my-tpu, "
                           "grpc://host:port, or 'none' (the CPU); got 'my tpu!'"),
    (["--tpu", "grpc://10.0.0.2"], "argument --tpu: expected 'local'"),
    (["--tpu", "grpc://10.0.0.2:99999"], "argument --tpu: expected 'local'"),
]
PRETRAIN_REFUSALS = [
    (["--corruption-rate", "0"], "argument --corruption-rate: must be a number in (0, 1], got 0"),
    (["--corruption-rate", "1.5"], "argument --corruption-rate: must be a number in (0, 1], got 1.5"),
    (["--mask-rate", "-0.1"], "argument --mask-rate: must be a number in [0, 1], got -0.1"),
    (["--random-rate", "2"], "argument --random-rate: must be a number in [0, 1], got 2"),
    (["--target-grid", "0"], "argument --target-grid: must be a positive integer, got 0"),
]
TRAIN_REFUSALS = [
    (["--dropout", "1"], "argument --dropout: must be a number in [0, 1), got 1"),
    (["--weight-decay", "-1"], "argument --weight-decay: must be a number in [0, inf), got -1"),
    (["--mixup", "-0.5"], "argument --mixup: must be a number in [0, inf), got -0.5"),
    (["--randaugment", "0", "0.5"], "argument --randaugment: OPS must be a positive integer, got 0"),
    (["--randaugment", "2", "1.5"], "argument --randaugment: FACTOR must be a number in [0, 1], got 1.5"),
]
CASES = ([(command, *case) for command in BASE for case in SHARED_REFUSALS]
         + [("pretrain", *case) for case in PRETRAIN_REFUSALS] + [("train", *case) for case in TRAIN_REFUSALS])


@pytest.mark.parametrize("command, flags, message", CASES)
def test_bad_flag_values_are_refused_naming_flag_and_range(command, flags, message, tmp_path, capsys):
    output = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE[command], "--output-dir", str(output), *flags])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not output.exists()  # refused while parsing: nothing was trained or written


def _actions(command):
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {flag: action for action in subparsers.choices[command]._actions for flag in action.option_strings}


def test_train_and_pretrain_share_one_definition_of_their_common_flags():
    train, pretrain = _actions("train"), _actions("pretrain")
    shared = sorted(set(train) & set(pretrain) - {"-h", "--help"})
    assert {"--num-layers", "--patch-size", "--steps", "--learning-rate", "--tpu", "--output-dir",
            "--corruption-rate"} - set(pretrain) == set()
    assert len(shared) >= 20, shared
    for flag in shared:
        a, b = train[flag], pretrain[flag]
        # The same type object (not a copy that could drift) and the same choices.
        assert (a.type, a.choices, a.nargs) == (b.type, b.choices, b.nargs), flag


def test_good_values_pass_through(tmp_path):
    args = build_parser().parse_args([*BASE["pretrain"], "--output-dir", "run", "--corruption-rate", "1",
                                      "--mask-rate", "0", "--num-layers", "2", "--tpu", "grpc://10.0.0.2:8470"])
    assert (args.corruption_rate, args.mask_rate, args.num_layers, args.tpu) == (1.0, 0.0, 2, "grpc://10.0.0.2:8470")
    args = build_parser().parse_args([*BASE["train"], "--output-dir", "run", "--randaugment", "2", "0",
                                      "--tpu", "my-tpu-v3"])
    assert (args.randaugment, args.tpu) == ((2, 0.0), "my-tpu-v3")


# --- non-UTF-8 paths -----------------------------------------------------------------------------------------------

def test_non_utf8_paths_are_refused_by_name(tmp_path, capsys):
    # Python hands a file name with byte 0xff to sys.argv as the lone surrogate U+DCFF (surrogateescape).
    name = os.fsdecode(os.path.join(os.fsencode(str(tmp_path)), b"\xff.png"))
    with pytest.raises(SystemExit) as exit_info:
        main(["predict", name, "--model", "Ti/16", "--random-weights"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "is not valid UTF-8" in err and "\\xff.png" in err and "rename" in err
    with pytest.raises(SystemExit) as exit_info:
        main([*BASE["train"], "--output-dir", name[:-4]])
    assert exit_info.value.code == 2
    assert "argument --output-dir b'" in capsys.readouterr().err
    assert not os.path.exists(os.fsencode(name[:-4]))


# --- --tpu: a bad one is an error, at once ------------------------------------------------------------------------

def test_tpu_that_does_not_answer_is_a_clear_error_not_a_hang():
    from vit_keras.training.strategy import connect_tpu, on_tpu_vm

    with socket.socket() as probe:  # a port nothing listens on: bound, then released
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ValueError, match=rf"No TPU answers at 'grpc://127.0.0.1:{port}'.*tpu='local'"):
        connect_tpu(f"grpc://127.0.0.1:{port}")
    if not on_tpu_vm():
        with pytest.raises(ValueError, match=r"No TPU found at 'local' \(TPUs not found in the cluster\)"):
            connect_tpu("local")


# --- export: --class-names and Keras-quantized models --------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("cat\ndog\n\nbird\n", "line 3 is blank"),
    ("cat\n  \ndog\n", "line 2 is blank"),
    ("cat\ndog\ncat\n", "line 3 repeats 'cat' from line 1"),
    ("\n\n", "holds no class names"),
])
def test_class_names_file_with_a_blank_or_repeated_line_is_refused(text, message, tmp_path, capsys):
    names = tmp_path / "classes.txt"
    names.write_text(text)
    code = main(["export", str(tmp_path / "model"), "--format", "saved_model", "--model", "Ti/16",
                 "--class-names", str(names)])
    assert code == 2
    err = capsys.readouterr().err
    assert f"--class-names {str(names)!r} " in err and message in err
    assert not (tmp_path / "model").exists()


def test_class_names_trailing_blank_lines_and_crlf_are_fine(tmp_path):
    from vit_keras.cli.export import read_class_names

    names = tmp_path / "classes.txt"
    names.write_bytes(b"cat\r\ndog\r\n\r\n\n")
    assert read_class_names(str(names)) == ["cat", "dog"]


@pytest.mark.slow
def test_keras_quantized_model_to_tflite_says_what_to_do_instead(tmp_path, capsys, tiny_kwargs):
    import vit_keras

    model = vit_keras.ViT(image_size=32, classes=4, **tiny_kwargs)
    model.quantize("int8")
    path = str(tmp_path / "int8.keras")
    model.save(path)
    output = tmp_path / "vit.tflite"
    assert main(["export", str(output), "--format", "tflite", "--keras-model", path]) == 2
    err = capsys.readouterr().err
    assert "is quantized by Keras (model.quantize('int8'))" in err and "--quantization dynamic_int8" in err
    assert "MLIR" not in err and "tfl." not in err and not output.exists()
    assert os.listdir(tmp_path) == ["int8.keras"]
