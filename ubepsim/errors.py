"""The one error type for bad input: it names the key, flag or file that is wrong."""


class InputError(ValueError):
    """Bad input, reported before any simulation starts (the CLI exits with code 2).

    ``key`` is the parameter, TOML key or flag at fault; ``source`` the file it came from, if any.
    """

    def __init__(self, key: str, message: str, source: str | None = None):
        self.key = key
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{key}: {message}")
