"""The workbench's errors: a set, a path or an argument it cannot use (exit status 2).

They are not the operator's 161002: that status belongs to a call the
operator refuses, and a missing file or a malformed manifest is no call.
"""


# What a message shows of a value at the most: a file may hold a string of
# any length, an integer of thousands of digits or a list nested as deep as
# the JSON reader goes (issue 54).
_SHOWN = 200


def shown(v):
    """``repr(v)`` for a message, cut to ``_SHOWN`` characters; never raises.

    ``repr`` itself fails on a structure nested deeper than the recursion
    limit and on an integer of more digits than ``int``'s string limit.
    """
    try:
        text = repr(v)
    except (RecursionError, ValueError):
        return f"<a {type(v).__name__} too large to show>"
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN - 3]}... ({len(text)} characters)"


class GoldenError(ValueError):
    """A golden set, a result folder, a path or an argument the workbench cannot use.

    Every problem found is named, one line each (the case and the field, or
    the file and what is wrong with it), and nothing is judged or written
    after one.

    Parameters
    ----------
    problems : str or sequence of str
        One line per problem.
    hint : str, optional
        What the caller can do about them (the command line prints it as a
        note, after the problems; it is no problem itself).

    Attributes
    ----------
    problems : list of str
        The lines, in the order found.
    hint : str or None
    exit_status : int
        2, the command line's status for every such problem.
    """

    exit_status = 2

    def __init__(self, problems, hint=None):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.hint = hint
        super().__init__("\n".join(self.problems + ([hint] if hint else [])))


class GoldenFileError(GoldenError):
    """Files that do not match their manifest, a manifest that breaks its format, or a bad path."""
