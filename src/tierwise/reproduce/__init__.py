"""``tierwise reproduce``: recompute every number of the chapter that follows from its inputs.

The case tables are the reference tests turned outward (``tests/*/test_reference_*.py``
import them from :mod:`tierwise.reproduce.cases`), so a reader checks the book with the
same table the test suite checks the code with. Numbers that do not follow from the
chapter's inputs are listed in :data:`UNREPRODUCIBLE` with the reason.
"""

from tierwise.reproduce._case import Case, Result, Unreproducible
from tierwise.reproduce.run import UNREPRODUCIBLE, all_cases, matches_section, run_cases

__all__ = [
    "UNREPRODUCIBLE",
    "Case",
    "Result",
    "Unreproducible",
    "all_cases",
    "matches_section",
    "run_cases",
]
