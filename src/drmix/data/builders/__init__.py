"""Builders that turn sources into training collections and BEIR directories (one package per source)."""
