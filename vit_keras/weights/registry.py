"""Every published Google ViT checkpoint under a short name, per model variant.

Names (the `weights=` values of the named constructors):

- `"imagenet21k"`: the paper's ImageNet-21k upstream (21,843 classes, `pre_logits` of width D) at 224;
- `"imagenet21k+imagenet2012"`: the paper's ImageNet-1k fine-tune at 384; `"imagenet21k+imagenet2012-224"`
  the ones fine-tuned at 224;
- `"augreg-imagenet21k"`: the AugReg paper's recommended ImageNet-21k upstream (no `pre_logits`);
- `"augreg-imagenet21k+imagenet2012"` (384) and `"augreg-imagenet21k+imagenet2012-224"`: its ImageNet-1k
  fine-tunes;
- `"imagenet"`: the best ImageNet-1k fine-tune at the model's resolution (see `resolve`).

Google publishes no checksums; `sha256=None` entries are pinned on first download (see `download`).

Example:
    >>> find("B/16", "imagenet21k+imagenet2012").resolution
    384
"""

from __future__ import annotations

import dataclasses
import difflib

from vit_keras.configs import VARIANTS

BASE_URL = "https://storage.googleapis.com/vit_models"
IMAGENET21K_CLASSES = 21843
IMAGENET_CLASSES = 1000


@dataclasses.dataclass(frozen=True)
class WeightsEntry:
    """One published checkpoint.

    Example:
        >>> find("B/16", "imagenet21k").classes
        21843
    """

    variant: str
    name: str
    url: str
    resolution: int
    classes: int
    representation_size: int | None = None
    sha256: str | None = None
    format: str = "google_npz"
    size_mib: float | None = None  # published download size, where stated
    top1: float | None = None  # published ImageNet top-1 (%)
    top1_source: str | None = None
    source: str = ""

    @property
    def key(self) -> str:
        return f"{self.variant}:{self.name}"

    @property
    def filename(self) -> str:
        # Unique per entry in the cache: the bucket reuses basenames across directories.
        directory, base = self.url[len(BASE_URL) + 1 :].rsplit("/", 1) if self.url.startswith(BASE_URL) else (
            "", self.url.rsplit("/", 1)[-1])
        return f"{directory.replace('/', '_').replace('+', '_')}-{base}" if directory else base


_PAPER_FILE = {"B/8": "ViT-B_8", "B/16": "ViT-B_16", "B/32": "ViT-B_32", "L/16": "ViT-L_16", "L/32": "ViT-L_32",
               "H/14": "ViT-H_14", "R50+B/16": "R50+ViT-B_16", "R26+B/32": "R26+ViT-B_32",
               "R50+L/32": "R50+ViT-L_32"}
