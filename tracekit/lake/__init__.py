"""The lake store: tracekit's tables in DuckLake (a PostgreSQL or SQLite catalog, Parquet data on
local disk or S3), for teams whose CI runners and engineers write one history at once.

``url`` parses ``lake:`` URLs; ``catalog`` attaches a lake (with the public views) and creates its
tables; ``claims`` keeps concurrent writers from storing a run twice; ``publish`` copies a staged
run into the lake in one transaction; ``maintenance`` compacts it. ``docs/team-store.md`` says
why DuckLake and how to run it.
"""
