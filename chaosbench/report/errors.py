"""The one error the report raises: bad input, named precisely enough to fix."""


class ReportInputError(ValueError):
    """A run directory the report cannot read: the message names the file, the field and the fix."""
