"""The multi-worker TensorFlow loop: Keras's own steps under the strategy."""

from keras_capsules.distribute.loop import _Loop


class _TensorFlowLoop(_Loop):
    """`MultiWorkerMirroredStrategy`: each worker runs `model.train_step` on its slice.

    Under the strategy Keras scales each replica's loss by `1 / replicas` and
    the optimizer sums the gradients of all replicas (collective ops), so
    each step is one step on the global batch. The strategy runs Keras's own
    `train_step` / `test_step`; the step functions are ours because Keras
    3's reduce of the logs fails under this strategy (keras-team/keras#20585).
    Metrics are sync-on-read variables: read here, they are global.
    """

    def __init__(self, model, num_processes, process_id):
        import tensorflow as tf

        super().__init__(model, num_processes, process_id)
        strategy = model.distribute_strategy

        def run(step):
            @tf.function
            def function(inputs, labels):
                strategy.run(step, args=((inputs, labels),))
                # Read outside the replicas: summed over the workers.
                return model.get_metrics_result()

            return function

        self._train, self._test = run(model.train_step), run(model.test_step)
        self.optimizer_built = False

    def _build_optimizer(self):
        # Its variables, mirrored, before the first step is traced.
        if not self.optimizer_built:
            with self.model.distribute_strategy.scope():
                self.model.optimizer.build(self.model.trainable_variables)
            self.optimizer_built = True

    def train_step(self, inputs, labels):
        self._build_optimizer()
        return {k: float(v) for k, v in self._train(inputs, labels).items()}

    def evaluate(self, x, y, batch_size, steps):
        self.model.reset_metrics()
        logs = {}
        for step, (inputs, labels) in enumerate(self.batches(x, y, batch_size)):
            logs = self._test(inputs, labels)
            if step + 1 == steps:
                break
        return {k: float(v) for k, v in logs.items()}
