"""
Title: Prepare a TFDS dataset offline from its original files
Description: Builds a TFDS dataset (IMDB, SST-2, smallNORB, CIFAR-10, ...) from files brought from another machine, with no download.

For machines without internet access. On a machine that has it, download
the dataset's original files (the URLs that TFDS downloads; `--list`
prints them), bring them over, and build the prepared dataset that
`tfds.load(NAME)` reads:

    python examples/prepare_tfds_offline.py imdb_reviews --list
    python examples/prepare_tfds_offline.py imdb_reviews DIR aclImdb_v1.tar.gz
    TFDS_DATA_DIR=DIR python examples/text_capsules.py

The datasets of the examples and their files:

- `imdb_reviews` (examples/text_capsules.py): `aclImdb_v1.tar.gz`;
- `glue/sst2` (`text_capsules.py --dataset glue/sst2`): `SST-2.zip`;
- `smallnorb` (the smallnorb_*.py examples): the six
  `smallnorb-5x...-{training,testing}-{dat,cat,info}.mat.gz` files;
- `cifar10`, `oxford_iiit_pet`: their archives (`--list`).

The files must be the originals: TFDS checks their sizes and checksums.
They are copied to DIR/downloads/manual, where TFDS finds them instead of
downloading. MNIST has its own path from Keras's mnist.npz:
examples/prepare_mnist_offline.py.
"""

import argparse
import os
import shutil


def builder(name, data_dir=None):
    import tensorflow_datasets as tfds

    return tfds.builder(name, data_dir=data_dir)


def needed_files(dataset):
    """`{file name: URL}` of the original files that a builder downloads.

    A builder of several configs (GLUE) registers the files of all of
    them; its config's own `data_url`, when it has one, narrows them.
    """
    infos = dataset.url_infos or {}
    data_url = getattr(dataset.builder_config, "data_url", None)
    if data_url in infos:
        infos = {data_url: infos[data_url]}
    return {info.filename or os.path.basename(url): url for url, info in infos.items()}


def prepare(name, data_dir, files):
    """Builds TFDS `name` in `data_dir` from `files` (paths of its original
    files, names as TFDS downloads them); returns the builder's splits.
    A missing file is a `ValueError` naming it and its URL, before any
    download is tried."""
    import tensorflow_datasets as tfds

    dataset = builder(name, data_dir)
    needed = needed_files(dataset)
    if not needed:
        raise ValueError(
            f"TFDS dataset {name!r} registers no files to download (it may need a "
            "manual download: see its TFDS catalogue page). Received: name={name!r}"
        )
    given = {os.path.basename(path): path for path in files}
    missing = {f: url for f, url in needed.items() if f not in given}
    if missing:
        listing = "; ".join(f"{f} ({url})" for f, url in sorted(missing.items()))
        raise ValueError(
            f"TFDS dataset {name!r} needs these files, not given: {listing}. "
            f"Received: files={sorted(given)}"
        )
    manual_dir = os.path.join(data_dir, "downloads", "manual")
    os.makedirs(manual_dir, exist_ok=True)
    for filename in needed:
        target = os.path.join(manual_dir, filename)
        if not os.path.exists(target) or not os.path.samefile(given[filename], target):
            shutil.copyfile(given[filename], target)
    dataset.download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=manual_dir, try_download_gcs=False)
    )
    return dataset.info.splits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[2])
    parser.add_argument("name", help="TFDS name: imdb_reviews, glue/sst2, smallnorb, ...")
    parser.add_argument("data_dir", nargs="?", help="TFDS data dir to write (TFDS_DATA_DIR)")
    parser.add_argument("files", nargs="*", help="the dataset's original files")
    parser.add_argument("--list", action="store_true", help="print the files it needs, and stop")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.list:
        for filename, url in sorted(needed_files(builder(args.name)).items()):
            print(f"{filename}\t{url}")
        return None
    if args.data_dir is None:
        parser.error("data_dir is required unless --list")
    try:
        splits = prepare(args.name, os.path.abspath(args.data_dir), args.files)
    except ValueError as error:
        parser.error(str(error))
    print(
        f"{args.name} prepared in {os.path.abspath(args.data_dir)}: "
        + ", ".join(f"{name} {split.num_examples}" for name, split in splits.items())
    )
    return splits


if __name__ == "__main__":
    main()
