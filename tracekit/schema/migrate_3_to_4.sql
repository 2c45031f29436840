-- Schema 3 → 4: events dropped at ingest because physics forbids them (a negative duration, an end
-- before its start, a time more than a day from the rest of its rank), per rank and per run.
-- Runs stored before count 0.
ALTER TABLE rank_meta ADD COLUMN n_invalid_events BIGINT DEFAULT 0;
ALTER TABLE run_meta ADD COLUMN n_invalid_events BIGINT DEFAULT 0;
