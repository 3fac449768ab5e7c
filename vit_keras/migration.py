"""The one-time FutureWarning that every vit-keras 0.2.0 compatibility name (`vit_keras.vit`, `.utils`,
`.visualize`) gives on its first call, naming what to use instead.

FutureWarning rather than DeprecationWarning: Python and pytest hide DeprecationWarning outside `__main__` (and this
project's own pytest configuration ignores it), while the people who must see this are the users running old code.

Example:
    >>> from vit_keras import migration
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     migration.warn_once("example.old_name", "example.new_name")
    >>> caught[0].category.__name__
    'FutureWarning'
"""

from __future__ import annotations

import warnings

MIGRATION_GUIDE = "migration guide, docs/migration.md"

# Names that have warned in this process; a test may clear it to see the warning again.
warned: set[str] = set()


def warn_once(old_name: str, new_name: str, *, stacklevel: int = 3) -> None:
    """Warn (FutureWarning) the first time `old_name` is called in this process, pointing at `new_name`.

    `stacklevel=3` points the warning at the caller of the compatibility function that calls this.

    Example:
        >>> warn_once("example.old_function", "example.new_function")  # a FutureWarning, the first time only
        >>> warn_once("example.old_function", "example.new_function")  # nothing
    """
    if old_name in warned:
        return
    warned.add(old_name)
    warnings.warn(
        f"{old_name} is vit-keras 0.2.0's API, kept so that old code runs; use {new_name} instead "
        f"(see the {MIGRATION_GUIDE}). This warning is shown once per process.",
        FutureWarning,
        stacklevel=stacklevel,
    )
