"""The multi-process torch loop: `DistributedDataParallel` around the Keras model."""

import contextlib

import keras
import numpy as np

from keras_capsules.distribute.loop import _Loop


class _TorchLoop(_Loop):
    """`DistributedDataParallel` around the Keras model (the Keras torch guide).

    The forward pass and `model.compute_loss` run inside the DDP module, whose
    backward pass averages the gradients over the processes; the model's
    optimizer applies them. Logs are this process's, averaged over the
    processes at the end of each epoch.
    """

    def __init__(self, model, num_processes, process_id):
        import torch

        super().__init__(model, num_processes, process_id)

        class TrainStep(torch.nn.Module):
            def __init__(self, model):
                super().__init__()
                self.model = model

            def forward(self, inputs, labels):
                # A model with `returning_poses()` (the ready models) gives
                # inside it `(scores, poses)`, the y_pred its loss decodes, as
                # in its own train_step. Asked of the method, not the class:
                # this package depends on no model class.
                returning_poses = getattr(self.model, "returning_poses", None)
                with returning_poses() if returning_poses else contextlib.nullcontext():
                    y_pred = self.model(inputs, training=True)
                return self.model.compute_loss(inputs, labels, y_pred, training=True), y_pred

        device_ids = [torch.cuda.current_device()] if torch.cuda.is_available() else None
        # DDP broadcasts process 0's variables now, then averages the gradients.
        self.module = torch.nn.parallel.DistributedDataParallel(TrainStep(model), device_ids)
        self.losses = []

    def train_step(self, inputs, labels):
        import torch

        model, trainable = self.model, self.model.trainable_variables
        inputs, labels = keras.ops.convert_to_tensor(inputs), keras.ops.convert_to_tensor(labels)
        for variable in trainable:
            variable.value.grad = None
        loss, y_pred = self.module(inputs, labels)
        loss.backward()
        with torch.no_grad():
            model.optimizer.apply([v.value.grad for v in trainable], trainable)
            logs = dict(model.compute_metrics(inputs, labels, y_pred))
        self.losses.append(float(loss.detach()))
        logs["loss"] = float(np.mean(self.losses))
        return {k: float(keras.ops.convert_to_numpy(v)) for k, v in logs.items()}

    def epoch_logs(self, logs):
        import torch.distributed as dist

        self.losses = []
        # Non-trainable variables (BatchNorm statistics) follow process 0,
        # as DDP's `broadcast_buffers` does for torch modules.
        for variable in self.model.non_trainable_variables:
            dist.broadcast(variable.value.data, 0)
        return _mean_over_processes(logs)

    def evaluate(self, x, y, batch_size, steps):
        self.model.reset_metrics()
        logs = {}
        for step, (inputs, labels) in enumerate(self.batches(x, y, batch_size)):
            logs = self.model.test_on_batch(inputs, labels, return_dict=True)
            if step + 1 == steps:
                break
        return _mean_over_processes(logs)


def _mean_over_processes(logs):
    """Per-process means -> global means (equal slices per process)."""
    import torch
    import torch.distributed as dist

    if not logs:
        return {}
    values = torch.tensor([float(v) for v in logs.values()], dtype=torch.float64)
    dist.all_reduce(values)
    values /= dist.get_world_size()
    return dict(zip(logs, values.tolist()))
