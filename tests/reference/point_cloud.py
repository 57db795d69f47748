"""Reference point-cloud distances in float64."""


def chamfer_distance(p, q):
    """Per example: mean over p of the squared distance to its nearest
    point of q, plus the same from q to p. p (b, n, d), q (b, m, d) ->
    (b,)."""
    distances = ((p[:, :, None, :] - q[:, None, :, :]) ** 2).sum(-1)
    return distances.min(axis=2).mean(axis=1) + distances.min(axis=1).mean(axis=1)
