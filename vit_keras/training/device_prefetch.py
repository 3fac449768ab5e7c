"""Keep the next training batch on the accelerator while the current step runs.

`training.train` feeds `model.fit` a `tf.data` pipeline. What happens to each batch between that pipeline and the
step depends on the Keras backend, and this module fills in where the backend leaves the copy on the step:

- TensorFlow, one GPU: Keras iterates the dataset inside the train function, so every step starts by copying its
  batch from host memory. Here the pipeline ends in `tf.data.experimental.prefetch_to_device`, which keeps the
  next batches in GPU memory. Under a `tf.distribute` strategy of several replicas (and on TPUs) the distributed
  dataset already prefetches each replica's part to its device: nothing is added.
- PyTorch with CUDA: Keras converts each batch with `torch.as_tensor(..., device="cuda")` when the step takes it, a
  copy from pageable memory that the step waits for. Here `TorchDevicePrefetcher` copies the next batch from
  pinned memory with `non_blocking=True` on a side CUDA stream while the current step runs.
- JAX: Keras' trainer (`JAXEpochIterator._one_batch_ahead_iterator`) already starts each batch's `device_put` one
  step ahead on a GPU or TPU, and `jax.device_put` is asynchronous: nothing is added.
- No accelerator: the batches stay where they are ("host (no accelerator)"); there is nothing to prefetch to.

`choose_input_path` makes the choice from the backend and the hardware and names it; `train` logs it and writes it
into `results.json` ("input"). `train(..., device_prefetch=False)` keeps the plain path everywhere,
`device_prefetch=True` asks for this module's prefetching wherever it can be built (on a machine without an
accelerator it then prefetches to the CPU, which changes nothing but lets the path be tested).

Example:
    >>> path = choose_input_path(backend="tensorflow", accelerator=None)
    >>> path.description
    'host (no accelerator)'
"""

from __future__ import annotations

import collections
import dataclasses
import logging

logger = logging.getLogger(__name__)

HOST = "host (no accelerator)"
# Batches held on the device ahead of the step: one in use, one arriving. More only costs device memory.
TF_BUFFER = 2


@dataclasses.dataclass(frozen=True)
class InputPath:
    """How training batches reach the step: `description` (logged and saved), and for the paths this module
    builds, the `device` it prefetches to and the `backend` whose wrapper `apply` puts around the dataset.

    Example:
        >>> InputPath("tensorflow", None, "host (no accelerator)").apply("any dataset")  # nothing to build
        'any dataset'
    """

    backend: str
    device: str | None
    description: str

    @property
    def builds(self) -> bool:
        """True when `apply` wraps the dataset (False: the plain path, or Keras / tf.distribute prefetch)."""
        return self.device is not None

    def apply(self, dataset):
        """`dataset` (a `tf.data.Dataset`) as `model.fit` should take it on this path."""
        if not self.builds:
            return dataset
        if self.backend == "tensorflow":
            import tensorflow as tf

            return dataset.apply(tf.data.experimental.prefetch_to_device(self.device, buffer_size=TF_BUFFER))
        if self.backend == "torch":
            import torch.utils.data

            class Batches(torch.utils.data.IterableDataset):  # of no length: the steps are fit()'s to count
                def __iter__(self):
                    return iter(TorchDevicePrefetcher(dataset, device))

            device = self.device
            # batch_size=None: the batches pass through as they are (Keras' own loader for tf.data does the same).
            return torch.utils.data.DataLoader(Batches(), batch_size=None)
        raise ValueError(f"No device prefetching is built for the {self.backend!r} backend.")


def _accelerator(backend: str, strategy=None) -> str | None:
    """The device batches would be prefetched to on `backend` ("/gpu:0", "cuda:0", "gpu"), or None without one."""
    if backend == "tensorflow":
        import tensorflow as tf

        from vit_keras.training.strategy import device_kind

        kind = device_kind(strategy or tf.distribute.get_strategy())
        return None if kind == "CPU" else ("/gpu:0" if kind == "GPU" else kind.lower())
    if backend == "torch":
        import torch

        return f"cuda:{torch.cuda.current_device()}" if torch.cuda.is_available() else None
    if backend == "jax":
        import jax

        return None if jax.default_backend() == "cpu" else jax.default_backend()
    return None


def _replicas(strategy) -> int:
    return 1 if strategy is None else int(strategy.num_replicas_in_sync)


