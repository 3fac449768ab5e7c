"""vit-keras 0.2.0's `vit` module (`from vit_keras import vit; vit.vit_b16(...)`), on today's models.

Same names, arguments and defaults as 0.2.0: the models take images already scaled to [-1, 1] by
`preprocess_inputs`, `include_top=False` returns the class token's vector (after the final LayerNorm and, for
`weights="imagenet21k"`, the tanh `pre_logits` layer), `activation` is the head's activation ("linear": logits),
`pretrained_top=True` keeps the checkpoint's head (and its number of classes). Every function warns once
(FutureWarning) with the call to use instead; see the README's migration table.

Example:
    >>> from vit_keras import vit
    >>> model = vit.build_model(image_size=32, patch_size=8, num_layers=2, hidden_size=48, num_heads=3,
    ...                         name="tiny", mlp_dim=96, classes=10, include_top=False)
    >>> model.output_shape
    (None, 48)

`vit.vit_b16(image_size=224, pretrained=True, include_top=False, pretrained_top=False)` builds ViT-B/16 the
same way and loads its published checkpoint (downloaded on first use).
"""

from __future__ import annotations

import numbers
import typing
import warnings

from vit_keras import preprocessing
from vit_keras import weights as weights_lib
from vit_keras.compat import utils
from vit_keras.configs import VARIANTS
from vit_keras.migration import warn_once
from vit_keras.models import ViT, ViTB16, ViTB32, ViTL16, ViTL32
from vit_keras.weights.registry import IMAGENET21K_CLASSES, IMAGENET_CLASSES


class ConfigDict(typing.TypedDict):
    """One 0.2.0 architecture row (`CONFIG_B`, `CONFIG_L`)."""

    dropout: float
    mlp_dim: int
    num_heads: int
    num_layers: int
    hidden_size: int


# 0.2.0 built every model with dropout 0.1 in its Transformer blocks (it acts only in training).
DROPOUT = 0.1


def _config(variant: str) -> ConfigDict:
    config = VARIANTS[variant]
    return {"dropout": DROPOUT, "mlp_dim": config.mlp_dim, "num_heads": config.num_heads,
            "num_layers": config.num_layers, "hidden_size": config.hidden_size}


CONFIG_B: ConfigDict = _config("B/16")
CONFIG_L: ConfigDict = _config("L/16")

# Where 0.2.0 downloaded its copies of Google's checkpoints. Today's functions load the same checkpoints by name
# from Google's bucket, with integrity checks (see vit_keras.list_weights()); this constant is kept for old code.
BASE_URL = "https://github.com/faustomorales/vit-keras/releases/download/dl"
WEIGHTS = {"imagenet21k": IMAGENET21K_CLASSES, "imagenet21k+imagenet2012": IMAGENET_CLASSES}
SIZES = {"B_16", "B_32", "L_16", "L_32"}

ImageSizeArg = typing.Union[tuple[int, int], int]  # noqa: UP007 (0.2.0's public alias, kept as it was)

# 0.2.0 size -> today's constructor and its width (the `pre_logits` width of the "imagenet21k" checkpoints).
_CONSTRUCTORS = {size: (constructor, VARIANTS[size.replace("_", "/")].hidden_size) for size, constructor in
                 (("B_16", ViTB16), ("B_32", ViTB32), ("L_16", ViTL16), ("L_32", ViTL32))}


def _interpret_image_size(image_size_arg) -> tuple[int, int]:
    if isinstance(image_size_arg, numbers.Integral) and not isinstance(image_size_arg, bool):
        return (int(image_size_arg), int(image_size_arg))
    if (
        isinstance(image_size_arg, tuple | list)
        and len(image_size_arg) == 2
        and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in image_size_arg)
    ):
        return (int(image_size_arg[0]), int(image_size_arg[1]))
    raise ValueError(
        f"The image_size argument must be a tuple of 2 integers or a single integer. Received: {image_size_arg!r}"
    )


def _check_weights_name(weights) -> None:
    if weights not in WEIGHTS:
        raise ValueError(f"Unexpected weights {weights!r}: vit-keras 0.2.0 names are {sorted(WEIGHTS)}. "
                         "vit_keras.list_weights() shows every checkpoint the new constructors load.")


def preprocess_inputs(X):
    """Scale RGB images in [0, 255] to [-1, 1] (keras.applications' "tf" mode), as these models expect.

    Example:
        >>> from vit_keras import vit
        >>> vit.preprocess_inputs(np.array([0.0, 255.0]))
        array([-1.,  1.], dtype=float32)
    """
    warn_once("vit_keras.vit.preprocess_inputs", "vit_keras.preprocess_input(X, include_preprocessing=False)")
    return preprocessing.preprocess_input(X, include_preprocessing=False)


