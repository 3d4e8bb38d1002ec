"""Long-term memory per user, in the LangGraph store.

``records`` (storage), ``recall`` (the request-only block DynamicContext adds),
``extraction`` (a conversation to memory changes), ``queue`` (background
extraction off the request path), ``embeddings`` (a deterministic offline
``Embeddings``), ``setup`` (the store index and models from settings).
"""