def choose_input_path(backend: str | None = None, strategy=None, device_prefetch: bool | None = None,
                      accelerator: str | None = "detect", distribution=None) -> InputPath:
    """The way training batches should reach the step on this backend and hardware (see the module's text).

    `device_prefetch`: None chooses from the hardware (prefetch where there is an accelerator and the backend does
    not already), False the plain path, True this module's prefetching wherever it can be built (to the CPU when
    there is no accelerator). `accelerator` ("detect", or a device name / None to plan for other hardware) and
    `distribution` (the active `keras.distribution` on JAX, default: the current one) exist for tests.

    Example:
        >>> choose_input_path(backend="tensorflow", accelerator="/gpu:0").description
        'device prefetch (tf.data prefetch_to_device /gpu:0, 2 batches ahead)'
        >>> choose_input_path(backend="torch", accelerator="cuda:0").description
        'device prefetch (cuda:0: pinned memory, non_blocking copy on a side CUDA stream, one batch ahead)'
        >>> choose_input_path(backend="torch", accelerator="cuda:0", device_prefetch=False).description
        'host (device prefetch off: each batch copied to cuda:0 when its step takes it)'
    """
    if backend is None:
        import keras

        backend = keras.backend.backend()
    if accelerator == "detect":
        accelerator = _accelerator(backend, strategy)
    if backend == "jax":
        return _jax_path(accelerator, device_prefetch, distribution)
    if backend == "tensorflow" and (_replicas(strategy) > 1 or accelerator == "tpu"):
        where = "TPU cores" if accelerator == "tpu" else "devices"
        if device_prefetch is False:
            logger.warning("device_prefetch=False: tf.distribute still places each replica's batch on its device.")
        return InputPath(backend, None, f"device prefetch (tf.distribute: each replica's batch prefetched to its "
                                        f"{where})")
    if backend not in ("tensorflow", "torch"):
        return InputPath(backend, None, HOST if accelerator is None else f"host ({backend} backend)")
    if device_prefetch is False:
        return InputPath(backend, None, HOST if accelerator is None else
                         f"host (device prefetch off: each batch copied to {accelerator} when its step takes it)")
    if accelerator is None:
        if not device_prefetch:
            return InputPath(backend, None, HOST)
        accelerator = "/cpu:0" if backend == "tensorflow" else "cpu"
    if backend == "tensorflow":
        return InputPath(backend, accelerator, f"device prefetch (tf.data prefetch_to_device {accelerator}, "
                                               f"{TF_BUFFER} batches ahead)")
    how = ("pinned memory, non_blocking copy on a side CUDA stream" if accelerator.startswith("cuda")
           else "no accelerator")
    return InputPath(backend, accelerator, f"device prefetch ({accelerator}: {how}, one batch ahead)")


def _jax_path(accelerator, device_prefetch, distribution) -> InputPath:
    if accelerator is None:
        return InputPath("jax", None, HOST)
    if distribution is None:
        from keras import distribution as keras_distribution

        distribution = keras_distribution.distribution()
    if device_prefetch is False:
        logger.warning("device_prefetch=False: Keras' JAX trainer still transfers each batch ahead of its step.")
    if distribution is not None:
        return InputPath("jax", None, "device transfer per step (keras.distribution: Keras shards each batch onto "
                                      "the devices as its step takes it; JAX's transfers are asynchronous)")
    return InputPath("jax", None, f"device prefetch (Keras' JAX trainer: one batch ahead on the {accelerator})")


class TorchDevicePrefetcher:
    """Iterate `batches` (a `tf.data.Dataset` or any iterable of NumPy structures) as torch tensors on `device`,
    the next batch's copy started before the current one is handed out.

    On CUDA the host arrays are pinned and copied with `non_blocking=True` on a side stream; the step's stream
    waits for that copy only when it takes the batch, and the tensors are recorded on it so their memory is not
    reused early. On the CPU the same order of work runs without streams (what the CPU tests check). Each
    `iter()` starts again from `batches`; the batches, their order, a last partial batch and an empty input are
    exactly those of `batches`.

    Example:
        >>> import numpy as np
        >>> batches = [(np.ones((2, 3), "float32"), np.zeros(2, "int32")), (np.ones((1, 3), "float32"),
        ...                                                                np.zeros(1, "int32"))]
        >>> [tuple(x.shape) for x, _ in TorchDevicePrefetcher(batches, "cpu")]
        [(2, 3), (1, 3)]
    """

    def __init__(self, batches, device="cpu", ahead: int = 1):
        import torch

        self.batches = batches
        self.device = torch.device(device)
        self.ahead = max(int(ahead), 1)

    def _host_batches(self):
        as_numpy = getattr(self.batches, "as_numpy_iterator", None)
        return as_numpy() if as_numpy is not None else iter(self.batches)

    def __iter__(self):
        import keras
        import numpy as np
        import torch

        cuda = self.device.type == "cuda"
        stream = torch.cuda.Stream(self.device) if cuda else None

        def to_device(value):
            value = np.asarray(value)
            if cuda:  # one copy, straight into page-locked memory, which the GPU reads without the host
                dtype = torch.from_numpy(np.empty(0, value.dtype)).dtype
                pinned = torch.empty(value.shape, dtype=dtype, pin_memory=True)
                pinned.numpy()[...] = value
                return pinned.to(self.device, non_blocking=True)
            # tf.data hands out read-only arrays, which torch does not take without a copy.
            return torch.from_numpy(value if value.flags.writeable else value.copy()).to(self.device)

        def load(batch):
            if stream is None:
                return keras.tree.map_structure(to_device, batch)
            with torch.cuda.stream(stream):
                return keras.tree.map_structure(to_device, batch)

        source = self._host_batches()
        pending = collections.deque()
        while len(pending) < self.ahead and (batch := next(source, None)) is not None:
            pending.append(load(batch))
        while pending:
            batch = pending.popleft()
            if stream is not None:
                current = torch.cuda.current_stream(self.device)
                current.wait_stream(stream)  # the step's kernels start after this batch's copy
                for tensor in keras.tree.flatten(batch):
                    tensor.record_stream(current)
            nxt = next(source, None)  # start the next copy before this batch's step runs
            if nxt is not None:
                pending.append(load(nxt))
            yield batch
