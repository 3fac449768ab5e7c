"""Image-text checkpoints by hub id: the vision readers' download (`vit_keras.weights.hub`: config.json, the
image processor's config, the safetensors weights, all verified) plus the tokenizer files, from the same commit.

Example (downloads on first use, then reads the cache)::

    materialize("hf-hub:openai/clip-vit-base-patch32")
"""

from __future__ import annotations

import os

from vit_keras.weights import hub
from vit_keras.zeroshot.tokenizer import TOKENIZER_CONFIG_NAME, TOKENIZER_NAME


def materialize(source: str, *, revision=None, token=None, cache_dir=None) -> str:
    """The local snapshot directory of `source` with its weights and tokenizer files."""
    from huggingface_hub import errors, hf_hub_download

    snapshot = hub.materialize(source, revision=revision, token=token, cache_dir=cache_dir)
    repo_id, _ = hub.parse(source, revision)
    commit = os.path.basename(snapshot)
    missing = errors.LocalEntryNotFoundError if hub.offline() else errors.RemoteEntryNotFoundError
    for name in (TOKENIZER_NAME, TOKENIZER_CONFIG_NAME):
        try:
            path = hf_hub_download(repo_id, name, revision=commit, cache_dir=cache_dir, token=token,
                                   local_files_only=hub.offline())
        except missing:
            if hub.offline() and name == TOKENIZER_NAME:
                raise hub.HubError(f"{name} of {source} is not in the Hugging Face cache and {hub.OFFLINE_ENV} is "
                                   f"set: run once online to download it, or unset {hub.OFFLINE_ENV}.") from None
            continue  # not in the repository: refused when the tokenizer is read, naming what it has instead
        hub.verify(path, hub.file_url(repo_id, name, commit))
    return snapshot
