"""Image files given to `predict`, `export` and `inspect`: an unreadable or unsupported file is named with the
formats accepted, and a pixel limit read from the header guards against decompression bombs."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from vit_keras import images
from vit_keras.cli import main

RNG = np.random.default_rng(0)
PIXELS = RNG.integers(0, 256, (48, 40, 3), dtype=np.uint8)  # height 48, width 40
ACCEPTED = r"accepted image formats: JPEG, PNG, GIF, BMP"


def _jpeg_bytes():
    return tf.io.encode_jpeg(PIXELS).numpy()


def _bad_files(tmp_path):
    jpeg = _jpeg_bytes()
    files = {
        "truncated.jpg": jpeg[: len(jpeg) // 2],
        "garbled.jpg": jpeg[:300] + RNG.integers(0, 256, len(jpeg) - 300, dtype=np.uint8).tobytes(),
        "notes.txt": b"these are not pixels\n",
        "empty.png": b"",
    }
    paths = {}
    for name, data in files.items():
        paths[name] = tmp_path / name
        paths[name].write_bytes(data)
    paths["scan.tiff"] = tmp_path / "scan.tiff"
    Image.fromarray(PIXELS).save(paths["scan.tiff"])
    return paths


def _png_header(width, height):
    """A PNG that announces width x height (signature + IHDR + a tiny IDAT): enough to be refused on its header."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(
        b"IEND", b"")


@pytest.mark.parametrize("name, reason", [
    ("truncated.jpg", r"could not be decoded as a JPEG image .*truncated or corrupt"),
    ("garbled.jpg", r"could not be decoded as a JPEG image .*truncated or corrupt"),
    ("notes.txt", r"is a text file; " + ACCEPTED),
    ("scan.tiff", r"is a TIFF image; " + ACCEPTED),
    ("empty.png", r"is an empty file; " + ACCEPTED),
])
def test_bad_image_files_are_named(tmp_path, name, reason):
    path = _bad_files(tmp_path)[name]
    with pytest.raises(ValueError, match=rf"{name}' .*{reason}|{name}' {reason}"):
        images.read_image(str(path), (32, 32))


@pytest.mark.parametrize("command", [
    ["predict", "{image}", "--model", "Ti/16", "--image-size", "32", "--random-weights"],
    ["inspect", "{image}", "--model", "Ti/16", "--image-size", "32", "--out", "{tmp}/figures"],
    ["export", "{tmp}/vit.tflite", "--format", "tflite", "--model", "Ti/16", "--image-size", "32",
     "--check-images", "{image}"],
])
@pytest.mark.parametrize("name", ["truncated.jpg", "scan.tiff"])
def test_cli_commands_name_the_bad_image(tmp_path, capsys, command, name):
    path = _bad_files(tmp_path)[name]
    args = [part.format(image=path, tmp=tmp_path) for part in command]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert name in err and "JPEG, PNG, GIF, BMP" in err and "Traceback" not in err
    assert not (tmp_path / "vit.tflite").exists()


def test_header_sizes_of_every_accepted_format(tmp_path):
    jpeg = tmp_path / "a.jpg"
    jpeg.write_bytes(_jpeg_bytes())
    expected = {str(jpeg): ("JPEG", (40, 48))}
    for kind, suffix in (("PNG", "png"), ("GIF", "gif"), ("BMP", "bmp")):
        path = tmp_path / f"a.{suffix}"
        Image.fromarray(PIXELS).save(path)
        expected[str(path)] = (kind, (40, 48))
    exif = tmp_path / "exif.jpg"  # frame header after an EXIF segment
    exif_data = Image.Exif()
    exif_data[0x010E] = "x" * 5000
    Image.fromarray(PIXELS).save(exif, exif=exif_data.tobytes())
    expected[str(exif)] = ("JPEG", (40, 48))
    for path, header in expected.items():
        assert images.image_header(path) == header
        assert images.read_image(path, (16, 16)).shape == (16, 16, 3)


def test_decompression_bomb_is_refused_from_its_header(tmp_path):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(_png_header(16000, 16000))
    assert bomb.stat().st_size < 200
    with pytest.raises(ValueError, match=r"bomb.png' is a 16000x16000 PNG \(256,000,000 pixels\), above the limit "
                                         r"of 89,478,485 pixels .*VIT_KERAS_MAX_IMAGE_PIXELS=256000000"):
        images.read_image(str(bomb), (32, 32))


