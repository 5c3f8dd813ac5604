"""Reference implementations of the text classifier, each built from a well-known public library's own layers at
bakeoff's configuration, with the training step that library's users write. Used by ``reference_efficiency.py``.

Each ``*_reference(cfg, out_units, execution, threads, seed)`` returns a :class:`Reference`: ``step(batch)``
trains on one numpy batch and returns the loss as a Python float (a host copy, as bakeoff's ``train_step``),
``logits(tokens)`` is the inference forward pass (for the shape checks in tests), and the parameter count.
A framework is imported inside its own function only: each runs in its own process.

What differs from bakeoff's model, unavoidably (the parameter counts are equal all the same):

* PyTorch, ``transformers`` BERT (``BertEncoder``: BertLayer = BertSelfAttention + BertSelfOutput + BertIntermediate
  + BertOutput, post-norm) has no dropout between the FFN's activation and its output projection, where
  ``torch.nn.TransformerEncoderLayer`` (bakeoff's block) has one: the reference does one (B, T, d_ff) dropout less
  per layer. BERT's own embeddings module (token-type table, LayerNorm and dropout after the embeddings) and
  its pooler are not used: token + learned position ``nn.Embedding``, as bakeoff's model has.
* TensorFlow, ``keras_hub.layers.TransformerEncoder`` has the same missing FFN dropout; its attention is Keras'
  ``MultiHeadAttention``, as bakeoff's block's.
* JAX, a Flax Linen encoder as ``flax/examples`` (wmt, lm1b) write theirs — ``nn.MultiHeadDotProductAttention``,
  an ``MlpBlock`` with dropout after the activation and after the output, ``nn.make_attention_mask``, a
  ``TrainState`` and a jitted step — in post-norm order and with biases, as bakeoff's configuration has (the
  examples are pre-norm and bias-free). Flax's examples are not pip-installable, so these are their layers
  re-assembled, not their file.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

Batch = Mapping[str, np.ndarray]
Step = Callable[[Batch], float]


class Reference(NamedTuple):
    step: Step
    logits: Callable[[np.ndarray], np.ndarray]  # (B, T) int tokens -> (B, out_units)
    num_params: int


def torch_reference(cfg: Mapping[str, Any], out_units: int, execution: str, threads: int,
                    seed: int = 0) -> Reference:
    """Hugging Face ``transformers`` ``BertEncoder`` + token/position embeddings + mean pooling + head; eager, or
    a plain ``torch.compile(model)`` with the optimizer eager (``execution="graph"``)."""
    import torch
    import torch.nn.functional as F
    from torch import nn
    from transformers import BertConfig
    from transformers.masking_utils import create_bidirectional_mask
    from transformers.models.bert.modeling_bert import BertEncoder

    torch.set_num_threads(threads)  # as bakeoff's engine pins them: intra- and inter-op, the same count
    if torch.get_num_interop_threads() != threads:
        torch.set_num_interop_threads(threads)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=cfg["vocab_size"], hidden_size=cfg["d_model"],
                        num_hidden_layers=cfg["num_layers"], num_attention_heads=cfg["num_heads"],
                        intermediate_size=cfg["d_ff"], hidden_act="relu", hidden_dropout_prob=cfg["dropout"],
                        attention_probs_dropout_prob=cfg["dropout"], max_position_embeddings=cfg["seq_len"],
                        layer_norm_eps=cfg["layer_norm_eps"], attn_implementation="sdpa")

    class BertClassifier(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
            self.positions = nn.Embedding(cfg["seq_len"], cfg["d_model"])
            self.encoder = BertEncoder(config)
            self.drop = nn.Dropout(cfg["dropout"])
            self.head = nn.Linear(cfg["d_model"], out_units)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            valid = tokens != 0  # (B, T)
            x = self.tokens(tokens) + self.positions.weight[: tokens.shape[1]]  # (B, T, d)
            mask = create_bidirectional_mask(config=config, inputs_embeds=x, attention_mask=valid)  # as BertModel
            x = self.encoder(x, attention_mask=mask).last_hidden_state
            keep = valid.unsqueeze(-1).to(x.dtype)
            return self.head(self.drop((x * keep).sum(1) / keep.sum(1)))  # (B, out_units)

    model = BertClassifier().train()
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg["learning_rate"], betas=(0.9, 0.999), eps=1e-8)
    forward = torch.compile(model) if execution == "graph" else model

    def step(batch: Batch) -> float:
        tokens, labels = torch.from_numpy(batch["tokens"]), torch.from_numpy(batch["labels"])
        optimizer.zero_grad(set_to_none=True)
        logits = forward(tokens)
        if out_units == 1:
            loss = F.binary_cross_entropy_with_logits(logits[:, 0], labels.to(logits.dtype))
        else:
            loss = F.cross_entropy(logits, labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    @torch.no_grad()
    def logits(tokens: np.ndarray) -> np.ndarray:
        model.eval()
        out = model(torch.from_numpy(tokens)).numpy()
        model.train()
        return out

    return Reference(step, logits, sum(p.numel() for p in model.parameters() if p.requires_grad))


def tf_reference(cfg: Mapping[str, Any], out_units: int, execution: str, threads: int,
                 seed: int = 0) -> Reference:
    """``keras_hub.layers.TokenAndPositionEmbedding`` + ``keras_hub.layers.TransformerEncoder`` blocks (Keras 3 on
    TensorFlow), mean pooling, head; a ``GradientTape`` step in ``tf.function`` with Keras' Adam
    (``jit_compile=True`` for ``execution="xla"``)."""
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import keras_hub
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    keras.utils.set_random_seed(seed)
    keras.mixed_precision.set_dtype_policy("float32")
    ops = keras.ops

    tokens = keras.Input((cfg["seq_len"],), dtype="int32")
    valid = ops.not_equal(tokens, 0)  # (B, T)
    x = keras_hub.layers.TokenAndPositionEmbedding(cfg["vocab_size"], cfg["seq_len"], cfg["d_model"])(tokens)
    for _ in range(cfg["num_layers"]):
        x = keras_hub.layers.TransformerEncoder(cfg["d_ff"], cfg["num_heads"], dropout=cfg["dropout"],
                                                activation="relu", layer_norm_epsilon=cfg["layer_norm_eps"],
                                                normalize_first=False)(x, padding_mask=valid)
    keep = ops.expand_dims(ops.cast(valid, x.dtype), -1)  # (B, T, 1)
    pooled = ops.sum(x * keep, 1) / ops.sum(keep, 1)
    logits = keras.layers.Dense(out_units)(keras.layers.Dropout(cfg["dropout"])(pooled))
    model = keras.Model(tokens, logits)
    optimizer = keras.optimizers.Adam(cfg["learning_rate"], beta_1=0.9, beta_2=0.999, epsilon=1e-8)
    optimizer.build(model.trainable_variables)

    def train(tokens: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            logits = model(tokens, training=True)
            if out_units == 1:
                loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(tf.cast(labels, tf.float32),
                                                                              logits[:, 0]))
            else:
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        return loss

    compiled = tf.function(train, jit_compile=execution == "xla") if execution in ("graph", "xla") else train

    def step(batch: Batch) -> float:
        return float(compiled(tf.convert_to_tensor(batch["tokens"]), tf.convert_to_tensor(batch["labels"])))

    def logits(tokens: np.ndarray) -> np.ndarray:
        return model(tf.convert_to_tensor(tokens), training=False).numpy()

    return Reference(step, logits, int(sum(np.prod(v.shape) for v in model.trainable_variables)))


def jax_reference(cfg: Mapping[str, Any], out_units: int, execution: str, threads: int,
                  seed: int = 0) -> Reference:
    """A Flax Linen encoder written as ``flax/examples`` write theirs, trained by a jitted ``TrainState`` step.
    ``threads`` is not applied: XLA's CPU runtime has no thread-count setting (as in bakeoff's JAX engine)."""
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax
    from flax.training import train_state

    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_default_matmul_precision", "highest")  # as bakeoff's engine (no effect on CPU)
    d, rate = cfg["d_model"], cfg["dropout"]

    class MlpBlock(nn.Module):  # flax/examples/wmt/models.py, relu
        @nn.compact
        def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
            y = nn.Dropout(rate)(nn.relu(nn.Dense(cfg["d_ff"])(x)), deterministic=deterministic)
            return nn.Dropout(rate)(nn.Dense(d)(y), deterministic=deterministic)

    class Encoder1DBlock(nn.Module):  # flax/examples/wmt/models.py, post-norm
        @nn.compact
        def __call__(self, x: jax.Array, mask: jax.Array, deterministic: bool) -> jax.Array:
            a = nn.MultiHeadDotProductAttention(num_heads=cfg["num_heads"], qkv_features=d, broadcast_dropout=False,
                                                dropout_rate=rate, deterministic=deterministic)(x, mask=mask)
            x = nn.LayerNorm(epsilon=cfg["layer_norm_eps"])(x + nn.Dropout(rate)(a, deterministic=deterministic))
            return nn.LayerNorm(epsilon=cfg["layer_norm_eps"])(x + MlpBlock()(x, deterministic))

    class Classifier(nn.Module):
        @nn.compact
        def __call__(self, tokens: jax.Array, deterministic: bool = True) -> jax.Array:
            valid = tokens > 0  # (B, T)
            x = nn.Embed(cfg["vocab_size"], d)(tokens)
            x = x + self.param("pos_embedding", nn.initializers.normal(0.02), (1, cfg["seq_len"], d))  # AddPositionEmbs
            mask = nn.make_attention_mask(valid, valid)  # (B, 1, T, T)
            for _ in range(cfg["num_layers"]):
                x = Encoder1DBlock()(x, mask, deterministic)
            keep = valid[..., None].astype(x.dtype)
            pooled = nn.Dropout(rate)((x * keep).sum(1) / keep.sum(1), deterministic=deterministic)
            return nn.Dense(out_units)(pooled)  # (B, out_units)

    model = Classifier()
    rng, dropout_rng = jax.random.split(jax.random.PRNGKey(seed))
    params = model.init(rng, jnp.ones((1, cfg["seq_len"]), jnp.int32))["params"]
    tx = optax.adam(cfg["learning_rate"], b1=0.9, b2=0.999, eps=1e-8)
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)

    def train(state: train_state.TrainState, tokens: jax.Array, labels: jax.Array):  # noqa: ANN202
        step_rng = jax.random.fold_in(dropout_rng, state.step)

        def loss_fn(params: Any) -> jax.Array:
            logits = state.apply_fn({"params": params}, tokens, deterministic=False, rngs={"dropout": step_rng})
            if out_units == 1:
                return optax.sigmoid_binary_cross_entropy(logits[:, 0], labels.astype(jnp.float32)).mean()
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss

    compiled = jax.jit(train, donate_argnums=0) if execution == "graph" else train
    holder = [state]

    def step(batch: Batch) -> float:
        holder[0], loss = compiled(holder[0], jnp.asarray(batch["tokens"]), jnp.asarray(batch["labels"]))
        return float(loss)

    def logits(tokens: np.ndarray) -> np.ndarray:
        return np.asarray(model.apply({"params": holder[0].params}, jnp.asarray(tokens)))

    return Reference(step, logits, int(sum(x.size for x in jax.tree.leaves(params))))


REFERENCES: dict[str, Callable[..., Reference]] = {
    "torch": torch_reference, "tensorflow": tf_reference, "jax": jax_reference}
# The library whose absence leaves a framework's reference unmeasured.
REFERENCE_LIBRARY = {"torch": "transformers", "tensorflow": "keras_hub", "jax": "flax"}
# How to get it where bakeoff[bench] alone does not: keras-hub needs tensorflow-text, which needs the full
# `tensorflow` wheel beside tensorflow-cpu, so it is installed without its dependencies (make bench does it).
INSTALL_HINT = {"tensorflow": "pip install --no-deps keras-hub==0.32.0 (make bench does)"}
