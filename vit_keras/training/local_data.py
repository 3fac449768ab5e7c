"""Your own images as training data: a folder of class subfolders, or a CSV / JSON-lines file of paths and labels.

`load(source, split)` returns the same `data.Split` a tfds name gives (`data.load` calls it for a directory or a
`.csv` / `.jsonl` path), so the images go through the same augmentation and evaluation pipelines:

- a **folder** `root/<class>/<image>` (`keras.utils.image_dataset_from_directory`'s layout): the class names are
  the sorted subfolder names, images are found in each class folder and below it (JPEG, PNG, GIF, BMP; other
  files are skipped; linked sub-folders are followed); a class folder without images is refused;
- a **CSV** file with a header row `path,label` (one class per image), or `path,labels` (several per image,
  separated by `|` or written as a JSON list: a multi-label dataset), paths relative to the file's folder;
- a **JSON-lines** file (`.jsonl`), one object per line: `{"path": ..., "label": ...}` or `{"path": ...,
  "labels": [...]}`.

Each image may be listed once (a repeated row, or one path with two labels, is refused, since it would land on
both sides of a holdout). A label is a string or an integer; `null`, `true`, a nested list, a control character,
or one number written two ways (`1`, `01`, `+1`) are refused with the file, line and value.

Class names are sorted (numerically when every name is an integer, so that label 10 stays class 10). A folder or
file is one split: `split` takes a name (`"train"`, `"test"`, ...: all of it) and tfds' slicing, applied to the
examples in an order shuffled by `seed`, so `"train[:90%]"` and `"train[90%:]"` are a disjoint random holdout,
the same on every run and machine.

Every image is checked when the source is loaded, before any training: each file's header (its format, its size
against `vit_keras.images.max_image_pixels()`), then one decoding pass over the split, so a missing, truncated or
corrupt file is a `ValueError` naming it (and its line in a CSV) instead of a decoder error in the middle of an
epoch. `check="header"` skips the decoding pass (for very large folders whose files are known good).

Example:
    >>> write_colour_squares("shapes")  # shapes/blue/0.jpg ... shapes/red/2.jpg
    >>> split = load("shapes")
    >>> split.class_names, split.num_examples
    (('blue', 'red'), 6)
"""

from __future__ import annotations

import csv
import json
import os
import re
import unicodedata

import numpy as np

from vit_keras.images import IMAGE_SUFFIXES, check_image_file

TABLE_SUFFIXES = (".csv", ".jsonl")
# The shuffle that slices such as "train[90%:]" cut: fixed, so that the held-out images never change between runs.
SPLIT_SEED = 0
LABEL_SEPARATOR = "|"
LABELS_ENTRY = "vit_keras_labels.json"  # inside a .keras checkpoint: the class names (callbacks.save_checkpoint)
CHECKS = ("decode", "header")
_BOUND = r"[+-]?\d*(?:\.\d+)?"
_SPLIT = re.compile(rf"(?P<name>[A-Za-z_][\w-]*)"
                    rf"(\[(?P<start>{_BOUND})(?P<start_pct>%?):(?P<end>{_BOUND})(?P<end_pct>%?)\])?")


def write_colour_squares(root, colours=("red", "blue"), per_class: int = 3, size: int = 16) -> None:
    """Write a tiny folder of class subfolders to try the pipeline on: `per_class` JPEGs of `size` pixels per colour,
    each a square of that colour with a little noise (`root/red/0.jpg`, ...).

    Example:
        >>> write_colour_squares("squares", per_class=2)
        >>> sorted(os.listdir("squares/red"))
        ['0.jpg', '1.jpg']
    """
    from PIL import Image, ImageColor

    rng = np.random.default_rng(0)
    for colour in colours:
        os.makedirs(os.path.join(root, colour), exist_ok=True)
        for i in range(per_class):
            pixels = np.asarray(ImageColor.getrgb(colour), np.float32) + rng.normal(0, 12, (size, size, 3))
            Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(os.path.join(root, colour, f"{i}.jpg"))