def interpret_image_size(image_size_arg: ImageSizeArg) -> tuple[int, int]:
    """Process the image_size argument whether a tuple or int.

    Example:
        >>> from vit_keras import vit
        >>> vit.interpret_image_size(384)
        (384, 384)
    """
    warn_once("vit_keras.vit.interpret_image_size", "the image_size= argument of vit_keras.ViT (int or pair)")
    return _interpret_image_size(image_size_arg)


def _build_model(image_size, patch_size, num_layers, hidden_size, num_heads, name, mlp_dim, classes, dropout=0.1,
                 activation="linear", include_top=True, representation_size=None):
    return ViT(
        image_size=_interpret_image_size(image_size),
        patch_size=patch_size,
        num_layers=num_layers,
        hidden_size=hidden_size,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        representation_size=representation_size,
        dropout_rate=dropout,
        include_top=include_top,
        include_preprocessing=False,
        # 0.2.0's include_top=False output is the class token's vector; with a head, the head reads it anyway.
        pooling=None if include_top else "token",
        classes=classes,
        classifier_activation=activation,
        name=name,
    )


def build_model(
    image_size: ImageSizeArg,
    patch_size: int,
    num_layers: int,
    hidden_size: int,
    num_heads: int,
    name: str,
    mlp_dim: int,
    classes: int,
    dropout=0.1,
    activation="linear",
    include_top=True,
    representation_size=None,
):
    """Build a ViT that takes [-1, 1] images; without the top, its output is the class token's vector.

    Example:
        >>> from vit_keras import vit
        >>> vit.build_model(image_size=32, patch_size=8, num_layers=2, hidden_size=48, num_heads=3,
        ...                 name="tiny", mlp_dim=96, classes=10).output_shape
        (None, 10)
    """
    warn_once(
        "vit_keras.vit.build_model",
        "vit_keras.ViT(image_size=..., patch_size=..., ..., include_preprocessing=False, pooling='token', "
        "classifier_activation=activation, dropout_rate=dropout)",
    )
    return _build_model(image_size, patch_size, num_layers, hidden_size, num_heads, name, mlp_dim, classes,
                        dropout=dropout, activation=activation, include_top=include_top,
                        representation_size=representation_size)


def _validate_pretrained_top(include_top, pretrained, classes, weights) -> int:
    _check_weights_name(weights)
    expected_classes = WEIGHTS[weights]
    if not include_top:
        raise ValueError("pretrained_top=True needs include_top=True; pass pretrained_top=False to drop the top.")
    if not pretrained:
        raise ValueError("pretrained_top=True needs pretrained=True; pass pretrained_top=False for a model "
                         "without pretrained weights.")
    if classes != expected_classes:
        warnings.warn(
            f"Can only use pretrained_top with {weights} if classes = {expected_classes}. Setting manually.",
            UserWarning,
            stacklevel=4,
        )
    return expected_classes


def validate_pretrained_top(include_top: bool, pretrained: bool, classes: int, weights: str):
    """Check that keeping the checkpoint's head makes sense; return the checkpoint's number of classes.

    Example:
        >>> from vit_keras import vit
        >>> vit.validate_pretrained_top(True, True, 1000, "imagenet21k+imagenet2012")
        1000
    """
    warn_once("vit_keras.vit.validate_pretrained_top",
              "vit_keras.ViTB16(weights=..., classes=<the checkpoint's>) which keeps the checkpoint's head")
    return _validate_pretrained_top(include_top, pretrained, classes, weights)


