"""Patch projection, class token and position embeddings: everything before the first Transformer block."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from vit_keras.configs import PatchConfig, whole_or_keywords
from vit_keras.layers.checkpoint import CheckpointVariable, checkpoint_variables, nested, plain
from vit_keras.layers.dtypes import SublayerPolicies
from vit_keras.layers.interpolation import resample_grid
from vit_keras.layers.norms import norm_layer

POS_EMBEDDING_NAME = "Transformer/posembed_input/pos_embedding"
# The keywords a `PatchEncoder` takes as its patch embedding's fields: `PatchConfig`'s, and the older names.
PATCH_ARGUMENTS = (*PatchConfig.__dataclass_fields__, "norm_epsilon", "classifier")


def _patch_field(name: str, doc: str) -> property:
    """A read-only view of one of the layer's `PatchConfig` fields, under the name other modules read."""
    return property(lambda self: getattr(self.patch, name), doc=doc)


def sincos_2d_position_embeddings(grid_size, hidden_size, temperature=10_000.0):
    """Fixed 2-D sine-cosine embeddings (big_vision `posemb_sincos_2d`), shape `(gh·gw, hidden_size)`.

    Each quarter of the channels holds sin/cos of the column or row index at geometrically spaced
    frequencies.

    Example:
        >>> sincos_2d_position_embeddings((2, 3), 8).shape
        (6, 8)
    """
    if hidden_size % 4:
        raise ValueError(
            f"position_embedding='sincos_2d' needs hidden_size divisible by 4, got {hidden_size}; "
            "use another hidden_size or position_embedding='learned_1d'."
        )
    gh, gw = grid_size
    rows, cols = np.meshgrid(np.arange(gh, dtype=np.float64), np.arange(gw, dtype=np.float64), indexing="ij")
    omega = 1.0 / temperature ** (np.arange(hidden_size // 4, dtype=np.float64) / (hidden_size // 4))
    rows = rows.reshape(-1, 1) * omega
    cols = cols.reshape(-1, 1) * omega
    table = np.concatenate([np.sin(cols), np.cos(cols), np.sin(rows), np.cos(rows)], axis=1)
    return table.astype(np.float32)


def _sincos_2d_grid(grid_size, hidden_size, temperature=10_000.0):
    """`sincos_2d_position_embeddings` as a `(gh, gw, D)` tensor for a grid known only at call time."""
    gh, gw = grid_size
    quarter = hidden_size // 4
    omega = ops.convert_to_tensor(1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / quarter), "float32")
    rows = ops.cast(ops.arange(gh), "float32")[:, None, None] * omega
    cols = ops.cast(ops.arange(gw), "float32")[None, :, None] * omega
    rows, cols = ops.broadcast_to(rows, (gh, gw, quarter)), ops.broadcast_to(cols, (gh, gw, quarter))
    return ops.concatenate([ops.sin(cols), ops.cos(cols), ops.sin(rows), ops.cos(rows)], axis=-1)


@keras.saving.register_keras_serializable(package="vit_keras")
class PatchEncoder(SublayerPolicies, keras.layers.Layer):
    """Project flattened patches to `hidden_size`, prepend the class token and add position embeddings.

    The layer reads a `vit_keras.configs.PatchConfig`, which it takes whole (`patch=config.patch`, as `build_vit`
    passes it) or builds from keywords (the layer on its own, and the flat configs of `.keras` files saved before,
    older names included: `PatchConfig.from_arguments`); the config validated its fields.

    Weight names follow vit_jax: `embedding` (the patch projection, a Dense on row-major flattened
    patches), `cls` (1, 1, D) and `pos_embedding` (1, N + 1, D) for the paper's learned 1-D table.
    `position_embedding` selects the paper's App. D.4 ablation:

    - `"learned_1d"` (default): one learned vector per token, class token included;
    - `"learned_2d"`: learned row and column tables of D/2 each, concatenated per patch;
    - `"sincos_2d"`: fixed sine-cosine embeddings (no parameters);
    - `"none"`: no position information.

    With the 2-D and fixed variants the class token carries no position embedding: it is itself a
    learned vector, so a learned offset for it would be redundant.

    The family's prefix tokens follow the class token in timm's order: a DeiT distillation token (`dist`) and
    `num_register_tokens` registers (`reg`). `no_embed_class=True` gives the learned 1-D table rows for the patches
    only and joins the prefix tokens after the addition (DINOv2 with registers, big_vision). `patch_norm`
    (`"layernorm"` or `"rmsnorm"`, with `layer_norm_epsilon`) normalises each projected patch before the position
    embeddings are added (AIMv2), declared as `patch_norm`. `architecture` is read from files saved by
    0.1.0, which kept the whole model's config here (today's models carry it themselves). `num_class_tokens` > 1 gives
    `cls` the shape (1, n, D) (RADIO's class tokens, in front of the registers).

    Given a patch grid `(batch, gh, gw, P·P·C)` (`Patches(flatten=False)`, a model built for any image size)
    instead of flattened patches, the layer takes any grid: the stored `grid_size` table is resampled inside the
    graph to `(gh, gw)` with `pos_interpolation` (`"linear"`, `"bicubic"`, `"bicubic_antialias"` or
    `"bilinear_crop"`, see `vit_keras.layers.interpolation`), and not at all when `(gh, gw)` is the stored grid.

    Example:
        >>> encoder = PatchEncoder(hidden_size=64, grid_size=(4, 4))
        >>> tuple(encoder(keras.ops.zeros((2, 16, 48))).shape)
        (2, 17, 64)
        >>> tuple(encoder(keras.ops.zeros((2, 3, 5, 48))).shape)
        (2, 16, 64)
        >>> from vit_keras.configs import VARIANTS
        >>> PatchEncoder(patch=VARIANTS["Ti/16"].replace(image_size=64).patch).num_patches
        16
    """

    hidden_size = _patch_field("hidden_size", "The token width.")
    grid_size = _patch_field("grid_size", "The patch grid the position table is stored at.")
    patch_size = _patch_field("patch_size", "Pixels per patch side (None: read off the projection's kernel).")
    class_token = _patch_field("class_token", "Whether a learned class token leads the tokens.")
    position_embedding = _patch_field("position_embedding", "The kind of position embeddings.")
    pos_interpolation = _patch_field("pos_interpolation", "How the stored table is resampled to another grid.")
    num_prefix_tokens = _patch_field("num_prefix_tokens", "Class, distillation and register tokens.")
    num_embedded_prefix_tokens = _patch_field("num_embedded_prefix_tokens",
                                              "Prefix tokens with a row in the learned 1-D table.")

    def __init__(self, hidden_size: int | None = None, grid_size=None, *, patch: PatchConfig | None = None,
                 architecture: dict | None = None, **kwargs):
        # Whole (`patch=config.patch`, as `build_vit` passes it) or as keywords (the layer on its own, and the flat
        # configs of `.keras` files saved before).
        patch = whole_or_keywords(PatchConfig, patch, kwargs, argument="patch", names=PATCH_ARGUMENTS,
                                  hidden_size=hidden_size, grid_size=grid_size)
        super().__init__(**kwargs)
        self.patch = patch
        # Read from files saved by 0.1.0, which kept the whole model's config here.
        self.architecture = None if architecture is None else dict(architecture)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.embedding = keras.layers.Dense(
            self.hidden_size, kernel_initializer="lecun_normal", use_bias=self.patch.patch_bias,
            dtype=self.dtype_policy, name="embedding",
        )
        self.dropout = keras.layers.Dropout(self.patch.dropout_rate, dtype=self.dtype_policy, name="dropout")
        self.patch_norm = None if self.patch.patch_norm is None else norm_layer(
            self.patch.patch_norm, self.patch.layer_norm_epsilon, dtype=self.dtype_policy, name="patch_norm")
        self._fixed_table = None

    def build(self, input_shape):
        if len(input_shape) not in (3, 4):
            raise ValueError(f"PatchEncoder expects (batch, patches, features) or (batch, rows, cols, features), got "
                             f"shape {input_shape}.")
        if len(input_shape) == 3 and input_shape[1] is not None and input_shape[1] != self.num_patches:
            raise ValueError(
                f"PatchEncoder expects {self.num_patches} patches for grid {self.grid_size}, "
                f"got {input_shape[1]}."
            )
        self.embedding.build(input_shape)
        if self.patch_norm is not None:
            self.patch_norm.build((*input_shape[:-1], self.hidden_size))
        if self.class_token:
            self.cls = self.add_weight(name="cls", shape=(1, self.patch.num_class_tokens, self.hidden_size),
                                       initializer="zeros")
        if self.patch.distilled:
            self.dist = self.add_weight(name="dist", shape=(1, 1, self.hidden_size), initializer="zeros")
        if self.patch.num_register_tokens:
            self.reg = self.add_weight(name="reg", shape=(1, self.patch.num_register_tokens, self.hidden_size),
                                       initializer="zeros")
        pos_init = keras.initializers.RandomNormal(stddev=0.02)
        if self.position_embedding == "learned_1d":
            self.pos_embedding = self.add_weight(
                name="pos_embedding",
                shape=(1, self.num_embedded_prefix_tokens + self.num_patches, self.hidden_size),
                initializer=pos_init,
            )
        elif self.position_embedding == "learned_2d":
            half = self.hidden_size // 2
            self.pos_embedding_row = self.add_weight(
                name="pos_embedding_row", shape=(self.grid_size[0], half), initializer=pos_init
            )
            self.pos_embedding_col = self.add_weight(
                name="pos_embedding_col", shape=(self.grid_size[1], half), initializer=pos_init
            )
        elif self.position_embedding == "sincos_2d":
            self._fixed_table = sincos_2d_position_embeddings(self.grid_size, self.hidden_size)

    def patch_position_embeddings(self, grid=None):
        """The position embeddings of the patches as a `(gh, gw, D)` tensor (None for `"none"`).

        `grid` (default: the stored `grid_size`) resamples the learned tables to another grid with
        `pos_interpolation`; the fixed sine-cosine table is computed at that grid.

        Example:
            >>> encoder = PatchEncoder(64, (4, 4)); encoder.build((None, 16, 48))
            >>> tuple(encoder.patch_position_embeddings().shape)
            (4, 4, 64)
            >>> tuple(encoder.patch_position_embeddings((2, 6)).shape)
            (2, 6, 64)
        """
        static = grid is not None and all(isinstance(cells, int) for cells in grid)
        # bilinear_crop: resample_grid itself says whether the stored grid is resized (a rectangle is).
        same = static and tuple(grid) == self.grid_size and self.pos_interpolation != "bilinear_crop"
        if grid is not None and not same:
            if self.position_embedding == "sincos_2d":
                return _sincos_2d_grid(grid, self.hidden_size)
            table = self.patch_position_embeddings()
            return None if table is None else resample_grid(table, grid, self.pos_interpolation)
        gh, gw = self.grid_size
        if self.position_embedding == "learned_1d":
            table = self.pos_embedding[0, self.num_embedded_prefix_tokens :]
            return ops.reshape(table, (gh, gw, self.hidden_size))
        if self.position_embedding == "learned_2d":
            half = self.hidden_size // 2
            rows = ops.broadcast_to(self.pos_embedding_row[:, None, :], (gh, gw, half))
            cols = ops.broadcast_to(self.pos_embedding_col[None, :, :], (gh, gw, half))
            return ops.concatenate([rows, cols], axis=-1)
        if self.position_embedding == "sincos_2d":
            return ops.reshape(ops.convert_to_tensor(self._fixed_table), (gh, gw, self.hidden_size))
        return None

    def _embed(self, patches):
        """The patch projection, and the patch norm right after it when there is one."""
        x = self.embedding(patches)
        return x if self.patch_norm is None else self.patch_norm(x)

    def _call_grid(self, patches, training):
        """Any patch grid `(batch, gh, gw, P·P·C)`: the stored table resampled to it, then the tokens as usual."""
        x = self._embed(patches)
        grid = tuple(ops.shape(x)[axis] if x.shape[axis] is None else int(x.shape[axis]) for axis in (1, 2))
        table = self.patch_position_embeddings(grid)
        if table is not None:
            x = x + ops.cast(table, x.dtype)[None]
        x = ops.reshape(x, (ops.shape(x)[0], -1, self.hidden_size))
        return self.dropout(self.join_prefix(x), training=training)

    def join_prefix(self, x):
        """The prefix tokens (class, distillation, registers), with their position rows when the table has them,
        in front of the embedded patch tokens `x` `(batch, N, D)`."""
        prefix = [self.cls] if self.class_token else []
        prefix += [self.dist] if self.patch.distilled else []
        prefix += [self.reg] if self.patch.num_register_tokens else []
        if not prefix:
            return x
        tokens = ops.concatenate([ops.cast(t, x.dtype) for t in prefix], axis=1)
        if self.num_embedded_prefix_tokens:
            # Same sums as the fixed-size path, which adds the whole table after joining the prefix.
            tokens = tokens + ops.cast(self.pos_embedding[:, : self.num_embedded_prefix_tokens], x.dtype)
        tokens = ops.broadcast_to(tokens, (ops.shape(x)[0], self.num_prefix_tokens, self.hidden_size))
        return ops.concatenate([tokens, x], axis=1)

    def call(self, patches, training=None):
        if len(patches.shape) == 4:
            return self._call_grid(patches, training)
        x = self._embed(patches)
        embed_after_join = self.position_embedding == "learned_1d" and self.num_embedded_prefix_tokens
        if self.position_embedding == "learned_1d":
            pos_patches = None if embed_after_join else self.pos_embedding
        else:
            table = self.patch_position_embeddings()
            pos_patches = None if table is None else ops.reshape(table, (1, self.num_patches, self.hidden_size))
        if pos_patches is not None:
            x = x + ops.cast(pos_patches, x.dtype)
        prefix = [self.cls] if self.class_token else []
        prefix += [self.dist] if self.patch.distilled else []
        prefix += [self.reg] if self.patch.num_register_tokens else []
        if prefix:
            batch = ops.shape(x)[0]
            tokens = [ops.broadcast_to(ops.cast(t, x.dtype), (batch, t.shape[1], self.hidden_size)) for t in prefix]
            x = ops.concatenate([*tokens, x], axis=1)
        if embed_after_join:
            x = x + ops.cast(self.pos_embedding, x.dtype)
        return self.dropout(x, training=training)

    def checkpoint_variables(self):
        """`embedding/kernel` in Google's `(P, P, C, D)` layout, the prefix tokens and the position table."""
        embedding = checkpoint_variables(self.embedding)  # the Dense's own; its kernel is reshaped below
        kernel = embedding["kernel"].variable
        p = self.patch_size or int(round((kernel.shape[0] / 3) ** 0.5))
        channels = kernel.shape[0] // (p * p)
        out = {"embedding/kernel": CheckpointVariable(
            kernel, (p, p, channels, kernel.shape[1]), lambda a, shape=tuple(kernel.shape): a.reshape(shape),
            lambda a, shape=(p, p, channels, kernel.shape[1]): a.reshape(shape))}
        if self.patch.patch_bias:
            out["embedding/bias"] = embedding["bias"]
        if self.patch_norm is not None:
            out.update(nested("patch_norm", self.patch_norm))
        if self.class_token:
            out["cls"] = plain(self.cls)
        if self.patch.distilled:
            out["dist"] = plain(self.dist)
        if self.patch.num_register_tokens:
            out["reg"] = plain(self.reg)
        if self.position_embedding == "learned_1d":
            out[POS_EMBEDDING_NAME] = plain(self.pos_embedding)
        elif self.position_embedding == "learned_2d":
            raise ValueError(
                "position_embedding='learned_2d' has no published checkpoint layout; build the model with "
                "position_embedding='learned_1d' to load Google, timm or Hugging Face weights."
            )
        return out

    def compute_output_shape(self, input_shape):
        if len(input_shape) == 4:
            rows, cols = input_shape[1:3]
            tokens = None if None in (rows, cols) else self.num_prefix_tokens + rows * cols
            return (input_shape[0], tokens, self.hidden_size)
        return (input_shape[0], self.num_prefix_tokens + self.num_patches, self.hidden_size)

    def get_config(self):
        return {**super().get_config(), "patch": self.patch.to_dict(), "architecture": self.architecture}
