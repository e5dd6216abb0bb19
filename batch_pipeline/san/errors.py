"""An error as one line: what the operator reads in a shell, a sensor's tick or a run's failure."""


def first_line(error: BaseException) -> str:
    """The first line of the error's message (a driver's error, for a SQLAlchemy one), else its
    type's name."""
    cause = getattr(error, "orig", None) or error
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]


def root_line(error: BaseException) -> str:
    """The first line of the innermost cause: a wrapper's message ("too many retries for DB
    connection") says less than what it wraps ("database ... does not exist")."""
    while (error.__cause__ or error.__context__) is not None:
        error = error.__cause__ or error.__context__
    return first_line(error)
