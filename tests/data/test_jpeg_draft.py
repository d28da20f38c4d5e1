"""Reduced-size JPEG decoding (`pp.jpeg_draft`): lazy folder records, same rng draws, pixels close to full decode."""

import io
import os
import pickle

import numpy as np
import pytest
from PIL import Image

from vit_jax_struct.data import preprocess, sources


def _photo(path, w=640, h=480, seed=0):
    """A smooth (photo-like) RGB JPEG: low-frequency gradients plus mild noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.stack([128 + 100 * np.sin(6 * x + 2 * y), 128 + 100 * np.cos(5 * y), 255 * x * y], -1)
    img = np.clip(img + rng.normal(0, 4, img.shape), 0, 255).astype(np.uint8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(img).save(path, quality=90)


@pytest.fixture
def folder(tmp_path):
    for c, sizes in (("a", [(640, 480), (300, 200)]), ("b", [(500, 375), (120, 90)])):
        for i, (w, h) in enumerate(sizes):
            _photo(str(tmp_path / "train" / c / f"{i}.jpg"), w, h, seed=i)
    return str(tmp_path)


def test_lazy_records_without_draft_equal_eager_decoding(folder):
    eager, lazy = sources.ImageFolderSource(folder, "train"), sources.ImageFolderSource(folder, "train", lazy=True)
    rec = lazy[0]
    assert set(rec) == {"encoded", "path", "label"} and rec["path"] == eager.paths[0]
    assert np.array_equal(sources.decode_image(rec["encoded"]), eager[0]["image"])
    for crop in preprocess.TRAIN_CROPS:
        tp = preprocess.TrainPreprocess(64, crop, 0.05, value_range=None, jpeg_draft=False, randaug_layers=1)
        for i in range(len(eager)):
            a = tp(eager[i], np.random.default_rng(i))
            b = tp(lazy[i], np.random.default_rng(i))
            assert np.array_equal(a["image"], b["image"]) and a["label"] == b["label"]
    ev = preprocess.EvalPreprocess(64, value_range=None)
    assert np.array_equal(ev(eager[1])["image"], ev(lazy[1])["image"])
    assert pickle.loads(pickle.dumps(lazy)).lazy is True


def _paired_crop_differences(tp_a, src_a, tp_b, src_b, per_image=4):
    """Mean |a - b| (uint8 levels) of 32-px train crops of every image, each pair from the same rng seed; checks
    both transforms made the same rng draws."""
    diffs = []
    for i in range(len(src_a)):
        for k in range(per_image):
            ra, rb = np.random.default_rng(10 * i + k), np.random.default_rng(10 * i + k)
            a, b = tp_a(src_a[i], ra), tp_b(src_b[i], rb)
            assert ra.bit_generator.state == rb.bit_generator.state  # the same draws, in the same order
            assert a["image"].shape == (32, 32, 3) and a["image"].dtype == np.uint8
            diffs.append(np.abs(a["image"].astype(int) - b["image"].astype(int)).mean())
    return diffs


def test_draft_decodes_small_crops_at_reduced_size_close_to_full(folder, monkeypatch):
    lazy, eager = sources.ImageFolderSource(folder, "train", lazy=True), sources.ImageFolderSource(folder, "train")
    from PIL import JpegImagePlugin

    reduced = []  # decoded sizes of the drafted files
    original = JpegImagePlugin.JpegImageFile.draft

    def spy(self, mode, size):
        out = original(self, mode, size)
        reduced.append(self.size)
        return out

    monkeypatch.setattr(JpegImagePlugin.JpegImageFile, "draft", spy)
    tp_draft = preprocess.TrainPreprocess(32, "inception", 0.05, value_range=None, jpeg_draft=True,
                                          jpeg_decoder="pillow")
    tp_full = preprocess.TrainPreprocess(32, "inception", 0.05, value_range=None, jpeg_draft=False,
                                         jpeg_decoder="pillow")
    diffs = _paired_crop_differences(tp_draft, lazy, tp_full, eager)
    assert len(reduced) >= 4  # crops >= 64 px on both sides of the 640/500/300-px photos were drafted
    assert any(w <= 320 for w, _ in reduced) and any(w <= 160 for w, _ in reduced)  # at 1/2 and at 1/4 or less
    print("mean |draft - full| per image:", np.round(diffs, 2))
    assert max(diffs) < 4 and np.mean(diffs) < 1.5  # of 255 (≈ 0.3 here): another antialiasing filter


def _jpeg_bytes(img, **save):
    buf = io.BytesIO()
    img.save(buf, "JPEG", **save)
    return buf.getvalue()


def test_simplejpeg_decodes_the_same_pixels_as_pillow_and_falls_back_to_it(tmp_path):
    rng = np.random.default_rng(0)
    rgb = Image.fromarray(rng.integers(0, 256, (37, 53, 3), dtype=np.uint8))
    cases = {"4:2:0": _jpeg_bytes(rgb, quality=85), "4:4:4": _jpeg_bytes(rgb, quality=95, subsampling=0),
             "progressive": _jpeg_bytes(rgb, quality=80, progressive=True),
             "grey": _jpeg_bytes(rgb.convert("L"), quality=90)}
    for name, data in cases.items():
        fast = sources.decode_jpeg_simplejpeg(data)
        assert fast is not None and fast.dtype == np.uint8 and fast.shape == (37, 53, 3), name
        assert np.array_equal(fast, sources.decode_image(data)), name  # bit for bit: the same libjpeg-turbo decode
        assert np.array_equal(sources.decode_image(data, jpeg_decoder="simplejpeg"), fast)
    cmyk = _jpeg_bytes(rgb.convert("CMYK"), quality=90)
    assert sources.decode_jpeg_simplejpeg(cmyk) is None  # CMYK: left to Pillow's Adobe conversion
    assert np.array_equal(sources.decode_image(cmyk, jpeg_decoder="simplejpeg"), sources.decode_image(cmyk))
    png = io.BytesIO()
    rgb.save(png, "PNG")
    assert sources.decode_jpeg_simplejpeg(png.getvalue()) is None
    with pytest.raises(ValueError, match=r"cannot decode image file 'cut\.jpg'"):
        sources.decode_image(cases["4:2:0"][:200], "cut.jpg", jpeg_decoder="simplejpeg")
    with pytest.raises(ValueError, match=r"pp.jpeg_decoder 'turbo' is not one of \('simplejpeg', 'pillow'\)"):
        preprocess.TrainPreprocess(32, jpeg_decoder="turbo")
    with pytest.raises(ValueError, match=r"jpeg_decoder 'turbo' is not one of"):
        sources.decode_image(cases["grey"], jpeg_decoder="turbo")
    # Above Pillow's decompression-bomb limit simplejpeg steps aside, so Pillow's check applies to both decoders.
    small = Image.MAX_IMAGE_PIXELS
    try:
        Image.MAX_IMAGE_PIXELS = 37 * 53 - 1
        assert sources.decode_jpeg_simplejpeg(cases["grey"]) is None
    finally:
        Image.MAX_IMAGE_PIXELS = small


def test_simplejpeg_crops_match_pillows_and_reduce_large_crops(folder, monkeypatch):
    lazy = sources.ImageFolderSource(folder, "train", lazy=True)
    import simplejpeg

    sizes = []
    real = simplejpeg.decode_jpeg

    def spy(data, **kw):
        out = real(data, **kw)
        sizes.append((kw.get("min_width", 0), out.shape[1]))
        return out

    monkeypatch.setattr(simplejpeg, "decode_jpeg", spy)
    for draft in (False, True):
        fast = preprocess.TrainPreprocess(32, "inception", 0.05, value_range=None, jpeg_draft=draft,
                                          jpeg_decoder="simplejpeg")
        slow = preprocess.TrainPreprocess(32, "inception", 0.05, value_range=None, jpeg_draft=draft,
                                          jpeg_decoder="pillow")
        diffs = _paired_crop_differences(fast, lazy, slow, lazy)
        if not draft:
            assert max(diffs) == 0  # full-size decode: the same pixels, the same crops
        else:
            assert max(diffs) < 4 and np.mean(diffs) < 1.5  # both reduce in the DCT domain, by other factors
    reduced = [(need, got) for need, got in sizes if need]
    assert reduced and all(got >= need for need, got in reduced)  # never below the size the crop needs
    assert any(got < 640 for _, got in reduced)


def test_draft_keeps_the_crop_at_least_the_output_size(folder):
    with open(os.path.join(folder, "train", "a", "0.jpg"), "rb") as f:
        data = f.read()  # 640 x 480
    for box_side, want_scale in ((480, 4), (200, 2), (100, 1)):  # crop side / output side 64: 7.5x, 3.1x, 1.6x
        img = Image.open(io.BytesIO(data))
        if box_side >= 128:
            img.draft("RGB", (int(np.ceil(640 * 64 / box_side)), int(np.ceil(480 * 64 / box_side))))
        assert img.size == (640 // want_scale, 480 // want_scale)
        assert box_side * img.size[0] / 640 >= 64


def test_trainer_reads_folders_lazily_unless_skipping(folder, monkeypatch):
    from tests.conftest import tiny_config
    from vit_jax_struct.train import trainer

    made, decoders = [], []
    real = sources.ImageFolderSource

    class Spy(real):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self.lazy)
            decoders.append(self.jpeg_decoder)

    monkeypatch.setattr(sources, "ImageFolderSource", Spy)
    for errors, draft, want, decoder in (("raise", True, True, "simplejpeg"), ("skip", True, False, "pillow"),
                                         ("raise", False, False, "pillow")):
        made.clear()
        decoders.clear()
        cfg = tiny_config(**{"data.source": "folder", "data.root": folder, "data.eval_split": "train",
                             "data.num_classes": 0, "data.decode_errors": errors, "pp.jpeg_draft": draft,
                             "pp.train_crop": "inception", "pp.jpeg_decoder": decoder})
        trainer.build(cfg)
        assert made == [want, False]  # train split lazy or not; eval always decoded in the source
        assert decoders == [decoder, decoder]  # pp.jpeg_decoder reaches the sources that decode
