"""The ``task`` tool's result contract: kept importable here; the implementation is
the leaf module ``runtime.delegation_contract`` (the thread state needs it)."""

from runtime.delegation_contract import *  # noqa: F403
from runtime.delegation_contract import __all__ as __all__
