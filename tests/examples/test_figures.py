"""The examples' figures that choose what to show: `plot_perturbations`."""

import numpy as np

from tests.examples.test_scripts import example, same_on_every_backend


class _Decoder:
    """A model whose `decode` draws a 4x4 picture from the class poses
    `(batch, classes, dim)`: `weights[d]` is how much dimension d shows."""

    def __init__(self, weights):
        self.weights = np.asarray(weights, "float32")

    def decode(self, poses):
        picture = (poses.max(axis=1) * self.weights).sum(axis=-1)
        return np.broadcast_to(picture[:, None, None, None], (len(poses), 4, 4, 1)) + 0.5


@same_on_every_backend
def test_shows_the_dimensions_that_change_the_picture_most(tmp_path, capsys):
    figures = example("figures")
    poses = np.zeros((3, 8), "float32")
    poses[1] = 0.1  # The winning capsule.
    # Dimensions 2, 5 and 6 change the picture, 5 most; the others not at all.
    weights = np.zeros(8)
    weights[[2, 5, 6]] = [0.5, 2.0, 1.0]
    path = tmp_path / "perturbations.png"
    assert figures.plot_perturbations(_Decoder(weights), poses, path, dims_shown=2)
    assert path.stat().st_size > 0
    assert "not written" not in capsys.readouterr().out


@same_on_every_backend
def test_an_undertrained_decoder_writes_no_figure_and_says_so(tmp_path, capsys):
    figures = example("figures")
    poses = np.full((3, 8), 0.1, "float32")
    weights = np.zeros(8)
    weights[0] = 1e-4  # Pictures that differ, but not visibly.
    path = tmp_path / "perturbations.png"
    assert not figures.plot_perturbations(_Decoder(weights), poses, path)
    assert not path.exists()
    assert "perturbations.png not written" in capsys.readouterr().out
