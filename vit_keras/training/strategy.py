"""Pick the `tf.distribute` strategy and the mixed-precision policy for the hardware at hand.

Example:
    >>> from vit_keras.training import select_strategy, plan_execution
    >>> strategy = select_strategy()
    >>> plan_execution(strategy).policy in ("float32", "mixed_bfloat16", "mixed_float16")  # by the hardware
    True
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os

from vit_keras import hardware

logger = logging.getLogger(__name__)


def _tf():
    import tensorflow as tf

    return tf


def tf_config_workers(environ=None) -> int:
    """How many training tasks (chief + workers) `TF_CONFIG` names; 0 without `TF_CONFIG`.

    Example:
        >>> tf_config_workers({"TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:2"]}, "task": {}}'})
        2
    """
    environ = os.environ if environ is None else environ
    raw = environ.get("TF_CONFIG")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}): {raw!r}") from error
    return len(cluster.get("worker", [])) + len(cluster.get("chief", []))


def connect_tpu(tpu: str = "local"):
    """Resolve, connect and initialise a TPU; returns its `TPUStrategy`.

    `tpu` is "local" on a TPU VM, or a TPU name / `grpc://` address for a TPU node.

    Example:
        >>> strategy = connect_tpu("local")  # needs a TPU VM  # doctest: +SKIP
    """
    tf = _tf()
    forms = "on a TPU VM pass tpu='local', otherwise the TPU's name or grpc://host:port address, or 'none'"
    if tpu.startswith("grpc://"):
        _check_reachable(tpu, forms)  # TensorFlow waits for an unreachable address for ever
    try:
        # A name is looked up through the GCE metadata server and the Cloud TPU API: URLError (an OSError) off GCP.
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
    except (ValueError, RuntimeError, OSError) as error:
        raise ValueError(f"No TPU could be resolved from {tpu!r} ({error}); {forms}.") from error
    try:
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except tf.errors.OpError as error:  # e.g. tpu='local' on a machine without a TPU
        raise ValueError(f"No TPU found at {tpu!r} ({error.message.split('. ')[0]}); {forms}.") from error
    logger.info("Connected to TPU %r with %d cores.", tpu, resolver.num_accelerators().get("TPU", 0))
    return tf.distribute.TPUStrategy(resolver)


TPU_CONNECT_TIMEOUT_S = 20  # a TPU node answers a TCP connection at once; a wrong address never does


def _check_reachable(address: str, forms: str) -> None:
    import socket
    import urllib.parse

    parsed = urllib.parse.urlsplit(address)
    try:
        port = parsed.port
    except ValueError:
        port = None
    if not parsed.hostname or port is None:
        raise ValueError(f"TPU address {address!r} is not grpc://host:port; {forms}.")
    try:
        socket.create_connection((parsed.hostname, port), timeout=TPU_CONNECT_TIMEOUT_S).close()
    except OSError as error:
        raise ValueError(f"No TPU answers at {address!r} ({error}); {forms}.") from error


def on_tpu_vm() -> bool:
    """True on a Cloud TPU VM (see `vit_keras.hardware.on_tpu_vm`).

    Example:
        >>> isinstance(on_tpu_vm(), bool)
        True
    """
    return hardware.on_tpu_vm()


def select_strategy(tpu: str | None = None, devices=None, environ=None):
    """One call that picks how to distribute training, in this order:

    1. `TPUStrategy` when a TPU is named (`tpu=...` or the `TPU_NAME` environment variable) or this machine
       is a TPU VM (then `tpu="local"`); pass `tpu="none"` to train on a TPU VM's CPU instead;
    2. `MultiWorkerMirroredStrategy` when `TF_CONFIG` names several workers;
    3. `MirroredStrategy` over `devices`, or over all GPUs when there are several;
    4. the default (single-device) strategy otherwise.

    Example:
        >>> select_strategy().num_replicas_in_sync  # one CPU or GPU here; several GPUs give one replica each
        1
    """
    tf = _tf()
    environ = os.environ if environ is None else environ
    tpu = tpu or environ.get("TPU_NAME") or ("local" if on_tpu_vm() else None)
    if tpu and tpu != "none":
        return connect_tpu(tpu)
    if tf_config_workers(environ) > 1:
        return tf.distribute.MultiWorkerMirroredStrategy()
    if devices:
        return tf.distribute.MirroredStrategy(list(devices))
    gpus = tf.config.list_logical_devices("GPU")
    if len(gpus) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def device_kind(strategy) -> str:
    """"TPU", "GPU" or "CPU": what the strategy's replicas run on.

    Example:
        >>> import tensorflow as tf
        >>> device_kind(tf.distribute.get_strategy()) in ("CPU", "GPU")
        True
    """
    tf = _tf()
    if isinstance(strategy, tf.distribute.TPUStrategy):
        return "TPU"
    try:
        devices = tuple(strategy.extended.worker_devices)
    except RuntimeError:  # the default strategy places ops wherever TensorFlow does
        devices = ()
    if any("GPU" in device.upper() for device in devices):
        return "GPU"
    if not devices and tf.config.list_logical_devices("GPU"):
        return "GPU"
    return "CPU"


@dataclasses.dataclass(frozen=True)
class ExecutionPlan:
    """The dtype policy and XLA choice for a run, with the reasons for the automatic choice and for any
    departure from the request.

    Example:
        >>> ExecutionPlan("float32", True, ()).loss_scaling
        False
    """

    policy: str
    jit_compile: bool
    notes: tuple[str, ...]

    @property
    def loss_scaling(self) -> bool:
        return self.policy == "mixed_float16"


def _with_bfloat16_gpu(detected: hardware.Machine, bfloat16_gpu: bool | None) -> hardware.Machine:
    """`detected` with its GPUs replaced by one that has (8.0) or lacks (7.0) bfloat16, when that is given."""
    if bfloat16_gpu is None:
        return detected
    capability = hardware.FIRST_BFLOAT16_GPU if bfloat16_gpu else hardware.FIRST_FLOAT16_GPU
    return dataclasses.replace(detected, gpus=(capability,))


def plan_execution(strategy, precision: str = "auto", jit_compile: bool = True, kind: str | None = None,
                   bfloat16_gpu: bool | None = None, machine: hardware.Machine | None = None,
                   environ=None) -> ExecutionPlan:
    """Choose the mixed-precision policy and whether to compile with XLA for `strategy`.

    `precision="auto"` follows the hardware (`vit_keras.hardware.choose_precision`, overridable with
    `VIT_KERAS_PRECISION`): on a CPU, `mixed_bfloat16` without XLA only where the CPU has native bfloat16
    instructions (avx512_bf16 or AMX), float32 with XLA elsewhere; on a GPU, bfloat16 from compute capability
    8.0, float16 with loss scaling on 7.x, float32 below; bfloat16 on TPU. The reason is the plan's first note.

    Then the rules for several replicas: `LossScaleOptimizer` under MirroredStrategy + XLA + float16 crashes
    (`merge_call called while defining a new graph`), so bfloat16 (no loss scaling) is used on GPUs that have
    it and XLA is turned off on older ones. Several CPU replicas (logical devices or workers) run without XLA:
    XLA clusters cannot span CPU devices nor compile the cross-replica all-reduce. bfloat16 on a CPU with
    native bfloat16 instructions runs without XLA too: XLA's CPU backend lacks the oneDNN bfloat16 matmuls.

    `machine` (default: this one, detected) and `bfloat16_gpu` (force the GPU's bfloat16 support) exist for
    planning for other hardware, e.g. in tests.

    Example:
        >>> import tensorflow as tf
        >>> plan_execution(tf.distribute.get_strategy(), "float32", kind="CPU")
        ExecutionPlan(policy='float32', jit_compile=True, notes=())
    """
    kind = kind or device_kind(strategy)
    detected = _with_bfloat16_gpu(machine or hardware.machine(), bfloat16_gpu)
    replicas = strategy.num_replicas_in_sync
    notes = []
    policy = precision
    if precision == "auto":
        choice = hardware.choose_precision(kind, detected, environ=environ)
        policy = choice.policy
        notes.append(f"precision auto: {choice.reason}")
        logger.info(notes[-1])
    departures = []
    if kind == "GPU" and policy == "mixed_float16" and replicas > 1 and jit_compile:
        supported = bool(detected.gpus) and min(detected.gpus) >= hardware.FIRST_BFLOAT16_GPU
        if precision == "auto" and supported:
            policy = "mixed_bfloat16"
            departures.append("bfloat16 instead of float16: MirroredStrategy + XLA + float16 loss scaling crashes")
        else:
            jit_compile = False
            departures.append("XLA off: MirroredStrategy + XLA + float16 loss scaling crashes")
    if kind == "CPU" and replicas > 1 and jit_compile:
        jit_compile = False
        departures.append("XLA off: several CPU replicas cannot share one XLA program")
    pays, why_not = hardware.xla_pays(kind, policy, detected, environ=environ)
    if jit_compile and not pays:
        jit_compile = False
        if precision != "auto":  # the automatic choice's note already says so
            departures.append(why_not)
    import keras

    if jit_compile and keras.backend.backend() == "torch":
        # Keras' jit_compile on PyTorch is torch.compile, which recompiles the train step as the optimizer's state
        # changes (recompilation limits hit in a 6-step CPU run); Keras' own default there is eager.
        jit_compile = False
        notes = [*notes, "torch.compile off: Keras' PyTorch backend runs the train step eagerly"]
    for note in departures:
        logger.warning(note)
    return ExecutionPlan(policy, jit_compile, tuple(notes + departures))


def plan_inference(model=None, precision: str = "auto", kind: str | None = None,
                   machine: hardware.Machine | None = None, environ=None) -> ExecutionPlan:
    """The dtype policy and XLA setting for running a model on this machine, by the same rule as training.

    With `model`, its own dtype policy is kept (its weights were built for it) and only XLA is chosen for it;
    without, `precision` ("auto" or a policy name) is planned as `plan_execution` would on one device.

    Example:
        >>> plan_inference(precision="float32", kind="CPU").jit_compile
        True
    """
    detected = machine or hardware.machine()
    kind = kind or hardware.default_kind(detected)
    if model is not None:
        policy = model.dtype_policy.name
        pays, why_not = hardware.xla_pays(kind, policy, detected, environ=environ)
        return ExecutionPlan(policy, pays, (why_not,) if why_not else ())
    if precision == "auto":
        choice = hardware.choose_precision(kind, detected, environ=environ)
        return ExecutionPlan(choice.policy, choice.jit_compile, (f"precision auto: {choice.reason}",))
    pays, why_not = hardware.xla_pays(kind, precision, detected, environ=environ)
    return ExecutionPlan(precision, pays, (why_not,) if why_not else ())


def is_multi_worker(strategy) -> bool:
    tf = _tf()
    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and (
        strategy.cluster_resolver is not None and tf_config_workers() > 1
    )


def is_chief(strategy) -> bool:
    """True on the worker that writes checkpoints and logs (the chief, or worker 0 without a chief).

    Example:
        >>> import tensorflow as tf
        >>> is_chief(tf.distribute.get_strategy())
        True
    """
    if not is_multi_worker(strategy):
        return True
    resolver = strategy.cluster_resolver
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type == "chief" or (not has_chief and task_type == "worker" and task_id == 0)


def worker_index(strategy) -> int:
    return strategy.cluster_resolver.task_id if is_multi_worker(strategy) else 0


def prepare_keras_fit(model, strategy, sample_batch) -> None:
    """Build `model`'s compiled state on a local batch, and work around a Keras 3.15 fault of
    `MultiWorkerMirroredStrategy`.

    1. Under a strategy, `fit` builds the model on the first batch it takes from the data iterator (and
       reduces it with `strategy.reduce(MEAN, (x, y))`, which collective all-reduce cannot do for a structure).
       That batch is then never trained on, so a distributed run would see other data than a single-device
       one. Here the model is built on `sample_batch` instead and `fit`'s own build step is skipped.
    2. Under `MultiWorkerMirroredStrategy`, the train step reduces scalar logs with
       `strategy.reduce(MEAN, v, axis=0)`, which fails for rank-0 values: reduce those with `axis=None`.

    Example:
        >>> import tensorflow as tf
        >>> tiny_model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
        >>> prepare_keras_fit(tiny_model, tf.distribute.get_strategy(), (images, labels))
        >>> tiny_model.optimizer.built
        True
    """
    tf = _tf()
    with strategy.scope():
        model._symbolic_build(data_batch=sample_batch)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    from keras.src.backend.tensorflow import trainer as tf_trainer

    with strategy.scope():
        model._symbolic_build(data_batch=sample_batch)
    model._maybe_symbolic_build = lambda iterator=None, data_batch=None: None
    if getattr(tf_trainer.reduce_per_replica, "_vit_keras_patched", False):
        return
    original = tf_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if tf_trainer._collective_all_reduce_multi_worker(strategy) and reduction in ("auto", "mean", "sum"):
            op = "SUM" if reduction == "sum" else "MEAN"

            def reduce(value):
                if not isinstance(value, tf.distribute.DistributedValues):
                    return value
                return strategy.reduce(op, value, axis=None)

            return tf.nest.map_structure(reduce, values)
        return original(values, strategy, reduction)

    reduce_per_replica._vit_keras_patched = True
    tf_trainer.reduce_per_replica = reduce_per_replica
