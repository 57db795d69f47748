"""Parity cases of issue 47: the Chamfer distance, in chunks and at once."""

import keras_capsules
from tests.parity.registry import Case, register
from tests.reference.point_cloud import chamfer_distance

for _chunk in (None, 3):
    register(
        Case(
            name=f"chamfer-distance-chunk{_chunk}",
            inputs=lambda rng: {"p": rng.normal(size=(2, 7, 3)), "q": rng.normal(size=(2, 5, 3))},
            build=lambda c=_chunk: keras_capsules.losses.ChamferDistance(c, reduction=None),
            reference=lambda a: [chamfer_distance(a["p"], a["q"])],
            forward=lambda loss, t: [loss(t["p"], t["q"])],
            diff=("p", "q"),
        )
    )
