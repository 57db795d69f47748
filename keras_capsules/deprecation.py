"""Renamed arguments: the old name keeps working for one release, with a
`DeprecationWarning` that names the new one."""

import warnings

#: The release that drops the old names.
REMOVED_IN = "0.4.0"


def renamed(kwargs, old, new, value, owner):
    """The value of the argument `new`, or of its old name `old` (popped
    from `kwargs`, with a `DeprecationWarning`). A config saved under the
    old name loads the same way.

    Args:
        kwargs: the caller's `**kwargs` (the old name is removed from it).
        old: the argument's old name.
        new: its name now.
        value: what the caller received as `new` (`None`: not given).
        owner: the class or function, for the message.

    Returns:
        the argument's value.

    Example:

    >>> from keras_capsules.deprecation import renamed
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     renamed({"parts": 4}, "parts", "num_parts", None, "HeinsenCapsNet")
    4
    >>> str(caught[0].message)
    'HeinsenCapsNet(parts=) is renamed num_parts= (parts= goes in 0.4.0).'
    """
    if old not in kwargs:
        return value
    old_value = kwargs.pop(old)
    if value is not None:
        raise ValueError(
            f"`{old}` is the old name of `{new}`: give one of them. "
            f"Received: {old}={old_value!r}, {new}={value!r}"
        )
    warnings.warn(
        f"{owner}({old}=) is renamed {new}= ({old}= goes in {REMOVED_IN}).",
        DeprecationWarning,
        stacklevel=3,
    )
    return old_value


def renamed_function(function, old, module):
    """`function` under its old name `old`: the same call, with a
    `DeprecationWarning` naming the new one (`module.function`).

    Example:

    >>> from keras_capsules.deprecation import renamed_function
    >>> old_len = renamed_function(len, "old_len", "builtins")
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     old_len([1, 2])
    2
    >>> str(caught[0].message)
    'builtins.old_len is renamed builtins.len (old_len goes in 0.4.0).'
    """

    def alias(*args, **kwargs):
        warnings.warn(
            f"{module}.{old} is renamed {module}.{function.__name__} ({old} goes in {REMOVED_IN}).",
            DeprecationWarning,
            stacklevel=2,
        )
        return function(*args, **kwargs)

    alias.__name__ = old
    alias.__doc__ = f"Deprecated: `{module}.{function.__name__}`, under its 0.2.0 name."
    return alias
