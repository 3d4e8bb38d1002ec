"""The project's HTTP app, mounted by LangGraph Server through ``http.app``."""
