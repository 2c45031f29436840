-- Schema 4 → 5: per-run rollups in run_meta (device and host event counts, summed device time, the
-- main device), so the run list and the dashboard's Runs page read one row per run instead of every
-- event.
-- Backfilled here for the runs the store holds.
ALTER TABLE run_meta ADD COLUMN n_device_events BIGINT;
ALTER TABLE run_meta ADD COLUMN n_host_events BIGINT;
ALTER TABLE run_meta ADD COLUMN device_time_ns BIGINT;
ALTER TABLE run_meta ADD COLUMN main_rank INTEGER;
ALTER TABLE run_meta ADD COLUMN main_device INTEGER;
UPDATE run_meta SET main_rank = c.rank, main_device = c.device
FROM (SELECT d.run_id, d.rank, d.device
      FROM device_meta d
      LEFT JOIN (SELECT run_id, rank, device, count(*) AS n FROM device_activity GROUP BY ALL) b
        USING (run_id, rank, device)
      QUALIFY row_number() OVER (PARTITION BY d.run_id ORDER BY b.n DESC NULLS LAST, d.rank, d.device) = 1) c
WHERE run_meta.run_id = c.run_id;
UPDATE run_meta SET n_device_events = coalesce(d.n, 0), device_time_ns = coalesce(d.t, 0)
FROM (SELECT m.run_id, d.n, d.t FROM run_meta m
      LEFT JOIN (SELECT run_id, count(*) AS n, sum(dur_ns) AS t FROM device_activity GROUP BY run_id) d
      USING (run_id)) d
WHERE run_meta.run_id = d.run_id;
UPDATE run_meta SET n_host_events = coalesce(h.n, 0)
FROM (SELECT m.run_id, h.n FROM run_meta m
      LEFT JOIN (SELECT run_id, count(*) AS n FROM host_events GROUP BY run_id) h USING (run_id)) h
WHERE run_meta.run_id = h.run_id;
