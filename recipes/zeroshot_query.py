"""Classify image files into labels written as words, on a served zero-shot model (step 2 of 2,
after `zeroshot_export.py`).

    python recipes/zeroshot_query.py cat.jpg dog.jpg --labels "cat,dog,car" \\
        --server http://localhost:8501
    python recipes/zeroshot_query.py cat.jpg --labels "cat,dog" --saved-model models/zeroshot/1

Each label goes into `--template` ("a photo of a {}." by default) and is sent as text with the image
files to the `classify_image_bytes` signature, which tokenizes the texts and decodes the images
inside the model; it prints each image's labels, best first, with their scores (softmax over the
labels for CLIP, an independent sigmoid per label for SigLIP). With `--server` the request goes to
TF Serving's REST API; with `--saved-model` (no server) the same signature is called in this
process. Needs only TensorFlow, not vit_keras.

Hardware and time: any CPU with TensorFlow; the server does the work. Measured on a 2-core Intel
Xeon (AVX-512, AMX) whose cores other jobs shared (load about 10), so an upper bound there: the test
suite's run with `--saved-model` (two images, two labels, a tiny SigLIP checkpoint) took 41 s.
"""

import argparse
import base64
import json
import urllib.error
import urllib.request

SIGNATURE = "classify_image_bytes"


def query_server(
    server: str, model_name: str, files: list[bytes], texts: list[str]
) -> list[list[float]]:
    body = {
        "signature_name": SIGNATURE,
        "inputs": {
            "image_bytes": [{"b64": base64.b64encode(data).decode("ascii")} for data in files],
            "texts": texts,
        },
    }
    request = urllib.request.Request(
        f"{server}/v1/models/{model_name}:predict",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)["outputs"]["scores"]
    except urllib.error.HTTPError as error:  # TF Serving says why in the body (e.g. an unknown signature)
        raise SystemExit(
            f"{server} refused the request ({error.code}): {error.read().decode(errors='replace')[:500]}"
        ) from None


def query_saved_model(path: str, files: list[bytes], texts: list[str]) -> list[list[float]]:
    import tensorflow as tf

    signatures = tf.saved_model.load(path).signatures
    if SIGNATURE not in signatures:
        raise SystemExit(
            f"{path} has no {SIGNATURE} signature (it has {sorted(signatures)}): export it again with "
            "recipes/zeroshot_export.py, which writes it for every model with a tokenizer."
        )
    classify = signatures[SIGNATURE]
    return (
        classify(image_bytes=tf.constant(files), texts=tf.constant(texts))["scores"]
        .numpy()
        .tolist()
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+", help="image files (JPEG, PNG, GIF, BMP)")
    parser.add_argument(
        "--labels", required=True, help='comma-separated class names, e.g. "cat,dog,car"'
    )
    parser.add_argument("--template", default="a photo of a {}.", help="the prompt, {} the label")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--server", help="TF Serving's REST address, e.g. http://localhost:8501")
    where.add_argument("--saved-model", help="the SavedModel directory, e.g. models/zeroshot/1")
    parser.add_argument(
        "--model-name", default="zeroshot", help="TF Serving's MODEL_NAME (with --server)"
    )
    args = parser.parse_args(argv)

    labels = [label.strip() for label in args.labels.split(",") if label.strip()]
    if not labels or "{}" not in args.template:
        parser.error("--labels needs at least one label and --template a {} for it")
    texts = [args.template.replace("{}", label) for label in labels]
    files = []
    for path in args.images:
        with open(path, "rb") as f:
            files.append(f.read())
    scores = (
        query_server(args.server, args.model_name, files, texts)
        if args.server
        else query_saved_model(args.saved_model, files, texts)
    )
    for path, row in zip(args.images, scores):
        ranked = sorted(zip(labels, row), key=lambda pair: -pair[1])
        print(f"{path}: " + ", ".join(f"{label} {score:.4f}" for label, score in ranked))


if __name__ == "__main__":
    main()