def test_pixel_limit_can_be_lowered_and_raised(tmp_path, monkeypatch):
    path = tmp_path / "large.png"
    Image.fromarray(np.zeros((600, 500, 3), np.uint8)).save(path)
    monkeypatch.setenv(images.MAX_PIXELS_ENV, "100000")
    with pytest.raises(ValueError, match=r"500x600 PNG \(300,000 pixels\), above the limit of 100,000"):
        images.read_image(str(path), (32, 32))
    assert images.read_image(str(path), (32, 32), max_pixels=300_000).shape == (32, 32, 3)
    monkeypatch.setenv(images.MAX_PIXELS_ENV, "300000")
    assert images.read_image(str(path), (32, 32)).shape == (32, 32, 3)
    monkeypatch.setenv(images.MAX_PIXELS_ENV, "lots")
    with pytest.raises(ValueError, match="must be a positive whole number"):
        images.read_image(str(path), (32, 32))


def test_read_image_matches_tensorflow_decoding(tmp_path):
    path = tmp_path / "a.png"
    Image.fromarray(PIXELS).save(path)
    expected = tf.image.resize(tf.cast(PIXELS, tf.float32), (24, 20)).numpy()
    np.testing.assert_array_equal(images.read_image(str(path), (24, 20)), expected)


def _encoded(kind, pixels=PIXELS):
    if kind == "JPEG":
        return _jpeg_bytes()
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, kind)
    return buffer.getvalue()


def _gif_with_a_small_screen():
    """A GIF whose logical screen says 1x1 but whose one frame is 40x48: TF decodes it to the frame's size."""
    data = bytearray(_encoded("GIF"))
    data[6:10] = struct.pack("<HH", 1, 1)
    return bytes(data)


@pytest.mark.parametrize("kind", ["JPEG", "PNG", "GIF", "BMP"])
def test_encoded_bytes_are_checked_like_files(tmp_path, kind):
    data = _encoded(kind)
    path = tmp_path / f"a.{kind.lower()}"
    path.write_bytes(data)
    assert images.encoded_image_header(data) == images.image_header(str(path)) == (kind, (40, 48))
    assert images.check_image_bytes(data, "the upload", max_pixels=40 * 48) == (kind, (40, 48))
    with pytest.raises(ValueError, match=rf"^the upload is a 40x48 {kind} \(1,920 pixels\), above the limit of "
                                         r"1,919 pixels .*VIT_KERAS_MAX_IMAGE_PIXELS=1920"):
        images.check_image_bytes(data, "the upload", max_pixels=40 * 48 - 1)
    with pytest.raises(ValueError, match=r"^the upload is a text file; " + ACCEPTED):
        images.check_image_bytes(b"plain words", "the upload")


@pytest.mark.parametrize("kind, length", [("JPEG", 4), ("PNG", 20), ("GIF", 10)])
def test_a_header_cut_before_its_size_is_named_truncated(kind, length):
    """The first bytes say the format, but the file ends before its width and height (a PNG's IHDR is cut in its
    width): refused as a truncated header of that format, not with a struct error."""
    with pytest.raises(ValueError, match=rf"^the upload is not a readable {kind} image \(its header is truncated"):
        images.check_image_bytes(_encoded(kind)[:length], "the upload")


def test_gif_frames_count_against_the_limit_not_just_its_screen(tmp_path):
    """TF sizes a GIF by its frames' descriptors: a 1x1 screen over a 40x48 frame decodes to 40x48, and every
    frame of an animation is decoded. Both are counted."""
    small_screen = _gif_with_a_small_screen()
    assert tf.io.decode_image(small_screen, channels=3, expand_animations=False).shape == (48, 40, 3)
    assert images.encoded_image_header(small_screen) == ("GIF", (40, 48))
    with pytest.raises(ValueError, match=r"is a 40x48 GIF \(1,920 pixels\), above the limit of 1,919"):
        images.check_image_bytes(small_screen, "the upload", max_pixels=1919)
    path = tmp_path / "animation.gif"
    frames = [Image.fromarray(PIXELS), Image.fromarray(255 - PIXELS)]
    frames[0].save(path, save_all=True, append_images=frames[1:])
    assert tf.io.decode_image(path.read_bytes(), channels=3).shape == (2, 48, 40, 3)
    assert images.check_image_file(path, max_pixels=2 * 1920) == ("GIF", (40, 48))
    with pytest.raises(ValueError, match=r"animation.gif' is a 40x48 GIF \(3,840 pixels in all its frames\), above "
                                         r"the limit of 3,839 .*VIT_KERAS_MAX_IMAGE_PIXELS=3840"):
        images.read_image(path, (8, 8), max_pixels=2 * 1920 - 1)


def test_url_byte_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(images.MAX_BYTES_ENV, raising=False)
    assert images.max_image_bytes() == images.DEFAULT_MAX_IMAGE_BYTES
    monkeypatch.setenv(images.MAX_BYTES_ENV, "5000")
    assert images.max_image_bytes() == 5000
    for value in ("lots", "0", "-3", "1e6"):
        monkeypatch.setenv(images.MAX_BYTES_ENV, value)
        with pytest.raises(ValueError, match=rf"\${images.MAX_BYTES_ENV}='.*' must be a positive whole number"):
            images.max_image_bytes()
