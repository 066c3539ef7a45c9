"""Reading config.pbtxt parameters, shared by specbuild's Triton python models (copied into each model's 1/
folder by the repository writer, so every model folder is self-contained). Standard library only.

An empty value and an unfilled fill_template.py placeholder count as unset; a value that is set but malformed
is an error (raised as ParameterError; models turn it into a load failure that names the parameter).
"""

PLACEHOLDER = "$" + "{"  # an unfilled fill_template.py placeholder starts with this
TRUE_WORDS = frozenset({"true", "1", "t", "y", "yes"})
FALSE_WORDS = frozenset({"false", "0", "f", "n", "no"})


class ParameterError(ValueError):
    """A parameter is set to a value the model cannot use."""


def parameter(config, key, default=None):
    """The stripped string value of parameter `key`, or `default` when it is missing, empty or a placeholder."""
    value = (config.get("parameters") or {}).get(key, {}).get("string_value")
    if value is None or value.strip() == "" or value.startswith(PLACEHOLDER):
        return default
    return value.strip()


def bool_parameter(config, key, default):
    value = parameter(config, key)
    if value is None:
        return default
    word = value.lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ParameterError(f"parameter {key}={value!r} is not a bool (true or false)")


def int_parameter(config, key, default=None, minimum=None):
    value = parameter(config, key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ParameterError(f"parameter {key}={value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ParameterError(f"parameter {key}={number} must be at least {minimum}")
    return number
