"""Find the Vision Transformer inside a Keras model and read its attention weights.

The probe re-calls the model's own layers: everything before the first `TransformerBlock` runs as
a sub-graph of the user's model (so their preprocessing, a ResNet stem, or an outer model the ViT
is nested in all apply), then each block is called with `return_attention_scores=True`. Nothing is
copied and the user's model is left unchanged.
"""

from __future__ import annotations

import keras
import numpy as np

from vit_keras.configs import resnet_stride
from vit_keras.layers import PatchEncoder, Patches, ResNetStem, TransformerBlock


def _graph_of(model):
    # A Sequential keeps its graph in a Functional of its own.
    return getattr(model, "_functional", None) or model


def _sub_layers(model):
    return list(getattr(model, "layers", None) or [])


def _find_path(model, seen=None):
    """The chain of nested models [model, ..., innermost] whose innermost holds the Transformer blocks."""
    seen = set() if seen is None else seen
    if id(model) in seen:
        return None
    seen.add(id(model))
    layers = _sub_layers(model)
    if any(isinstance(layer, TransformerBlock) for layer in layers):
        return [model]
    found = []
    for layer in layers:
        if isinstance(layer, keras.Model):
            path = _find_path(layer, seen)
            if path is not None:
                found.append(path)
    if len(found) > 1:
        names = ", ".join(repr(path[1].name if len(path) > 1 else path[0].name) for path in found)
        raise ValueError(
            f"Model {model.name!r} contains several Vision Transformers ({names}); pass the one to inspect."
        )
    return [model, *found[0]] if found else None


def _node_in(container, layer):
    """The call of `layer` that belongs to `container`'s graph."""
    graph = _graph_of(container)
    keys = getattr(graph, "_nodes", None)
    nodes = list(getattr(layer, "_inbound_nodes", []))
    if keys is not None:
        nodes = [node for index, node in enumerate(nodes) if f"{id(layer)}_ib-{index}" in keys]
    if len(nodes) != 1:
        raise ValueError(
            f"Cannot trace layer {layer.name!r} in model {container.name!r}: it is called {len(nodes)} times "
            "there. Inspection needs a functional model (keras.Model or Sequential) that calls it once."
        )
    return nodes[0]


def _block_argument(node, name):
    """A block call's token input (`"x"`, its first argument) or its `rope=` tables (None without RoPE)."""
    if name == "x":
        return node.arguments.args[0]
    return node.arguments.kwargs.get(name)


def _single(tensors, what):
    tensors = list(tensors)
    if len(tensors) != 1:
        raise ValueError(f"{what} takes {len(tensors)} tensors; inspection needs a single-input model.")
    return tensors[0]


def _first(layers, kind):
    matches = [layer for layer in layers if isinstance(layer, kind)]
    return matches[0] if matches else None


