"""Small TensorFlow helpers of the tokenizer graph: ragged maps, lookup tables, row concatenation."""

from __future__ import annotations

import tensorflow as tf


def table(keys, values, default, key_dtype=tf.string, value_dtype=tf.int32):
    return tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(tf.constant(keys, key_dtype), tf.constant(values, value_dtype)),
        default_value=default)


def each(function, ragged, *args):
    """`function` on the values of a ragged tensor (same structure out)."""
    return tf.ragged.map_flat_values(function, ragged, *args)


def concat_rows(*parts):
    """Concatenate ragged (or dense) rows of the same batch along the second axis."""
    return tf.concat([part if isinstance(part, tf.RaggedTensor) else tf.RaggedTensor.from_tensor(part)
                      for part in parts], axis=1)
