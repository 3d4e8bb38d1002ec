"""Test support shared by every test module: scripted configs, servers, Postgres."""