class AttentionProbe:
    """Read the attention weights of every Transformer block of a vit_keras model.

    Works on a `vit_keras.ViT` model, on a functional model built from vit_keras layers, and on a
    user's functional or Sequential model with a ViT nested inside (the user's layers before the
    ViT are applied). Hybrids (ResNet stem) and `classifier="gap"` models work alike.

    Attributes:
        blocks: the `TransformerBlock` layers, in order.
        patch_encoder, patches: the ViT's `PatchEncoder` and `Patches` layers.
        input_shape: `(H, W, C)` the model expects.
        image_size: `(H, W)` of the images the ViT itself sees (after the user's layers).
        grid_size: `(gh, gw)` patches (for a ViT built for any image size, the grid its position embeddings are
            stored at; `grid_for` gives the grid of the images at hand).
        patch_stride: `(sh, sw)` pixels between neighbouring patch centres (patch size x ResNet stride
            for hybrids).
        num_prefix_tokens: 1 with a class token, 0 for `classifier="gap"`.

    Example:
        >>> import vit_keras
        >>> probe = AttentionProbe(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48,
        ...                                      num_layers=2, num_heads=3, mlp_dim=96))
        >>> [a.shape for a in probe(np.zeros((1, 32, 32, 3)))]
        [(1, 3, 17, 17), (1, 3, 17, 17)]
    """

    def __init__(self, model):
        if not isinstance(model, keras.Model):
            raise ValueError(f"Expected a keras.Model, got {type(model).__name__}.")
        path = _find_path(model)
        if path is None:
            raise ValueError(
                f"Model {model.name!r} has no vit_keras TransformerBlock (no attention layers to inspect); "
                "pass a model built with vit_keras.ViT or one of its named variants."
            )
        self.model = model
        self.vit = path[-1]
        layers = _sub_layers(self.vit)
        self.blocks = [layer for layer in layers if isinstance(layer, TransformerBlock)]
        self.patch_encoder = _first(layers, PatchEncoder)
        self.patches = _first(layers, Patches)
        self.resnet = _first(layers, ResNetStem)
        if self.patch_encoder is None or self.patches is None:
            raise ValueError(
                f"Model {self.vit.name!r} has Transformer blocks but no Patches/PatchEncoder layer; inspection "
                "needs the patch grid. Build the model with vit_keras.ViT."
            )
        for container in path:
            if not getattr(container, "inputs", None):
                hint = f" or pass the ViT inside it ({self.vit.name!r}) directly" if container is not self.vit else ""
                raise ValueError(
                    f"Model {container.name!r} is not a functional model (no symbolic inputs); inspection "
                    f"needs a keras.Model built from keras.Input or a Sequential with an Input{hint}."
                )
        # One sub-model per level: from that level's input to the next level's input, and finally to the
        # input of the first block.
        self._stages = []
        for outer, inner in zip(path[:-1], path[1:]):
            node = _node_in(outer, inner)
            self._stages.append(
                keras.Model(
                    _single(outer.inputs, f"Model {outer.name!r}"),
                    _single(node.input_tensors, f"Model {inner.name!r}"),
                )
            )
        first = _node_in(self.vit, self.blocks[0])
        # A RoPE model's blocks also take the tables (`rope=`): the last stage computes them with the tokens.
        self._tables = [_block_argument(_node_in(self.vit, block), "rope") for block in self.blocks]
        self._stages.append(
            keras.Model(_single(self.vit.inputs, f"Model {self.vit.name!r}"),
                        [_block_argument(first, "x"), *[t for t in self._tables if t is not None]])
        )
        previous = first
        for block in self.blocks[1:]:
            node = _node_in(self.vit, block)
            if _block_argument(node, "x") is not _single(previous.output_tensors, "A block"):
                raise ValueError(
                    f"Block {block.name!r} does not take the previous block's output; inspection needs the "
                    "Transformer blocks of a ViT as one chain."
                )
            previous = node

        self.input_shape = tuple(_single(model.inputs, f"Model {model.name!r}").shape[1:])
        vit_input = _single(self.vit.inputs, f"Model {self.vit.name!r}").shape
        self.image_size = tuple(vit_input[1:3])
        self.grid_size = tuple(self.patch_encoder.grid_size)
        patch_grid = tuple(getattr(self.patches, "grid_size", (None, None)))
        if None not in patch_grid:
            # A fixed-size model's tokens follow its images' grid; its position table may be kept at another
            # (RADIO's bilinear_crop).
            self.grid_size = patch_grid
        self.num_prefix_tokens = int(self.patch_encoder.num_prefix_tokens)
        self.class_token = self.patch_encoder.class_token
        self.classifier = "token" if self.class_token else "gap"  # vit_jax's name for the same fact
        if None in self.image_size:
            stride = self.patches.patch_size * (1 if self.resnet is None else resnet_stride(self.resnet.config))
            self.patch_stride = (float(stride), float(stride))
        else:
            self.patch_stride = tuple(float(s) / g for s, g in zip(self.image_size, self.grid_size))

    def grid_for(self, image_size) -> tuple[int, int]:
        """The `(gh, gw)` patch grid of images of `image_size` `(H, W)`, as given to the model.

        Example:
            >>> import vit_keras
            >>> probe = AttentionProbe(vit_keras.ViT(image_size=None, patch_size=8, hidden_size=48, num_layers=2,
            ...                                      num_heads=3, mlp_dim=96))
            >>> probe.grid_for((32, 48))  # a ViT of any size, patch 8
            (4, 6)
        """
        if None not in self.image_size:
            return self.grid_size
        return tuple(int(size // stride) for size, stride in zip(image_size, self.patch_stride))

    @property
    def num_layers(self) -> int:
        """How many Transformer blocks the model has."""
        return len(self.blocks)

    @property
    def num_heads(self) -> int:
        """Attention heads per block."""
        return int(self.blocks[0].block.num_heads)

    @property
    def num_tokens(self) -> int:
        """Tokens per image: patches plus the class token, if any."""
        return self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]

    def check_images(self, images) -> np.ndarray:
        """Validate a batch `(B, H, W, C)` (or one `(H, W, C)` image) against the model's input; float32.

        Example:
            >>> import vit_keras
            >>> probe = AttentionProbe(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2,
            ...                                      num_heads=3, mlp_dim=96))
            >>> probe.check_images(np.zeros((32, 32, 3))).shape
            (1, 32, 32, 3)
        """
        images = np.asarray(keras.ops.convert_to_numpy(images), dtype=np.float32)
        if images.ndim == 3:
            images = images[None]
        if images.ndim != 4:
            raise ValueError(
                f"Expected images of shape (batch, height, width, channels) or one (height, width, channels) "
                f"image, got an array of rank {images.ndim} with shape {images.shape}."
            )
        height, width, channels = self.input_shape
        if channels is not None and images.shape[-1] != channels:
            raise ValueError(
                f"Model {self.model.name!r} expects {channels}-channel images, got {images.shape[-1]} channels "
                f"(shape {images.shape}); convert the images to {'RGB' if channels == 3 else f'{channels} channels'}."
            )
        for label, want, got in (("height", height, images.shape[1]), ("width", width, images.shape[2])):
            if want is not None and got != want:
                raise ValueError(
                    f"Model {self.model.name!r} expects images of size {height}x{width}, got {label} {got} "
                    f"(shape {images.shape}); resize them first, e.g. keras.ops.image.resize(images, "
                    f"({height}, {width}))."
                )
        if images.shape[0] == 0:
            raise ValueError("Got an empty batch of images; pass at least one image.")
        return images

    def __call__(self, images, batch_size: int = 8) -> list[np.ndarray]:
        """Attention weights of every block: a list of `(B, heads, T, T)` float32 arrays, rows sum to 1.

        They take `layers · B · heads · T² · 4` bytes (about 22 MB per image for ViT-B/16 at 224); the
        analysis functions reduce each batch of `batch_size` images as they go instead.

        Example:
            >>> import vit_keras
            >>> probe = AttentionProbe(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2,
            ...                                      num_heads=3, mlp_dim=96))
            >>> images = np.zeros((4, 32, 32, 3), "float32")
            >>> [a.shape for a in probe(images)]
            [(4, 3, 17, 17), (4, 3, 17, 17)]
        """
        batches = [list(chunk) for chunk in zip(*self.iter_batches(images, batch_size))]
        return [np.concatenate(chunks, axis=0) for chunks in batches]

    def iter_batches(self, images, batch_size: int = 8):
        """Yield, per batch of at most `batch_size` images, the list of per-block attention arrays.

        Example:
            >>> import vit_keras
            >>> probe = AttentionProbe(vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2,
            ...                                      num_heads=3, mlp_dim=96))
            >>> images = np.zeros((10, 32, 32, 3), "float32")
            >>> [attention[0].shape for attention in probe.iter_batches(images, 8)]  # block 0, per batch
            [(8, 3, 17, 17), (2, 3, 17, 17)]
        """
        images = self.check_images(images)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}.")
        for start in range(0, len(images), batch_size):
            x = images[start : start + batch_size]
            for stage in self._stages:
                x = stage(x, training=False)
            x, *tables = x if isinstance(x, list | tuple) else (x,)
            tables = iter(tables)
            scores = []
            for block, has_tables in zip(self.blocks, self._tables):
                rope = {} if has_tables is None else {"rope": next(tables)}
                # all_tokens: the whole map also from a model built with head_tokens_only=True.
                x, attention = block(x, training=False, return_attention_scores=True, all_tokens=True, **rope)
                scores.append(np.asarray(keras.ops.convert_to_numpy(attention), dtype=np.float32))
            yield scores