# Paper Table 5 (ImageNet top-1 at 384 after ImageNet-21k pre-training).
_PAPER_TOP1 = {"B/16": 83.97, "B/32": 81.28, "L/16": 85.15, "L/32": 80.99}
# AugReg recommended upstreams and their 384 fine-tunes (vit_jax README, "AugReg" table) with top-1 at 384.
_AUGREG = {
    "Ti/16": ("Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "lr_0.03", 78.22),
    "S/16": ("S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0", "lr_0.03", 83.73),
    "S/32": ("S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0", "lr_0.01", 79.58),
    "B/16": ("B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0", "lr_0.03", 85.49),
    "B/32": ("B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "lr_0.01", 83.59),
    "L/16": ("L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0", "lr_0.01", 85.59),
    "R+Ti/16": ("R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0", "lr_0.03", 75.40),
    "R26+S/32": ("R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0", "lr_0.01", 83.85),
    "R50+L/32": ("R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1", "lr_0.01", 85.99),
}
# AugReg ImageNet-1k fine-tunes at 224 (the ones timm ships as `*.augreg_in21k_ft_in1k` at 224).
_AUGREG_224 = {
    "Ti/16": "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "S/16": "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "S/32": "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "B/8": "B_8-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224",
    "B/16": "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01-res_224",
    "B/32": "B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "L/16": "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.01-res_224",
    "R+Ti/16": "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224",
    "R26+S/32": "R26_S_32-i21k-300ep-lr_0.001-aug_light0-wd_0.03-do_0.1-sd_0.1--imagenet2012-steps_20k-lr_0.03-res_224",
}
# timm's eval of ViT-B_16-224 (vit_base_patch16_224.orig_in21k_ft_in1k).
_TIMM_224_TOP1 = {"B/16-224": 81.78}
# Published download sizes in MiB: paper i21k files (bucket listing), AugReg upstreams (vit_jax README table).
_PAPER_I21K_MIB = {"B/16": 393.7, "L/16": 1.22 * 1024, "H/14": 2.46 * 1024}
_AUGREG_UPSTREAM_MIB = {"L/16": 1243, "B/16": 391, "S/16": 115, "R50+L/32": 1337, "R26+S/32": 170, "Ti/16": 37,
                        "B/32": 398, "S/32": 118, "R+Ti/16": 40}


def _build() -> dict[str, WeightsEntry]:
    entries = []
    for variant, stem in _PAPER_FILE.items():
        entries.append(WeightsEntry(
            variant, "imagenet21k", f"{BASE_URL}/imagenet21k/{stem}.npz", 224, IMAGENET21K_CLASSES,
            representation_size=VARIANTS[variant].hidden_size, size_mib=_PAPER_I21K_MIB.get(variant),
            source="ViT paper, ImageNet-21k upstream"))
    for variant in ("B/8", "B/16", "B/32", "L/16", "L/32", "R50+B/16"):
        top1 = _PAPER_TOP1.get(variant)
        entries.append(WeightsEntry(
            variant, "imagenet21k+imagenet2012", f"{BASE_URL}/imagenet21k+imagenet2012/{_PAPER_FILE[variant]}.npz",
            384, IMAGENET_CLASSES, top1=top1, top1_source="paper Table 5" if top1 else None,
            source="ViT paper, ImageNet-21k -> ImageNet-1k fine-tune"))
    for variant in ("B/16", "L/16"):
        top1 = _TIMM_224_TOP1.get(f"{variant}-224")
        entries.append(WeightsEntry(
            variant, "imagenet21k+imagenet2012-224",
            f"{BASE_URL}/imagenet21k+imagenet2012/{_PAPER_FILE[variant]}-224.npz", 224, IMAGENET_CLASSES,
            top1=top1, top1_source="timm eval" if top1 else None,
            source="ViT paper, ImageNet-21k -> ImageNet-1k fine-tune at 224"))
    for variant, (upstream, lr, top1) in _AUGREG.items():
        entries.append(WeightsEntry(
            variant, "augreg-imagenet21k", f"{BASE_URL}/augreg/{upstream}.npz", 224, IMAGENET21K_CLASSES,
            size_mib=_AUGREG_UPSTREAM_MIB.get(variant),
            source="AugReg (How to train your ViT), recommended ImageNet-21k upstream"))
        entries.append(WeightsEntry(
            variant, "augreg-imagenet21k+imagenet2012",
            f"{BASE_URL}/augreg/{upstream}--imagenet2012-steps_20k-{lr}-res_384.npz", 384, IMAGENET_CLASSES,
            top1=top1, top1_source="AugReg (vit_jax README)",
            source="AugReg, ImageNet-21k -> ImageNet-1k fine-tune"))
    for variant, stem in _AUGREG_224.items():
        entries.append(WeightsEntry(
            variant, "augreg-imagenet21k+imagenet2012-224", f"{BASE_URL}/augreg/{stem}.npz", 224,
            IMAGENET_CLASSES, source="AugReg, ImageNet-21k -> ImageNet-1k fine-tune at 224"))
    return {entry.key: entry for entry in entries}


REGISTRY: dict[str, WeightsEntry] = _build()
ALIASES = ("imagenet",)


def names_for(variant: str) -> list[str]:
    """The registered names of one variant.

    Example:
        >>> names_for("R+Ti/16")
        ['augreg-imagenet21k', 'augreg-imagenet21k+imagenet2012', 'augreg-imagenet21k+imagenet2012-224']
    """
    return [entry.name for entry in REGISTRY.values() if entry.variant == variant]


def _imagenet_choice(variant: str, image_size) -> WeightsEntry | None:
    """The ImageNet-1k fine-tune whose resolution is closest to the model's, AugReg first (higher top-1)."""
    size = max(image_size) if image_size else 224
    candidates = [REGISTRY[f"{variant}:{name}"] for name in (
        "augreg-imagenet21k+imagenet2012-224", "imagenet21k+imagenet2012-224",
        "augreg-imagenet21k+imagenet2012", "imagenet21k+imagenet2012") if f"{variant}:{name}" in REGISTRY]
    if not candidates:
        return None
    return min(candidates, key=lambda e: abs(e.resolution - size))  # min keeps the first of equals: AugReg


def find(variant: str | None, name: str, image_size=None) -> WeightsEntry:
    """Look up `name` for `variant` ("B/16"); `"B/16:imagenet21k"` works without a variant.

    Unknown names raise a `ValueError` that lists the close matches.

    Example:
        >>> find(None, "B/32:augreg-imagenet21k").classes
        21843
    """
    if ":" in name and name in REGISTRY:
        return REGISTRY[name]
    if variant is not None:
        if name == "imagenet":
            entry = _imagenet_choice(variant, image_size)
            if entry is not None:
                return entry
            raise ValueError(f"No ImageNet-1k fine-tune is published for ViT-{variant}; available: "
                             f"{names_for(variant) or 'none'}.")
        key = f"{variant}:{name}"
        if key in REGISTRY:
            return REGISTRY[key]
    if variant is None and name in {entry.name for entry in REGISTRY.values()} | set(ALIASES):
        raise ValueError(
            f"{name!r} names a published checkpoint of a paper variant, and this model's architecture matches "
            "none of them; use a named constructor (e.g. vit_keras.ViTB16) or pass 'VARIANT:name' such as "
            f"'B/16:{name}' with that variant's architecture."
        )
    pool = (names_for(variant) + list(ALIASES)) if variant else list(REGISTRY)
    close = difflib.get_close_matches(name, pool, n=5, cutoff=0.5) or (
        difflib.get_close_matches(name, list(REGISTRY), n=5, cutoff=0.5))
    what = f"for ViT-{variant}" if variant else "(use 'VARIANT:name' outside the named constructors)"
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    available = ", ".join(names_for(variant) + list(ALIASES)) if variant and names_for(variant) else \
        "see vit_keras.list_weights()"
    raise ValueError(f"Unknown weights {name!r} {what}.{hint} Available: {available}. A path to a checkpoint file "
                     "or directory also works.")


def variant_of(architecture) -> str | None:
    """The variant name whose table row matches an architecture (a `ViTConfig`, or a dict of its fields where a
    missing field has the dataclass default), if any.

    Example:
        >>> variant_of({"patch_size": 16, "hidden_size": 768, "num_layers": 12, "num_heads": 12,
        ...             "mlp_dim": 3072, "resnet": None})
        'B/16'
        >>> variant_of({"patch_size": 32, "hidden_size": 1024, "mlp_dim": 4096, "num_heads": 16, "num_layers": 24})
        'L/32'
    """
    from vit_keras.configs import VARIANTS, ResNetConfig, ViTConfig

    if isinstance(architecture, ViTConfig):
        architecture = architecture.to_dict()
    defaults = ViTConfig()
    shape_fields = ("patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim")
    wanted = tuple(architecture.get(f, getattr(defaults, f)) for f in shape_fields)
    resnet = ResNetConfig.from_any(architecture.get("resnet"))
    for name, config in VARIANTS.items():
        if tuple(getattr(config, f) for f in shape_fields) == wanted and config.resnet == resnet:
            return name
    return None
