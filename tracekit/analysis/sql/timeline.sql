-- timeline.sql: busy intervals (the one interval-union definition), sessions and the run window.

-- The union of every device's work: maximal intervals in which at least one row of the device
-- (any stream) runs. Islands are disjoint and ordered per (run, rank, device).
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column island BIGINT 1, 2, ... in time order per (run_id, rank, device)
-- @column start_ns BIGINT first start in the island (ns)
-- @column end_ns BIGINT last end in the island (ns)
-- @column dur_ns BIGINT end_ns − start_ns (ns)
-- @column n_rows BIGINT device rows in the island
-- @column first_correlation_id BIGINT launching-call id of the island's earliest row (NULL when it has none)
CREATE OR REPLACE TEMP VIEW busy_intervals AS
WITH ordered AS (  -- one sort: a row starts an island when it starts after every earlier row ended
  SELECT run_id, rank, device, start_ns, end_ns, correlation_id,
         max(end_ns) OVER w_before AS prev_end,
         max(end_ns) OVER w_all AS last_end,
         row_number() OVER w_all AS rn,
         count(*) OVER w_all AS n_all
  FROM device_work
  WINDOW w_before AS (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns, correlation_id NULLS LAST
                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
         w_all AS (PARTITION BY run_id, rank, device ORDER BY start_ns, end_ns, correlation_id NULLS LAST
                   ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
  QUALIFY prev_end IS NULL OR start_ns > prev_end)
SELECT run_id, rank, device,
       row_number() OVER w AS island, start_ns,
       coalesce(lead(prev_end) OVER w, last_end) AS end_ns,
       coalesce(lead(prev_end) OVER w, last_end) - start_ns AS dur_ns,
       coalesce(lead(rn) OVER w, n_all + 1) - rn AS n_rows,
       correlation_id AS first_correlation_id
FROM ordered
WINDOW w AS (PARTITION BY run_id, rank, device ORDER BY start_ns);

-- Sessions of a device's timeline: runs of islands separated by less than one minute
-- ({session_gap_ns} ns). A run stitched from captures days apart has several.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column session BIGINT 0, 1, ... in time order
-- @column start_ns BIGINT first start (ns)
-- @column end_ns BIGINT last end (ns)
-- @column busy_ns BIGINT Σ island durations (ns)
-- @column n_rows BIGINT device rows
CREATE OR REPLACE TEMP VIEW device_sessions AS
WITH g AS (
  SELECT *, start_ns - lag(end_ns) OVER (PARTITION BY run_id, rank, device ORDER BY start_ns) AS gap_before
  FROM busy_intervals),
s AS (
  SELECT *, sum(CASE WHEN gap_before > {session_gap_ns} THEN 1 ELSE 0 END)
              OVER (PARTITION BY run_id, rank, device ORDER BY start_ns ROWS UNBOUNDED PRECEDING) AS session
  FROM g)
SELECT run_id, rank, device, session, min(start_ns) AS start_ns, max(end_ns) AS end_ns,
       CAST(sum(dur_ns) AS BIGINT) AS busy_ns, CAST(sum(n_rows) AS BIGINT) AS n_rows
FROM s GROUP BY run_id, rank, device, session;

-- The run window of each device: its busiest session, whole (nothing inside it is trimmed, so a
-- stall inside a step, a warm-up or a host block stays in view). What lies outside it (other
-- sessions and the gaps to them) is reported as trimmed.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column first_ns BIGINT first device row start of the whole run (ns)
-- @column last_ns BIGINT last device row end of the whole run (ns)
-- @column window_start_ns BIGINT window start (ns)
-- @column window_end_ns BIGINT window end (ns)
-- @column window_ns BIGINT window_end_ns − window_start_ns (ns)
-- @column busy_ns BIGINT busy (union) time inside the window (ns)
-- @column busy_fraction DOUBLE busy_ns ÷ window_ns (0..1; NULL for an empty window)
-- @column idle_ns BIGINT window_ns − busy_ns (ns)
-- @column trimmed_ns BIGINT (last_ns − first_ns) − window_ns: time outside the window (ns)
-- @column trimmed_busy_ns BIGINT device busy time in the sessions left out (ns)
-- @column n_sessions BIGINT sessions of the device
-- @column n_rows BIGINT device rows in the window
CREATE OR REPLACE TEMP VIEW run_window AS
WITH pick AS (
  SELECT run_id, rank, device, arg_max(session, busy_ns) AS session, min(start_ns) AS first_ns,
         max(end_ns) AS last_ns, count(*) AS n_sessions, CAST(sum(busy_ns) AS BIGINT) AS all_busy
  FROM device_sessions GROUP BY run_id, rank, device)
SELECT p.run_id, p.rank, p.device, p.first_ns, p.last_ns, s.start_ns AS window_start_ns,
       s.end_ns AS window_end_ns, s.end_ns - s.start_ns AS window_ns, s.busy_ns,
       s.busy_ns / nullif(s.end_ns - s.start_ns, 0) AS busy_fraction,
       (s.end_ns - s.start_ns) - s.busy_ns AS idle_ns,
       (p.last_ns - p.first_ns) - (s.end_ns - s.start_ns) AS trimmed_ns,
       p.all_busy - s.busy_ns AS trimmed_busy_ns, p.n_sessions, s.n_rows
FROM pick p JOIN device_sessions s
  ON s.run_id = p.run_id AND s.rank = p.rank AND s.device IS NOT DISTINCT FROM p.device
 AND s.session = p.session;