class FlexibleAttentionProbe:
    """Read the attention weights of every Transformer block of a flexible (NaFlex) vit_keras model.

    The model's own layers up to the first block run as a sub-model of it (the embedded tokens, their validity and
    each image's RoPE tables), then each block is called with `return_attention_scores=True`, as `AttentionProbe`
    does for image models.

    Attributes:
        blocks: the `TransformerBlock` layers, in order.
        patch_size: pixels per patch side.
        num_prefix_tokens: the class token and registers in front of the patches.

    Example:
        >>> import vit_keras
        >>> from vit_keras.images import naflex_patches
        >>> probe = FlexibleAttentionProbe(vit_keras.ViT(flexible=True, patch_size=8, hidden_size=48, num_layers=2,
        ...                                              num_heads=3, mlp_dim=96))
        >>> [a.shape for a in probe(naflex_patches([np.zeros((16, 24, 3))], 8, 8, resize=False))]
        [(1, 3, 9, 9), (1, 3, 9, 9)]
    """

    def __init__(self, model):
        from vit_keras.layers.flexible import INPUT_KEYS, FlexiblePatchEncoder

        if not isinstance(model, keras.Model) or not isinstance(model.input, dict) or set(model.input) != set(
                INPUT_KEYS):
            raise ValueError(f"Expected a flexible (NaFlex) vit_keras model, whose input is a dict of "
                             f"{list(INPUT_KEYS)} (built with flexible=True), got {getattr(model, 'name', model)!r}; "
                             "inspect an image model with AttentionProbe / attention_maps.")
        layers = _sub_layers(model)
        self.model = model
        self.blocks = [layer for layer in layers if isinstance(layer, TransformerBlock)]
        encoder = _first(layers, FlexiblePatchEncoder)
        if not self.blocks or encoder is None:
            raise ValueError(f"Model {model.name!r} has no FlexiblePatchEncoder and Transformer blocks to inspect; "
                             "pass the model vit_keras.ViT(flexible=True) or from_pretrained(flexible=True) built.")
        self.patch_size = int(encoder.patch_size)
        self.num_prefix_tokens = int(encoder.num_prefix_tokens)
        nodes = [_node_in(model, block) for block in self.blocks]
        for previous, node in zip(nodes[:-1], nodes[1:]):
            if _block_argument(node, "x") is not _single(previous.output_tensors, "A block"):
                raise ValueError(f"Block {node.operation.name!r} does not take the previous block's output; "
                                 "inspection needs the Transformer blocks of a ViT as one chain.")
        # Every block's token mask and RoPE tables (one tensor shared by the blocks, or one per block: "mixed").
        arguments = [{name: node.arguments.kwargs.get(name) for name in ("token_mask", "rope")} for node in nodes]
        tensors = []
        for kwargs in arguments:
            for tensor in kwargs.values():
                if tensor is not None and all(tensor is not t for t in tensors):
                    tensors.append(tensor)
        self._arguments = [{name: next(i for i, t in enumerate(tensors) if t is tensor)
                            for name, tensor in kwargs.items() if tensor is not None} for kwargs in arguments]
        self._stage = keras.Model(model.input, [_block_argument(nodes[0], "x"), *tensors])

    @property
    def num_layers(self) -> int:
        """How many Transformer blocks the model has."""
        return len(self.blocks)

    def __call__(self, batch) -> list[np.ndarray]:
        """Attention weights of every block for a NaFlex batch (`patches`, `grid`, `mask`): a list of
        `(B, heads, T, T)` float32 arrays over the prefix tokens and all N patch positions (the padding's columns
        are 0; its rows are the padding's own queries)."""
        x, *tensors = self._stage(batch, training=False)
        scores = []
        for block, names in zip(self.blocks, self._arguments):
            kwargs = {name: tensors[index] for name, index in names.items()}
            x, attention = block(x, training=False, return_attention_scores=True, all_tokens=True, **kwargs)
            scores.append(np.asarray(keras.ops.convert_to_numpy(attention), dtype=np.float32))
        return scores


def attention_weights(model, images, batch_size: int = 8) -> np.ndarray:
    """Attention weights of every layer and head: `(layers, B, heads, T, T)`, each row a distribution.

    `T` counts the class token first (if the model has one), then the patches in row-major order.

    Example:
        >>> import vit_keras
        >>> model = vit_keras.ViT(image_size=32, patch_size=8, hidden_size=48, num_layers=2, num_heads=3,
        ...                       mlp_dim=96, classes=10)
        >>> images = np.random.default_rng(0).uniform(0, 255, (4, 32, 32, 3)).astype("float32")
        >>> attention_weights(model, images).shape
        (2, 4, 3, 17, 17)
    """
    return np.stack(AttentionProbe(model)(images, batch_size=batch_size), axis=0)
