"""``python -m bakeoff.frameworks.tensorflow.server``: one worker or parameter server of a TensorFlow
parameter-server cluster.

The launcher (:func:`bakeoff.run.launchers.plan`) starts one per worker and parameter server, each with its
``TF_CONFIG``, beside the chief (the trial process). This starts a ``tf.distribute.Server`` for its task and
serves until the launcher kills it when the chief is done: the chief's ``ClusterCoordinator`` sends every step,
and the variables live on the parameter servers. A server exiting on its own is a failure of the trial.

Threads: the intra-op pool gets the cores the launcher allotted each process (its ``Placement``); the inter-op
pool at least 2, because with one a worker deadlocks on its first step (measured, TF 2.21: a scheduled step that
reads its variables from the parameter server never completed with ``inter_op_parallelism_threads=1``).
A worker with GPUs uses one of them (its task index, round-robin); a parameter server keeps variables in host
memory and sees none.
"""

from __future__ import annotations

import logging
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from bakeoff.core.contract import Placement  # noqa: E402
from bakeoff.measure.environment import usable_cores  # noqa: E402

log = logging.getLogger("bakeoff.tf_server")


def server_config(threads: int) -> tf.compat.v1.ConfigProto:
    """The server's session configuration for ``threads`` cores."""
    return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                    inter_op_parallelism_threads=max(2, threads))


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    kind, index = resolver.task_type, int(resolver.task_id)
    if kind not in ("worker", "ps"):
        log.error("TF_CONFIG names task %r; a server is a worker or a ps (the chief runs bakeoff.trial)", kind)
        return 2
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices([gpus[index % len(gpus)]] if kind == "worker" else [], "GPU")
    threads = Placement.read().threads or usable_cores()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=kind, task_index=index,
                                  protocol=resolver.rpc_layer or "grpc", config=server_config(threads), start=True)
    log.info("%s %d serving at %s with %d intra-op threads", kind, index, server.target, threads)
    server.join()  # until killed
    return 0


if __name__ == "__main__":
    sys.exit(main())
