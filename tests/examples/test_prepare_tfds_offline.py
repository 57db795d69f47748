"""examples/prepare_tfds_offline.py: a TFDS dataset built from its original
files brought from another machine, with no download."""

import io
import tarfile

import pytest

from tests.examples.test_scripts import example


def test_lists_the_files_of_the_examples_datasets():
    prepare = example("prepare_tfds_offline")
    assert prepare.needed_files(prepare.builder("imdb_reviews")) == {
        "aclImdb_v1.tar.gz": "http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
    }
    # GLUE registers every task's files: SST-2 needs its own only.
    assert list(prepare.needed_files(prepare.builder("glue/sst2"))) == ["SST-2.zip"]
    smallnorb = prepare.needed_files(prepare.builder("smallnorb"))
    assert len(smallnorb) == 6 and all(f.endswith(".mat.gz") for f in smallnorb)


def test_a_missing_file_is_named_with_its_url(tmp_path):
    prepare = example("prepare_tfds_offline")
    with pytest.raises(ValueError, match=r"aclImdb_v1\.tar\.gz \(http://ai\.stanford"):
        prepare.prepare("imdb_reviews", str(tmp_path / "tfds"), [str(tmp_path / "other.zip")])
    assert not (tmp_path / "tfds" / "imdb_reviews").exists()


def _fake_imdb(path):
    """aclImdb_v1.tar.gz's layout: aclImdb/{train,test}/{pos,neg}, train/unsup."""
    reviews = {
        "aclImdb/train/pos/0_9.txt": "a fine film",
        "aclImdb/train/neg/1_2.txt": "a dull film",
        "aclImdb/train/unsup/2_0.txt": "a film",
        "aclImdb/test/pos/3_8.txt": "good",
        "aclImdb/test/neg/4_1.txt": "bad",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, text in reviews.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))


def test_builds_from_the_brought_file_without_downloading(tmp_path, monkeypatch):
    import requests
    import tensorflow_datasets as tfds

    def refuse(*args, **kwargs):
        raise AssertionError("a download was tried")

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", refuse)
    prepare = example("prepare_tfds_offline")
    archive = tmp_path / "aclImdb_v1.tar.gz"
    _fake_imdb(archive)
    data_dir = str(tmp_path / "tfds")
    # TFDS reads the file from the manual dir and checks it against the
    # original's checksum.
    with pytest.raises(Exception, match="wrong checksum") as raised:
        prepare.main(["imdb_reviews", data_dir, str(archive)])
    assert "downloads/manual/aclImdb_v1.tar.gz" in str(raised.value)
    # Past the checksum (a fake archive), the dataset is built from it.
    monkeypatch.setattr(
        tfds.download.DownloadManager, "_register_or_validate_checksums", lambda *a, **k: None
    )
    splits = prepare.main(["imdb_reviews", data_dir, str(archive)])
    assert {name: s.num_examples for name, s in splits.items()} == {
        "train": 2,
        "test": 2,
        "unsupervised": 1,
    }
    data = example("data")
    monkeypatch.setattr(data, "connection_error", None)  # prepared: no check
    texts = sorted(
        e["text"] for e in tfds.as_numpy(data.load_split("imdb_reviews", "test", data_dir))
    )
    assert texts == [b"bad", b"good"]
