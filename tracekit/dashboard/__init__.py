"""Dash dashboard for weekly performance reviews — arrives with issue 7."""
