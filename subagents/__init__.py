"""Delegation to subagents: types, limits, the ledger, results and execution.

The ``task`` tool (``tools/task.py``) and ``SubagentLimitMiddleware``
(``middlewares/subagent_limit.py``) are built from these modules; the
``subagent`` graph (``graphs/subagent.py``) builds each type.
"""