def is_local_source(source) -> bool:
    """Whether `source` names your own images: an existing directory, or a path ending in `.csv` / `.jsonl`.

    Example:
        >>> write_colour_squares("shapes")
        >>> is_local_source("shapes"), is_local_source("labels.csv"), is_local_source("cifar10")
        (True, True, False)
    """
    if not isinstance(source, str | os.PathLike):
        return False
    path = os.fspath(source)
    return os.path.isdir(path) or path.lower().endswith(TABLE_SUFFIXES)


def _class_order(names, first_seen=None):
    """The sorted class names; `first_seen` ({name: where}) names, in an error, where two spellings of one number
    (`1`, `01`, `+1`) come from."""
    names = set(names)
    if names and all(re.fullmatch(r"[+-]?\d+", name) for name in names):
        by_number = {}
        for name in sorted(names):
            by_number.setdefault(int(name), []).append(name)
        for number, spellings in by_number.items():
            if len(spellings) > 1:
                seen = first_seen or {}
                places = "; ".join(f"{name!r} at {seen.get(name, 'a class folder')}" for name in spellings)
                raise ValueError(f"The labels {spellings} are all the number {number} written differently ({places}); "
                                 "they would become separate classes. Write each class's label one way.")
        return tuple(sorted(names, key=int))
    return tuple(sorted(names))


def _images_below(class_root: str):
    """The image files in `class_root` and its subfolders, sorted. Symbolic links to folders are followed (a
    dataset assembled from links is common); a link back into a folder already walked would loop, and is refused."""
    found, walked = [], {os.path.realpath(class_root)}
    for folder, subfolders, files in os.walk(class_root, followlinks=True):
        kept = []
        for entry in sorted(subfolders):
            if entry.startswith("."):
                continue
            real = os.path.realpath(os.path.join(folder, entry))
            if real in walked:
                raise ValueError(f"{os.path.join(folder, entry)!r} is a link to {real!r}, a folder already read "
                                 "(a loop, or the same images twice); remove the link.")
            walked.add(real)
            kept.append(entry)
        subfolders[:] = kept
        found.extend(os.path.join(folder, file) for file in sorted(files)
                     if file.lower().endswith(IMAGE_SUFFIXES) and not file.startswith("."))
    return found


def _read_folder(root: str):
    """[(path, [class name], where)] of a folder of class subfolders."""
    entries = sorted(os.listdir(root))
    visible = [entry for entry in entries if not entry.startswith(".")]
    if not visible:
        raise ValueError(f"The folder {root!r} is empty: put each class's images in a subfolder named after the "
                         f"class ({os.path.join(root, 'cat', '001.jpg')}, {os.path.join(root, 'dog', '001.jpg')}).")
    classes = [entry for entry in visible if os.path.isdir(os.path.join(root, entry))]
    if not classes:
        raise ValueError(f"The folder {root!r} has files but no class subfolders: move each image into a subfolder "
                         f"named after its class ({os.path.join(root, 'cat', '001.jpg')}), or list them in a CSV "
                         "file with a header row path,label.")
    examples, empty = [], []
    for name in sorted(classes):
        paths = _images_below(os.path.join(root, name))
        if not paths:
            empty.append(name)
        examples.extend((path, [name], repr(path)) for path in paths)
    if not examples:
        raise ValueError(f"The class subfolders of {root!r} ({', '.join(sorted(classes))}) hold no images "
                         f"({', '.join(IMAGE_SUFFIXES)} files): put the images in them.")
    if empty:
        raise ValueError(f"The class folder(s) {[os.path.join(root, name) for name in empty]} hold no images "
                         f"({', '.join(IMAGE_SUFFIXES)} files), so the model would learn a class it never sees: put "
                         "images in them, or move them out of the dataset folder (or rename them to start with '.').")
    return examples, _class_order(classes, {name: repr(os.path.join(root, name)) for name in classes}), False