def _load_pretrained(size, weights, pretrained_top, model, image_size, patch_size):
    _check_weights_name(weights)
    if size not in SIZES:
        raise ValueError(f"Unexpected size {size!r}: vit-keras 0.2.0 sizes are {sorted(SIZES)}.")
    height, width = _interpret_image_size(image_size)
    grid = tuple(model.get_layer("patch_encoder").grid_size)
    if grid != (height // patch_size, width // patch_size):
        raise ValueError(f"image_size {image_size!r} with patch_size {patch_size} gives a "
                         f"{height // patch_size}x{width // patch_size} grid but the model's is "
                         f"{grid[0]}x{grid[1]}; pass the image_size the model was built with.")
    variant = size.replace("_", "/")
    weights_lib.load_weights(model, f"{variant}:{weights}")
    if not pretrained_top:
        utils._reset_head(model)


def load_pretrained(size: str, weights: str, pretrained_top: bool, model, image_size: ImageSizeArg,
                    patch_size: int):
    """Load a published checkpoint ("B_16", "imagenet21k") into a model built by these functions.

    Example (downloads the checkpoint on first use, cached; `model` from `vit.vit_b16(pretrained=False)`)::

        vit.load_pretrained("B_16", "imagenet21k", False, model, 224, 16)
    """
    warn_once("vit_keras.vit.load_pretrained", "vit_keras.load_weights(model, 'B/16:imagenet21k')")
    _load_pretrained(size, weights, pretrained_top, model, image_size, patch_size)


def _vit(size, default_name, image_size, classes, activation, include_top, pretrained, pretrained_top, weights):
    constructor, hidden_size = _CONSTRUCTORS[size]
    if pretrained_top:
        classes = _validate_pretrained_top(include_top=include_top, pretrained=pretrained, classes=classes,
                                           weights=weights)
    elif pretrained:
        _check_weights_name(weights)
    model = constructor(
        image_size=_interpret_image_size(image_size),
        include_top=include_top,
        include_preprocessing=False,
        weights=None,
        # 0.2.0's include_top=False output is the class token's vector; with a head, the head reads it anyway.
        pooling=None if include_top else "token",
        classes=classes,
        classifier_activation=activation,
        representation_size=hidden_size if weights == "imagenet21k" else None,
        dropout_rate=DROPOUT,
        name=default_name,
    )
    if pretrained:
        _load_pretrained(size, weights, pretrained_top, model, image_size,
                         model.get_layer("patches").patch_size)
    return model


def _replacement(constructor_name: str) -> str:
    return (f"vit_keras.{constructor_name}(image_size=..., weights='imagenet21k+imagenet2012' or None, "
            "include_preprocessing=False, pooling='token', classifier_activation=activation)")


def vit_b16(
    image_size: ImageSizeArg = (224, 224),
    classes=1000,
    activation="linear",
    include_top=True,
    pretrained=True,
    pretrained_top=True,
    weights="imagenet21k+imagenet2012",
):
    """ViT-B/16 with vit-keras 0.2.0's arguments (see the module docstring).

    Example (downloads the published checkpoint on first use; see the module docstring for one that runs
    offline)::

        model = vit.vit_b16(image_size=384, activation="sigmoid", pretrained=True, include_top=True,
                            pretrained_top=True)
    """
    warn_once("vit_keras.vit.vit_b16", _replacement("ViTB16"))
    return _vit("B_16", "vit-b16", image_size, classes, activation, include_top, pretrained, pretrained_top,
                weights)


def vit_b32(
    image_size: ImageSizeArg = (224, 224),
    classes=1000,
    activation="linear",
    include_top=True,
    pretrained=True,
    pretrained_top=True,
    weights="imagenet21k+imagenet2012",
):
    """ViT-B/32 with vit-keras 0.2.0's arguments (see the module docstring).

    Example (downloads the published checkpoint on first use)::

        model = vit.vit_b32(image_size=224, pretrained=True, include_top=True, pretrained_top=False, classes=200)
    """
    warn_once("vit_keras.vit.vit_b32", _replacement("ViTB32"))
    return _vit("B_32", "vit-b32", image_size, classes, activation, include_top, pretrained, pretrained_top,
                weights)


def vit_l16(
    image_size: ImageSizeArg = (384, 384),
    classes=1000,
    activation="linear",
    include_top=True,
    pretrained=True,
    pretrained_top=True,
    weights="imagenet21k+imagenet2012",
):
    """ViT-L/16 with vit-keras 0.2.0's arguments (see the module docstring).

    Example (downloads the published checkpoint on first use)::

        model = vit.vit_l16(pretrained=True, include_top=False, pretrained_top=False)
    """
    warn_once("vit_keras.vit.vit_l16", _replacement("ViTL16"))
    return _vit("L_16", "vit-l16", image_size, classes, activation, include_top, pretrained, pretrained_top,
                weights)


def vit_l32(
    image_size: ImageSizeArg = (384, 384),
    classes=1000,
    activation="linear",
    include_top=True,
    pretrained=True,
    pretrained_top=True,
    weights="imagenet21k+imagenet2012",
):
    """ViT-L/32 with vit-keras 0.2.0's arguments (see the module docstring).

    Example (downloads the published checkpoint on first use)::

        model = vit.vit_l32(image_size=224, pretrained=True, pretrained_top=False, classes=200)
    """
    warn_once("vit_keras.vit.vit_l32", _replacement("ViTL32"))
    return _vit("L_32", "vit-l32", image_size, classes, activation, include_top, pretrained, pretrained_top,
                weights)
