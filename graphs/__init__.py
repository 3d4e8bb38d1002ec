"""Graph factories registered in ``langgraph.json``."""
