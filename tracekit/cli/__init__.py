"""Command line (Typer + Rich) over the Python API."""
