"""The one error type for bad input: it names the key, flag or file that is wrong, and the names
that changed, so that an old grid, profile or flag is told its new name."""

# Names of earlier versions (TOML keys, profile keys, flags, Parquet columns) and what they are
# called now. 0.10.0 named a die's instruction streams cores, which are AIVs on Ascend and warp
# groups on a GPU.
RENAMED = {"aivs": "cores", "cumsum_aivs": "cumsum_cores", "max_cumsum_aivs": "max_cumsum_cores",
           "aiv_store_gbps": "core_store_gbps", "aiv_copy_gbps": "core_copy_gbps",
           "send_max_aiv_us": "send_max_core_us", "send_mean_aiv_us": "send_mean_core_us",
           "send_spread_aiv_us": "send_spread_core_us"}


def renamed(name: str) -> str:
    """A hint for an unknown name that an earlier version used ("" for any other), a flag's
    (--cumsum-aivs) as a key's."""
    flag = name.startswith("--")
    new = RENAMED.get(name.removeprefix("--").replace("-", "_"))
    if new is None:
        return ""
    return f" ({name} is now {'--' + new.replace('_', '-') if flag else new}, since 0.10.0)"


class InputError(ValueError):
    """Bad input, reported before any simulation starts (the CLI exits with code 2).

    ``key`` is the parameter, TOML key or flag at fault; ``source`` the file it came from, if any.
    """

    def __init__(self, key: str, message: str, source: str | None = None):
        self.key = key
        self.source = source
        self.message = message
        where = f"{source}: " if source else ""
        text = f"{where}{key}: {message}"
        # one line, whatever a key or value the user wrote holds (a TOML key may be "\n")
        super().__init__("".join(c if c.isprintable() else c.encode("unicode_escape").decode()
                                 for c in text))

    def __reduce__(self):
        # raised in a worker process (a cross-validation fold), it crosses back whole
        return type(self), (self.key, self.message, self.source)
