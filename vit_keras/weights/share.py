"""Share a fine-tuned model on the Hugging Face Hub as a timm or transformers repository: `save_pretrained` into a
temporary directory, a model card (`README.md`) that says what the model is and how it was made, then
`huggingface_hub.HfApi().upload_folder`.

Example (uploads, with a token that may write to the repository; `prepare_folder` shows what is uploaded)::

    push_to_hub(model, "me/vit-small-flowers", format="timm", metrics={"top1": 0.93})
"""

from __future__ import annotations

import json
import os
import tempfile

from vit_keras.weights.save import FORMATS, save_pretrained

CARD_NAME = "README.md"
_LIBRARIES = {"timm": "timm", "transformers": "transformers"}


def _yaml_value(value) -> str:
    return json.dumps(value)  # JSON scalars and lists are valid YAML flow values


def model_card(config_json: dict, format: str, *, source: str | None = None, recipe: str | None = None,
               metrics: dict | None = None, metadata: dict | None = None) -> str:
    """The README.md of a shared model: YAML front matter (library, tags, `metadata`) and a description of the
    architecture, its source checkpoint, the training recipe and the metrics, each only when known.

    Example:
        >>> print(model_card({"architecture": "vit_base_patch16_224", "model_args": {}}, "timm").splitlines()[1])
        library_name: "timm"
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}.")
    front = {"library_name": _LIBRARIES[format], "tags": ["image-classification", "vision-transformer", "vit_keras"]}
    front.update(metadata or {})
    lines = ["---", *[f"{key}: {_yaml_value(value)}" for key, value in front.items()], "---", ""]
    if format == "timm":
        name = config_json["architecture"]
        lines += [f"# {name} (fine-tuned with vit_keras)", "",
                  f"A timm `{name}` with these `model_args`:", "", "```json",
                  json.dumps(config_json.get("model_args", {}), indent=2), "```", "",
                  "```python", "import timm", "model = timm.create_model(\"hf-hub:<this repo>\", pretrained=True)",
                  "```"]
    else:
        kind = config_json["architectures"][0]
        lines += [f"# {kind} (fine-tuned with vit_keras)", "",
                  f"A transformers `{config_json['model_type']}` model (`{kind}`): hidden size "
                  f"{config_json['hidden_size']}, {config_json['num_hidden_layers']} layers, "
                  f"{config_json['num_attention_heads']} heads, patch {config_json['patch_size']}, image size "
                  f"{config_json['image_size']}.", "", "```python", "from transformers import AutoModel",
                  "model = AutoModel.from_pretrained(\"<this repo>\")", "```"]
    if source:
        lines += ["", "## Source checkpoint", "", source]
    if recipe:
        lines += ["", "## Training recipe", "", recipe]
    if metrics:
        lines += ["", "## Metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in metrics.items()]
    lines += ["", "Written by `vit_keras.save_pretrained` from a Keras model."]
    return "\n".join(lines) + "\n"


def prepare_folder(model, directory: str, *, format: str = "timm", source: str | None = None,
                   recipe: str | None = None, metrics: dict | None = None, model_card_metadata: dict | None = None,
                   **save_kwargs) -> str:
    """What `push_to_hub` uploads: `save_pretrained(model, directory, format)` plus the model card.

    Example:
        >>> import os
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> sorted(os.listdir(prepare_folder(model, "out", metrics={"top1": 0.93})))
        ['README.md', 'config.json', 'model.safetensors']
    """
    save_pretrained(model, directory, format=format, **save_kwargs)
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        config_json = json.load(f)
    card = model_card(config_json, format, source=source, recipe=recipe, metrics=metrics,
                      metadata=model_card_metadata)
    with open(os.path.join(directory, CARD_NAME), "w", encoding="utf-8") as f:
        f.write(card)
    return directory


def push_to_hub(model, repo_id: str, *, format: str = "timm", token: str | None = None, private: bool = False,
                commit_message: str = "Upload a vit_keras fine-tune", model_card_metadata: dict | None = None,
                source: str | None = None, recipe: str | None = None, metrics: dict | None = None,
                normalization=None, label_names=None):
    """Upload `model` to the Hub repository `repo_id` (created if needed) as a timm or transformers repository,
    with a model card; returns `upload_folder`'s commit info.

    `source` (the checkpoint it was fine-tuned from), `recipe` (how it was trained) and `metrics` (name -> value)
    go into the card; `model_card_metadata` into its YAML header (e.g. `{"license": "apache-2.0"}`).
    `normalization` and `label_names` as `save_pretrained`. Then `timm.create_model("hf-hub:" + repo_id,
    pretrained=True)` or `AutoModel.from_pretrained(repo_id)` loads it.

    Example (uploads; see `prepare_folder` for what)::

        push_to_hub(model, "me/vit-ft", format="transformers", token="hf_...")
    """
    from huggingface_hub import HfApi

    if format not in FORMATS:  # checked before anything is written or sent
        raise ValueError(f"format must be one of {FORMATS}, got {format!r}.")
    api = HfApi(token=token)
    with tempfile.TemporaryDirectory(prefix="vit_keras-push-") as tmp:
        folder = prepare_folder(model, os.path.join(tmp, "repo"), format=format, source=source, recipe=recipe,
                                metrics=metrics, model_card_metadata=model_card_metadata,
                                normalization=normalization, label_names=label_names)
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        return api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message,
                                 repo_type="model")
