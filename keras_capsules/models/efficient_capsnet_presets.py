"""`EfficientCapsNet`'s presets: the authors' released smallNORB weights."""

from keras_capsules.models.presets import Preset

_COMMIT = "4b337f5bf79d70a56e4dec8b113fe54b44cfe963"

EFFICIENT_CAPSNET_PRESETS = (
    Preset(
        name="efficient_capsnet_smallnorb",
        description=(
            "Efficient-CapsNet's smallNORB model (self-attention routing, the authors' "
            "generator as decoder) with the authors' trained weights."
        ),
        model="EfficientCapsNet",
        config={"input_shape": (48, 48, 2), "num_classes": 5, "architecture": "smallnorb"},
        inputs="(batch, 48, 48, 2): each channel standardised per image, resized to 64x64, "
        "centre crop 48x48",
        outputs="the class capsules' lengths, (batch, 5)",
        url=(
            f"https://github.com/EscVM/Efficient-CapsNet/raw/{_COMMIT}/"
            "bin/efficient_capsnet_SMALLNORB.h5"
        ),
        sha256="c7fbd8cc0f17b611c7f09c99c606a07c8f1bd0d9847b120b05fb0e2c91fe008b",
        license="Apache-2.0",
        source=f"EscVM/Efficient-CapsNet@{_COMMIT[:7]}",
        paper='Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule network with '
        'self-attention routing", Scientific Reports 11, 2021',
        paper_accuracy=97.46,
        parameters=381_234,
    ),
)
