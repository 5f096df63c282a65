"""The one error type for bad input: it names the key, flag or file that is wrong."""


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
