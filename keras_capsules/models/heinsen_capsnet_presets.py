"""`HeinsenCapsNet`'s presets: the author's released smallNORB weights."""

from keras_capsules.models.presets import Preset

_COMMIT = "cd3420d3946b9bec670a645ce1f6dbeccca7fe5d"

HEINSEN_CAPSNET_PRESETS = (
    Preset(
        name="heinsen_smallnorb",
        description=(
            "Heinsen's smallNORB classifier (64 parts routed to 5 classes) with the "
            "author's trained weights."
        ),
        model="HeinsenCapsNet",
        config={"input_shape": (96, 96, 2), "num_classes": 5},
        inputs="(batch, 96, 96, 2): the stereo pair in [0, 1] (the coordinate grid is added "
        "inside the model)",
        outputs="the author's output scores a_out (logits), (batch, 5)",
        url=(
            f"https://github.com/glassroom/heinsen_routing/raw/{_COMMIT}/"
            "smallNORB_pretrained_model_state_dict.pt"
        ),
        sha256="26f177368a683a0b7a856a0f44dff0d7a67f6d7187ad0e7c91bded375c488898",
        license="MIT",
        source=f"glassroom/heinsen_routing@{_COMMIT[:7]}",
        paper='Heinsen, "An Algorithm for Routing Capsules in All Domains", 2019 '
        "(arXiv:1911.00792)",
        paper_accuracy=99.1,
        parameters=272_592,
    ),
)
