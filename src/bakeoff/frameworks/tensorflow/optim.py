"""Adam for Keras 3, with the update of Kingma & Ba's Algorithm 1 — the one ``torch.optim.Adam`` runs.

Keras' own Adam adds ε to √v *before* bias correction (the paper's "ε-hat" form, section 2), which makes the
effective ε step-dependent (ε/√(1−β₂ᵗ): 30× larger at step 1). On parameters with tiny gradients — the query and
key kernels of a freshly initialised Transformer — that changes the very first update: measured from identical
weights on identical batches, training losses drift 2% apart after one step. Same algorithm, same numbers: this
subclass keeps all of Keras' optimizer machinery (variables, iterations, distribution, checkpoints) and changes
only the arithmetic of the update.
"""

from __future__ import annotations

import keras
from keras import ops


class Adam(keras.optimizers.Adam):
    """``keras.optimizers.Adam`` whose update is θ ← θ − lr · m̂ / (√v̂ + ε), as in PyTorch."""

    def update_step(self, gradient, variable, learning_rate):  # noqa: ANN001, ANN201 - Keras' signature
        lr = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        step = ops.cast(self.iterations + 1, variable.dtype)
        correction1 = 1 - ops.power(ops.cast(self.beta_1, variable.dtype), step)
        correction2 = 1 - ops.power(ops.cast(self.beta_2, variable.dtype), step)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, ops.multiply(ops.subtract(gradient, m), 1 - self.beta_1))
        self.assign_add(v, ops.multiply(ops.subtract(ops.square(gradient), v), 1 - self.beta_2))
        denom = ops.add(ops.divide(ops.sqrt(v), ops.sqrt(correction2)), self.epsilon)
        self.assign_sub(variable, ops.divide(ops.multiply(m, lr / correction1), denom))


class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
    """Keras' dynamic loss scaling, with every replica taking the same branch, and its skipped steps counted.

    Keras' ``LossScaleOptimizer`` assumes the gradients it is given are already all-reduced: it decides "finite or
    not" from each replica's own gradients (or, through a merge call, from replica 0's) *before* its inner
    optimizer sums them. bakeoff hands each replica its local gradients, so that the inner optimizer's sum is the
    step's one gradient reduction (:mod:`bakeoff.frameworks.tensorflow.distributed`). An overflow on one replica then
    let another apply the update with an infinite gradient in the sum (measured with MirroredStrategy over 2 logical
    CPUs: replica 1's inf reached the weights), and under MultiWorkerMirroredStrategy workers could take
    different branches, one waiting forever in the update's all-reduce. Here the finiteness flag is itself summed
    over the replicas before the branch: a step is skipped everywhere when any replica's gradients overflowed,
    as it would be were the gradients summed first. (A sum of finite gradients that itself overflows is not
    caught; the inner update would see it, as in Keras.)

    ``skipped`` counts the skipped steps (a non-trainable variable, read at the end of the trial).
    """

    def build(self, var_list):  # noqa: ANN001, ANN201 - Keras' signature
        self.skipped = self.add_variable(shape=(), dtype="int", initializer="zeros", aggregation="none",
                                         name="skipped_steps")
        super().build(var_list)

    def check_finite(self, grads):  # noqa: ANN001, ANN201 - Keras' signature
        import tensorflow as tf  # here, not at import: the Keras engine uses this module's Adam on every backend

        finite = super().check_finite(grads)
        context = tf.distribute.get_replica_context()
        if context is None or context.num_replicas_in_sync == 1:
            return finite
        overflowed = context.all_reduce(tf.distribute.ReduceOp.SUM, 1.0 - tf.cast(finite, tf.float32))
        return tf.equal(overflowed, 0.0)

    def _stateful_handle_non_finite_grads(self):  # noqa: ANN202 - Keras' signature
        super()._stateful_handle_non_finite_grads()
        self.skipped.assign_add(1)
