"""Query a TF Serving model with image files (step 2 of 2, after `serve_export.py`).

    python recipes/serve_query.py photos/red/0.jpg --server http://localhost:8501 --model-name vit
    python recipes/serve_query.py photos/red/0.jpg --saved-model models/vit/1   # no server: TensorFlow alone

With `--server`, the images go to TF Serving's REST API as base64 (`{"b64": ...}`) to the
`serve_bytes` signature. With `--saved-model` instead, the same request is answered in this process:
the SavedModel is loaded with TensorFlow alone (`tf.saved_model.load`, as TF Serving loads it) and
its `serve_bytes` signature is called with the same bytes. Either way it prints each image's top
classes; an image that cannot be decoded is reported by `image_ok` / `image_error`, never answered
with another image's classes. Needs only TensorFlow, not vit_keras.

Hardware and time: any CPU with TensorFlow; the server does the work. Measured on a 2-core Intel
Xeon (AVX-512, AMX) whose cores other jobs shared (load about 10), so an upper bound there: the test
suite's test of `serve_export.py` and this script (`--saved-model`, three images) took 53 s in all.
"""

import argparse
import base64
import json
import urllib.request


def query_server(server: str, model_name: str, files: list[bytes]) -> list[dict]:
    body = {
        "signature_name": "serve_bytes",
        "instances": [{"b64": base64.b64encode(data).decode("ascii")} for data in files],
    }
    request = urllib.request.Request(
        f"{server}/v1/models/{model_name}:predict",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.load(response)["predictions"]


def query_saved_model(path: str, files: list[bytes]) -> list[dict]:
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serve_bytes"]
    outputs = {key: value.numpy() for key, value in serve(image_bytes=tf.constant(files)).items()}
    rows = []
    for i in range(len(files)):
        row = {key: np.asarray(value[i]).tolist() for key, value in outputs.items()}
        row["top_k_labels"] = [label.decode() for label in row.get("top_k_labels", [])]
        row["image_error"] = row["image_error"].decode()
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", help="TF Serving's REST address, e.g. http://localhost:8501")
    where.add_argument("--saved-model", help="a SavedModel version directory, e.g. models/vit/1")
    parser.add_argument(
        "--model-name", default="vit", help="TF Serving's MODEL_NAME (with --server)"
    )
    args = parser.parse_args(argv)

    files = []
    for path in args.images:
        with open(path, "rb") as f:
            files.append(f.read())
    rows = (
        query_server(args.server, args.model_name, files)
        if args.server
        else query_saved_model(args.saved_model, files)
    )
    for path, row in zip(args.images, rows):
        if not row["image_ok"]:
            print(f"{path}: not served: {row['image_error']}")
            continue
        labels = row.get("top_k_labels") or [str(c) for c in row["top_k_classes"]]
        best = ", ".join(
            f"{label} {score:.3f}" for label, score in zip(labels, row["top_k_scores"])
        )
        print(f"{path}: {best}")


if __name__ == "__main__":
    main()
