"""The delegation ledger: kept importable here; the implementation is the leaf
module ``runtime.delegations`` (its reducer is part of ``ThreadState``)."""

from runtime.delegations import *  # noqa: F403
from runtime.delegations import __all__ as __all__
