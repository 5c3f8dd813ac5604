"""TensorFlow to bakeoff: its record, engine (eager, tf.function, XLA), tf.distribute strategies and their
parameter servers, optimizer, probes, TF_CONFIG launchers, deployment adapter and runtime. Importing this package
imports no framework; its modules import TensorFlow where they need it."""
