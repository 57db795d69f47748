"""Sabour's CapsNet in plain PyTorch: the baseline of benchmarks/train_step.py.

Same math as `keras_capsules.models.CapsNet()` (see `capsnet_spec.py`);
written the way a PyTorch user would write it fast: NCHW convolutions,
votes as one batched matmul over the 1152 children, routing on
parent-major votes `(B, 10, 1152, 16)` so that both routing contractions
are batched matmuls, `torch.optim.Adam` with Keras's epsilon (1e-7).

`primary="conv"` computes the strided primary-capsule convolution with
`F.conv2d`; `primary="matmul"` with 81 strided slices + one matmul (the
library's XLA-CPU trick). `F.conv2d` is the faster of the two on torch CPU
(measure: `python benchmarks/pure_torch_capsnet.py`).
"""

import torch
import torch.nn.functional as F
from capsnet_spec import (
    ADAM,
    EPSILON,
    NUM_CLASSES,
    RECONSTRUCTION_WEIGHT,
    ROUTING_ITERATIONS,
    SHAPES,
)


def squash(s):
    n2 = (s * s).sum(-1, keepdim=True)
    return s * (n2 / (1.0 + n2) / torch.sqrt(n2 + EPSILON))


def to_torch_layout(name, array, primary="conv"):
    """A Keras-layout weight (NumPy) -> this module's layout (torch)."""
    t = torch.from_numpy(array.copy())
    if name == "conv_kernel" or (name == "primary_kernel" and primary == "conv"):
        return t.permute(3, 2, 0, 1).contiguous()  # HWIO -> OIHW
    if name == "primary_kernel":  # rows ordered (dy, dx, c) like the concatenated slices
        return t.reshape(-1, t.shape[-1])
    if name == "capsule_kernel":  # (I, J, 8, 16) -> (I, 8, J * 16): votes are one bmm
        return t.permute(0, 2, 1, 3).reshape(t.shape[0], t.shape[2], -1).contiguous()
    if name.startswith("dense") and name.endswith("kernel"):
        return t.t().contiguous()  # nn.Linear layout: (out, in)
    return t


def to_keras_layout(name, tensor, primary="conv"):
    """Inverse of `to_torch_layout` (for weights or their gradients) -> NumPy."""
    t = tensor.detach()
    shape = SHAPES[name]
    if name == "conv_kernel" or (name == "primary_kernel" and primary == "conv"):
        t = t.permute(2, 3, 1, 0)
    elif name == "capsule_kernel":
        t = t.reshape(shape[0], shape[2], shape[1], shape[3]).permute(0, 2, 1, 3)
    elif name.startswith("dense") and name.endswith("kernel"):
        t = t.t()
    return t.reshape(shape).numpy()