def _label_text(value, where: str) -> str:
    """One class name as text: a string or an integer; anything else (null, true, a number with a fraction, a list
    inside the list) would become a class named after Python's spelling of it, and is refused."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"{where}: the label {json.dumps(value)} is not a class name; write each label as a "
                         'string (e.g. "cat") or an integer.')
    text = str(value).strip()
    control = [char for char in text if unicodedata.category(char) == "Cc"]
    if control:
        raise ValueError(f"{where}: the label {text!r} holds the control character {control[0]!r}; remove it.")
    return text


def _labels_of(value, multi_label: bool, where: str) -> list[str]:
    if multi_label:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{where}: the labels {text!r} are not a JSON list ({error.msg}); write them "
                                     f'as ["cat", "outdoor"] or cat{LABEL_SEPARATOR}outdoor.') from None
            else:
                value = [part for part in text.split(LABEL_SEPARATOR) if part.strip()]
        if not isinstance(value, list):
            raise ValueError(f"{where}: `labels` must be a list of class names, got {value!r}.")
        labels = [_label_text(label, where) for label in value]
    else:
        if isinstance(value, list | dict) or value is None:
            raise ValueError(f"{where}: `label` must be one class name, got {value!r}; name the column `labels` for "
                             "several classes per image.")
        labels = [_label_text(value, where)]
    if any(not label for label in labels):
        raise ValueError(f"{where}: a label is empty; give every image its class name.")
    return labels


def _rows(path: str):
    """(row dict, line number) of a CSV file with a header row, or of a JSON-lines file."""
    if path.lower().endswith(".jsonl"):
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path!r} line {number} is not JSON ({error.msg}); each line must be an "
                                     'object such as {"path": "cat/001.jpg", "label": "cat"}.') from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path!r} line {number} is not a JSON object; write "
                                     '{"path": "cat/001.jpg", "label": "cat"}.')
                yield row, number
        return
    with open(path, encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = [name.strip() for name in reader.fieldnames or []]
        reader.fieldnames = columns
        if "path" not in columns or not {"label", "labels"} & set(columns):
            raise ValueError(f"{path!r} has the columns {columns}; it needs a header row with `path` and `label` "
                             f"(one class per image) or `labels` (several, separated by {LABEL_SEPARATOR!r} or a "
                             "JSON list), e.g.\npath,label\ncat/001.jpg,cat")
        for row in reader:
            yield row, reader.line_num


def _read_table(path: str):
    """[(image path, [class names], where)] of a CSV / JSON-lines file, and whether it is multi-label."""
    folder = os.path.dirname(os.path.abspath(path))
    examples, first_seen, multi_label = [], {}, None
    for row, number in _rows(path):
        where = f"{path!r} line {number}"
        if multi_label is None:
            multi_label = "labels" in row
        key = "labels" if multi_label else "label"
        if "path" not in row or key not in row:
            raise ValueError(f"{where} has the keys {sorted(row)}; every line needs `path` and `{key}` (as the "
                             "first line has).")
        image = str(row["path"] or "").strip()
        if not image:
            raise ValueError(f"{where}: the path is empty; give the image file, relative to {folder!r}.")
        labels = _labels_of(row[key], multi_label, where)
        for label in labels:
            first_seen.setdefault(label, f"{where} ({label!r})")
        examples.append((os.path.join(folder, image), labels, where))
    if not examples:
        raise ValueError(f"{path!r} lists no images: add rows of path,label below the header.")
    return examples, _class_order(first_seen, first_seen), bool(multi_label)


def _refuse_repeated_images(examples) -> None:
    """The same image listed twice (a repeated row, two labels for one path, a link to a file in another class)
    would land in both sides of a holdout, or teach two answers for one image."""
    seen = {}
    for path, labels, where in examples:
        real = os.path.realpath(path)
        if real in seen:
            other_labels, other_where = seen[real]
            same = "with the same label(s)" if other_labels == labels else \
                f"with the label(s) {other_labels} there and {labels} here"
            raise ValueError(f"{where} lists the image {path!r} again ({other_where} has it, {same}); each image "
                             "may appear once, or it is both trained and validated on: remove the repeat (for an "
                             "image of several classes, use a `labels` column).")
        seen[real] = (labels, where)


def _slice(count: int, split: str | None, source: str) -> slice:
    match = _SPLIT.fullmatch((split or "train").replace(" ", ""))
    if match is None:
        raise ValueError(f"Cannot read the split {split!r} of {source!r}: a folder or file is one split; take all "
                         "of it ('train') or a slice of it in tfds' form ('train[:90%]', 'train[90%:]', "
                         "'train[:100]').")
    if match["start"] is None:
        return slice(None)

    def bound(text, percent):
        if text in ("", "+", "-"):
            return None
        if percent:
            if abs(float(text)) > 100:
                raise ValueError(f"The split {split!r} of {source!r} cuts at {text}%, outside -100% to 100%; a "
                                 "slice takes at most all the images, e.g. 'train[:90%]' or 'train[-10%:]'.")
            return round(count * float(text) / 100)
        if "." in text:
            raise ValueError(f"The split {split!r} of {source!r} cuts at {text} images: use a whole number, or "
                             "a percentage such as 66.7%.")
        return int(text)

    return slice(bound(match["start"], match["start_pct"]), bound(match["end"], match["end_pct"]))


def _checked(examples, check: str):
    for path, _, where in examples:
        try:
            check_image_file(path)
        except ValueError as error:
            prefix = "" if where == repr(path) else f"{where}: "
            raise ValueError(f"{prefix}{error}. Fix or remove the file (or its line).") from None
    if check == "decode":
        _check_decoding([path for path, _, _ in examples], [where for _, _, where in examples])


def _decode(path):
    import tensorflow as tf

    image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
    image.set_shape([None, None, 3])
    return image


def _check_decoding(paths, wheres) -> None:
    """Decode every image once (in parallel, in order); a `ValueError` names the first that fails."""
    import tensorflow as tf

    shapes = tf.data.Dataset.from_tensor_slices(paths).map(
        lambda path: tf.shape(_decode(path)), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    iterator, index = iter(shapes), 0
    while True:
        try:
            next(iterator)
        except StopIteration:
            return
        except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
            reason = re.sub(r"\{\{[^}]*\}\}|\[Op:[^\]]*\].*", "", error.message or str(error)).strip()
            path, where = paths[index], wheres[index]
            prefix = "" if where == repr(path) else f"{where}: "
            reason = reason.splitlines()[0] if reason else "corrupt data"
            raise ValueError(f"{prefix}{path!r} could not be decoded ({reason}); it may be truncated or corrupt. "
                             "Fix or remove the file (or its line).") from None
        index += 1


def read_examples(source):
    """[(image path, [class names], where)], the sorted class names and whether `source` is multi-label.

    Example:
        >>> write_colour_squares("shapes")
        >>> examples, names, multi_label = read_examples("shapes")
        >>> len(examples), names, multi_label
        (6, ('blue', 'red'), False)
    """
    path = os.fspath(source)
    if os.path.isdir(path):
        read = _read_folder(path)
    elif not os.path.isfile(path):
        raise ValueError(f"{path!r} does not exist: pass a folder of class subfolders, or a .csv / .jsonl file of "
                         "path,label rows.")
    else:
        read = _read_table(path)
    _refuse_repeated_images(read[0])
    return read


def load(source, split: str = "train", *, class_names=None, seed: int = SPLIT_SEED, check: str = "decode"):
    """One split of your own images as a `data.Split` of (uint8 image, label): an int class index, or for a
    multi-label file a multi-hot float32 vector over the classes.

    `class_names` maps the labels to the classes of a model already trained (a validation or test folder may lack
    some classes; a class it does not know is a `ValueError`); by default they are the source's own.

    Example:
        >>> write_colour_squares("shapes")
        >>> split = load("shapes", "train[:50%]")
        >>> split.num_examples, split.num_classes, split.multi_label
        (3, 2, False)
    """
    import tensorflow as tf

    from vit_keras.training.split import Split

    if check not in CHECKS:
        raise ValueError(f"`check` must be one of {CHECKS}, got {check!r}.")
    name = os.fspath(source)
    examples, own_names, multi_label = read_examples(name)
    names = tuple(str(n) for n in class_names) if class_names is not None else own_names
    index = {class_name: position for position, class_name in enumerate(names)}
    for _, labels, where in examples:
        unknown = [label for label in labels if label not in index]
        if unknown:
            raise ValueError(f"{where}: the class {unknown[0]!r} is not one of the model's {len(names)} classes "
                             f"{list(names)[:20]}; fix the label, or train on data that has this class.")
    order = np.random.default_rng(seed).permutation(len(examples))
    chosen = [examples[i] for i in order[_slice(len(examples), split, name)]]
    if not chosen:
        raise ValueError(f"The split {split!r} of {name!r} ({len(examples)} images) is empty: take a larger slice.")
    _checked(chosen, check)
    paths = [path for path, _, _ in chosen]
    if multi_label:
        labels = np.zeros((len(chosen), len(names)), np.float32)
        for row, (_, example_labels, _) in enumerate(chosen):
            labels[row, [index[label] for label in example_labels]] = 1.0
    else:
        labels = np.asarray([index[example_labels[0]] for _, example_labels, _ in chosen], np.int64)
    dataset = tf.data.Dataset.from_tensor_slices((paths, labels)).map(
        lambda path, label: (_decode(path), label), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return Split(dataset, len(names), len(chosen), f"{name}[{split}]", class_names=names, multi_label=multi_label)


def relabel(split, class_names, role: str = "data"):
    """`split` (a `data.Split`) with its labels as indices into `class_names`, the classes a model was trained on,
    when the split numbers its own classes (a validation or test folder lacking a class numbers the others
    differently: scored by its own order, the wrong classes would be compared). Returned unchanged when either has
    no class names or they agree; a class outside `class_names` is a `ValueError` naming it (`role` says which
    data, e.g. "validation data").

    Example:
        >>> write_colour_squares("val", colours=("red",))
        >>> relabel(load("val"), ("blue", "red")).class_names
        ('blue', 'red')
    """
    import dataclasses

    own = getattr(split, "class_names", None)
    if own is None or class_names is None or tuple(own) == tuple(class_names):
        return split
    import tensorflow as tf

    names = tuple(str(name) for name in class_names)
    unknown = [name for name in own if name not in names]
    if unknown:
        raise ValueError(f"The {role} {split.name} has the class(es) {unknown}, which are not among the model's "
                         f"{len(names)} classes {list(names)[:20]}; fix its labels, or train on data that has them.")
    position = np.asarray([names.index(name) for name in own], np.int64)
    if split.multi_label:  # multi-hot over its own classes -> over `names`
        moves = np.zeros((len(own), len(names)), np.float32)
        moves[np.arange(len(own)), position] = 1.0
        dataset = split.dataset.map(lambda image, label: (image, tf.linalg.matvec(moves, label, transpose_a=True)))
    else:
        dataset = split.dataset.map(lambda image, label: (image, tf.gather(position, label)))
    return dataclasses.replace(split, dataset=dataset, num_classes=len(names), class_names=names)


def label_metadata(split) -> dict | None:
    """What a trained model keeps of `split`'s classes (`{"class_names": [...], "multi_label": ...}`), or None for
    data without class names (a tfds dataset).

    Example:
        >>> write_colour_squares("shapes")
        >>> label_metadata(load("shapes"))
        {'class_names': ['blue', 'red'], 'multi_label': False}
    """
    if getattr(split, "class_names", None) is None:
        return None
    return {"class_names": list(split.class_names), "multi_label": bool(split.multi_label)}


def read_labels(path) -> dict | None:
    """The class names a `.keras` checkpoint of a run on your own images holds (`{"class_names": [...],
    "multi_label": bool}`), or None when it holds none (e.g. a model trained on a tfds dataset).

    Example:
        >>> read_labels("no-such-model.keras") is None
        True
    """
    import zipfile

    try:
        with zipfile.ZipFile(os.fspath(path)) as archive:
            labels = json.loads(archive.read(LABELS_ENTRY))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    if not isinstance(labels, dict) or not isinstance(labels.get("class_names"), list):
        return None
    return labels


def attach_labels(model, labels) -> None:
    """Keep `labels` (a dict as `read_labels` returns, or None) with `model`, where `evaluate`, `vit-keras predict`
    and `callbacks.save_checkpoint` find them (a JSON string attribute, which Keras leaves alone).

    Example:
        >>> import keras
        >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        >>> attach_labels(model, {"class_names": ["blue", "red"], "multi_label": False})
        >>> model_labels(model)["class_names"]
        ['blue', 'red']
    """
    model.vit_keras_labels = None if labels is None else json.dumps(labels)


def model_labels(model) -> dict | None:
    """The labels `attach_labels` (or `train` on your own images) kept with `model`, or None.

    Example:
        >>> model_labels(object()) is None
        True
    """
    text = getattr(model, "vit_keras_labels", None)
    return None if text is None else json.loads(text)