class PureTorchCapsNet(torch.nn.Module):
    def __init__(self, weights, primary="conv"):
        """`weights`: NumPy arrays in Keras layouts, named as `capsnet_spec.SHAPES`."""
        super().__init__()
        if primary not in ("conv", "matmul"):
            raise ValueError(f"primary must be 'conv' or 'matmul'. Received: primary={primary!r}")
        self.primary = primary
        self.weight = torch.nn.ParameterDict(
            {k: torch.nn.Parameter(to_torch_layout(k, v, primary)) for k, v in weights.items()}
        )

    def keras_layout(self, tensors):
        """{name: tensor in this module's layout} -> {name: NumPy in Keras layout}."""
        return {k: to_keras_layout(k, t, self.primary) for k, t in tensors.items()}

    def features(self, images):
        """Images NCHW (B, 1, 28, 28) -> squashed primary capsules (B, 1152, 8)."""
        w = self.weight
        h = F.relu(F.conv2d(images, w["conv_kernel"], w["conv_bias"]))  # (B, 256, 20, 20)
        batch = h.shape[0]
        if self.primary == "conv":
            p = F.conv2d(h, w["primary_kernel"], w["primary_bias"], stride=2)
            p = p.permute(0, 2, 3, 1)  # (B, 6, 6, 256), capsule type fastest
        else:
            h = h.permute(0, 2, 3, 1)
            patches = torch.cat(
                [h[:, dy : dy + 11 : 2, dx : dx + 11 : 2, :] for dy in range(9) for dx in range(9)],
                -1,
            )
            p = patches @ w["primary_kernel"] + w["primary_bias"]
        return squash(p.reshape(batch, -1, 8))

    def forward(self, images):
        """-> class capsules (B, 10, 16) and their lengths (B, 10)."""
        u = self.features(images)
        batch, children = u.shape[0], u.shape[1]
        votes = torch.bmm(u.transpose(0, 1), self.weight["capsule_kernel"])  # (I, B, J*16)
        votes = votes.view(children, batch, NUM_CLASSES, 16).permute(1, 2, 0, 3).contiguous()
        # Dynamic routing on (B, J, I, D); the first softmax of zeros is uniform.
        v = squash(votes.sum(2) / NUM_CLASSES)
        logits = None
        for _ in range(ROUTING_ITERATIONS - 1):
            update = torch.matmul(votes, v.unsqueeze(-1)).squeeze(-1)  # (B, J, I)
            logits = update if logits is None else logits + update
            c = torch.softmax(logits, dim=1)
            v = squash(torch.matmul(c.unsqueeze(2), votes).squeeze(2))  # (B, J, D)
        return v, torch.sqrt((v * v).sum(-1) + EPSILON)

    def decode(self, masked):
        h = masked
        for i in (1, 2, 3):
            h = F.linear(h, self.weight[f"dense{i}_kernel"], self.weight[f"dense{i}_bias"])
            h = torch.relu(h) if i < 3 else torch.sigmoid(h)
        return h

    def loss(self, images, labels):
        """Margin loss + 0.392 x reconstruction MSE; `labels` integer (B,)."""
        v, scores = self(images)
        onehot = F.one_hot(labels.long(), NUM_CLASSES).to(v.dtype)
        margin = (
            (
                onehot * torch.relu(0.9 - scores) ** 2
                + 0.5 * (1.0 - onehot) * torch.relu(scores - 0.1) ** 2
            )
            .sum(-1)
            .mean()
        )
        decoded = self.decode((v * onehot.unsqueeze(-1)).flatten(1))
        mse = ((decoded - images.flatten(1)) ** 2).mean()
        return margin + RECONSTRUCTION_WEIGHT * mse


def to_nchw(images):
    """NumPy NHWC images -> a torch NCHW tensor."""
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()


def make_train_step(model, compile=False):
    """`step(images, labels) -> loss` (one Adam step); torch.compile on the
    loss (forward, and backward through AOTAutograd) when `compile`."""
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=ADAM["learning_rate"],
        betas=(ADAM["beta_1"], ADAM["beta_2"]),
        eps=ADAM["epsilon"],
    )
    loss_fn = torch.compile(model.loss) if compile else model.loss

    def step(images, labels):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(images, labels)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _compare_primary(batch=32, repeats=5):
    """Times the train step with each primary-capsule implementation, interleaved."""
    import time

    import harness
    from capsnet_spec import batches, init_weights

    images, labels = batches(batch, 1)[0]
    x, y = to_nchw(images), torch.from_numpy(labels)
    steps = {p: make_train_step(PureTorchCapsNet(init_weights(), p)) for p in ("conv", "matmul")}
    times = {p: [] for p in steps}
    for _ in range(repeats + 1):  # the first round warms up
        for primary, step in steps.items():
            start, cpu = time.perf_counter(), time.process_time()
            step(x, y)
            times[primary].append((time.perf_counter() - start, time.process_time() - cpu))
    rows = []
    for primary, t in times.items():
        wall, fastest = harness.median_best(w for w, _ in t[1:])
        cpu, _ = harness.median_best(c for _, c in t[1:])
        rows.append([primary, f"{batch / wall:.1f}", f"{batch / fastest:.1f}", f"{cpu:.2f}"])
    harness.print_table(
        ["primary", "images/s median", "images/s best", "CPU s/step"],
        rows,
        title=f"PureTorchCapsNet train step, batch {batch}, {repeats} steps; {harness.machine()}",
    )


if __name__ == "__main__":
    _compare_primary()
