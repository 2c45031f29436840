-- idle.sql: idle gaps of each device inside the run window, each with its cause.

-- Host spans that explain device idle, by kind: `graph_capture` (hip/cudaStreamBeginCapture …
-- EndCapture on one thread: launches inside record no device work), `data_loading` (PyTorch
-- DataLoader `enumerate(DataLoader)#…__next__` spans), `compile` (XLA / torch.compile / JAX
-- compilation spans), `sync` (synchronising runtime calls: *Synchronize, StreamWait/EventQuery,
-- blocking (non-Async) memcpy calls such as cudaMemcpy / hipMemcpyWithStream, "Async" copies
-- whose call itself lasts ≥ 1 ms (pageable memory: the call blocks), and Kineto cuda_sync events),
-- `startup` (one-time initialization: a runtime/driver call lasting ≥ 1 ms that loads modules
-- or code objects, creates a context, stream or event, initializes or queries the device, or
-- instantiates a graph, and the first launch of a kernel name on a rank when that launch call
-- lasts ≥ 1 ms: it loads the kernel's code object), `runtime_call` (another allocation, free or
-- launch call lasting ≥ 1 ms),
-- `compiled_region` (torch.compile's `Torch-Compiled Region` spans: Python
-- and guard overhead between the compiled graph's kernels).
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank (host process)
-- @column cause_kind VARCHAR graph_capture | data_loading | compile | sync | startup | runtime_call | compiled_region
-- @column cause VARCHAR the cause as findings name it (DataLoader, torch.compile region, compilation, graph capture, or the sync API's name, e.g. hipMemcpyWithStream)
-- @column name VARCHAR the span's own name
-- @column start_ns BIGINT span start (ns, host clock)
-- @column end_ns BIGINT span end (ns)
CREATE OR REPLACE TEMP VIEW idle_cause_spans AS
WITH begins AS (
  SELECT run_id, rank, tid, start_ns FROM runtime_calls_in_scope
  WHERE regexp_matches(name, '^(cuda|hip|cu)StreamBeginCapture') AND in_scope(run_id)),
ends AS (
  SELECT run_id, rank, tid, start_ns AS e_start, end_ns AS e_end FROM runtime_calls_in_scope
  WHERE regexp_matches(name, '^(cuda|hip|cu)StreamEndCapture') AND in_scope(run_id))
SELECT b.run_id, b.rank, 'graph_capture' AS cause_kind, 'graph capture' AS cause,
       'StreamBeginCapture…EndCapture' AS name, b.start_ns, e.e_end AS end_ns
FROM begins b ASOF JOIN ends e ON e.run_id = b.run_id AND e.rank = b.rank AND e.tid IS NOT DISTINCT FROM b.tid
                             AND e.e_start >= b.start_ns
UNION ALL
SELECT run_id, rank, 'data_loading', 'DataLoader', name, start_ns, start_ns + dur_ns
FROM host_events WHERE name LIKE 'enumerate(DataLoader)%' AND in_scope(run_id)
UNION ALL
SELECT run_id, rank, 'compile', 'compilation', name, start_ns, start_ns + dur_ns
FROM host_events
WHERE name IN ('backend_compile_and_load', 'backend_compile', 'entire_frame_compile', 'inductor_compile',
               'compile_fx_inner', 'PjRtComputationClient::Compile', 'PjRtCpuClient::Compile',
               'TfrtTpuCompiler::Compile', 'TpuCompiler::Compile', 'PjRtStreamExecutorClient::Compile',
               'StreamExecutorGpuClient::Compile', 'PjRtCApiClient::Compile',
               -- nvFuser's NVTX ranges (Nsight Systems captures): fusion compile and its NVRTC call
               'KernelExecutor::compileFusion', 'FusionExecutor::compileFusion', 'executor_utils::NVRTC')
  AND in_scope(run_id)
UNION ALL
SELECT run_id, rank, 'sync', regexp_replace(name, '(_v[0-9]+)?(_ptsz|_spt)?$', ''), name, start_ns, end_ns
FROM runtime_calls_in_scope
WHERE dur_ns > 0 AND in_scope(run_id) AND (api_kind = 'sync'
   OR (api_kind = 'memcpy' AND (NOT regexp_matches(name, '(?i)async') OR dur_ns >= 1000000)))
UNION ALL
SELECT run_id, rank,
       CASE WHEN regexp_matches(name, '(?i)module_?load|loaddata|library_?load|init|setdevice|ctxcreate|primaryctx|streamcreate|eventcreate|getdeviceprop|devicegetattribute|streampriorityrange|graphinstantiate|hostregister')
            THEN 'startup' ELSE 'runtime_call' END,
       regexp_replace(name, '(_v[0-9]+)?(_ptsz|_spt)?$', ''), name, start_ns, end_ns
FROM runtime_calls_in_scope
WHERE dur_ns >= 1000000 AND in_scope(run_id) AND api_kind NOT IN ('sync', 'memcpy', 'kernel_launch', 'graph_launch')
  AND regexp_matches(name, '(?i)malloc|free|module_?load|loaddata|library_?load|hostalloc|hostregister|meminfo|init|setdevice|getdevice|ctxcreate|primaryctx|streamcreate|eventcreate|graphinstantiate|streampriorityrange')
UNION ALL  -- long kernel-launch calls: the first launch of a kernel name loads its code object (start-up:
           -- a long graph launch is the graph's size, steady-state cost, and no cause here)
SELECT l.run_id, l.rank,
       CASE WHEN l.start_ns <= f.first_call_ns THEN 'startup' ELSE 'runtime_call' END,
       CASE WHEN l.start_ns <= f.first_call_ns THEN 'first ' ELSE '' END
         || regexp_replace(l.name, '(_v[0-9]+)?(_ptsz|_spt)?$', ''),
       l.name, l.start_ns, l.end_ns
FROM (SELECT r.run_id, r.rank, r.name, r.start_ns, r.end_ns, any_value(k.name) AS kernel
      FROM runtime_calls_in_scope r
      JOIN device_work k ON k.run_id = r.run_id AND k.rank = r.rank AND k.correlation_id = r.correlation_id
      WHERE r.dur_ns >= 1000000 AND r.api_kind = 'kernel_launch' AND in_scope(r.run_id)
      GROUP BY ALL) l
JOIN (SELECT r.run_id, r.rank, k.name AS kernel, min(r.start_ns) AS first_call_ns
      FROM runtime_calls_in_scope r
      JOIN device_work k ON k.run_id = r.run_id AND k.rank = r.rank AND k.correlation_id = r.correlation_id
      WHERE r.api_kind = 'kernel_launch' AND in_scope(r.run_id)
        AND k.name IN (SELECT k2.name FROM runtime_calls_in_scope r2
                       JOIN device_work k2 ON k2.run_id = r2.run_id AND k2.rank = r2.rank
                        AND k2.correlation_id = r2.correlation_id
                       WHERE r2.dur_ns >= 1000000 AND r2.api_kind = 'kernel_launch'
                         AND in_scope(r2.run_id))
      GROUP BY ALL) f
  ON f.run_id = l.run_id AND f.rank = l.rank AND f.kernel = l.kernel
UNION ALL
SELECT run_id, rank, 'sync', name, name, start_ns, end_ns FROM syncs WHERE dur_ns > 0 AND in_scope(run_id)
UNION ALL
SELECT run_id, rank, 'compiled_region', 'torch.compile region', name, start_ns, start_ns + dur_ns
FROM host_events WHERE name LIKE 'Torch-Compiled Region%' AND in_scope(run_id);

-- Every idle gap of a device inside its run window (between two busy islands), with its cause.
-- A gap of at least {kernel_wait_ns} ns gets the first of graph_capture, data_loading, compile,
-- sync, runtime_call, compiled_region whose host spans (same rank) cover at least
-- {cause_min_cover} of it (a shorter gap is inter-kernel latency whatever the host is doing: a
-- host waiting in cudaDeviceSynchronize does not idle the device for 2 µs); else `host_wait`
-- (cause "host": the launching call of the work that ends the gap was submitted after the gap
-- began — the host was late; submitted = the end of a kernel launch call, the start of a graph
-- launch, so rows 2…n of one graph replay, submitted with its first, never count), else `launch_overhead`
-- (a gap under {kernel_wait_ns} ns with work already queued), else `unexplained` (work was
-- queued and nothing on the host explains the wait: dependencies, cross-stream or cross-device
-- waits, or device rows without a launching call such as XLA ops).
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column start_ns BIGINT gap start = end of the busy island before it (ns)
-- @column end_ns BIGINT gap end = start of the next island (ns)
-- @column dur_ns BIGINT gap length (ns)
-- @column cause VARCHAR DataLoader | torch.compile region | compilation | graph capture | <sync or runtime API name> | host | launch overhead | unexplained
-- @column cause_kind VARCHAR data_loading | compiled_region | compile | graph_capture | sync | startup | runtime_call | host_wait | launch_overhead | unexplained
-- @column cause_name VARCHAR the explaining span's own name (the longest overlapping one), NULL for the fallbacks
-- @column covered_fraction DOUBLE share of the gap the explaining spans cover (0..1), NULL for the fallbacks
CREATE OR REPLACE TEMP VIEW idle_gaps AS
WITH b AS (
  SELECT i.*, lag(i.end_ns) OVER (PARTITION BY i.run_id, i.rank, i.device ORDER BY i.start_ns) AS prev_end
  FROM busy_intervals i),
g AS (
  SELECT b.run_id, b.rank, b.device, b.prev_end AS start_ns, b.start_ns AS end_ns,
         b.start_ns - b.prev_end AS dur_ns, b.first_correlation_id
  FROM b JOIN run_window w
    ON w.run_id = b.run_id AND w.rank = b.rank AND w.device IS NOT DISTINCT FROM b.device
  WHERE b.prev_end IS NOT NULL AND b.prev_end >= w.window_start_ns AND b.start_ns <= w.window_end_ns
    AND b.start_ns > b.prev_end),
gx AS (  -- the gaps a cause can explain, numbered in time order per device
  SELECT *, row_number() OVER (PARTITION BY run_id, rank, device ORDER BY start_ns) AS gi
  FROM g WHERE dur_ns >= {kernel_wait_ns}),
sd AS (  -- each cause span (host side: per rank) once per device of its rank
  SELECT c.*, d.device
  FROM idle_cause_spans c JOIN (SELECT DISTINCT run_id, rank, device FROM gx) d
    ON d.run_id = c.run_id AND d.rank = c.rank),
lo AS (  -- the first gap ending after the span starts ...
  SELECT sd.*, gx.gi AS gi_lo FROM sd ASOF JOIN gx
    ON gx.run_id = sd.run_id AND gx.rank = sd.rank AND gx.device IS NOT DISTINCT FROM sd.device
   AND sd.start_ns < gx.end_ns),
hi AS (  -- ... and the last gap starting before it ends: the gaps are disjoint and ordered, so
         -- the span overlaps exactly the gaps gi_lo..gi_hi (no all-pairs range join)
  SELECT lo.*, gx.gi AS gi_hi FROM lo ASOF JOIN gx
    ON gx.run_id = lo.run_id AND gx.rank = lo.rank AND gx.device IS NOT DISTINCT FROM lo.device
   AND lo.end_ns > gx.start_ns),
pairs AS (
  SELECT run_id, rank, device, cause_kind, cause, name, start_ns, end_ns,
         unnest(range(gi_lo, gi_hi + 1)) AS gi
  FROM hi WHERE gi_hi >= gi_lo),
ov AS (
  SELECT g.run_id, g.rank, g.device, g.start_ns, c.cause_kind,
         -- the span covering most of the gap; on a tie the innermost (shortest), then by name
         arg_max(c.cause, {'o': least(c.end_ns, g.end_ns) - greatest(c.start_ns, g.start_ns),
                           'l': c.start_ns - c.end_ns, 'n': c.name}) AS cause,
         arg_max(c.name, {'o': least(c.end_ns, g.end_ns) - greatest(c.start_ns, g.start_ns),
                          'l': c.start_ns - c.end_ns, 'n': c.name}) AS cause_name,
         least(sum(least(c.end_ns, g.end_ns) - greatest(c.start_ns, g.start_ns)), any_value(g.dur_ns))
           / any_value(g.dur_ns) AS cover
  FROM gx g JOIN pairs c
    ON c.run_id = g.run_id AND c.rank = g.rank AND c.device IS NOT DISTINCT FROM g.device AND c.gi = g.gi
  GROUP BY g.run_id, g.rank, g.device, g.start_ns, c.cause_kind),
best AS (
  SELECT run_id, rank, device, start_ns,
         arg_min(cause_kind, list_position(['graph_capture', 'data_loading', 'compile', 'sync', 'startup', 'runtime_call', 'compiled_region'],
                                           cause_kind)) AS cause_kind,
         arg_min(cause, list_position(['graph_capture', 'data_loading', 'compile', 'sync', 'startup', 'runtime_call', 'compiled_region'],
                                      cause_kind)) AS cause,
         arg_min(cause_name, list_position(['graph_capture', 'data_loading', 'compile', 'sync', 'startup', 'runtime_call', 'compiled_region'],
                                           cause_kind)) AS cause_name,
         arg_min(cover, list_position(['graph_capture', 'data_loading', 'compile', 'sync', 'startup', 'runtime_call', 'compiled_region'],
                                      cause_kind)) AS cover
  FROM ov WHERE cover >= {cause_min_cover}
     OR cause_kind = 'startup'  -- library and code-object loading is mostly untraced host work
  GROUP BY ALL),
call AS (  -- the launching call of the work that ends each gap (host_events: no per-row api_kind CASE)
  SELECT g.run_id, g.rank, g.device, g.start_ns,
         CASE WHEN regexp_matches(r.name, '^(cuda|cu|hip)GraphLaunch') THEN r.start_ns
              ELSE r.start_ns + r.dur_ns END AS submit_ns
  FROM g
  JOIN host_events r ON r.run_id = g.run_id AND r.rank = g.rank AND r.correlation_id = g.first_correlation_id
   AND r.category IN ('runtime', 'driver')
  WHERE g.first_correlation_id IS NOT NULL AND in_scope(r.run_id)
  QUALIFY row_number() OVER (PARTITION BY g.run_id, g.rank, g.device, g.start_ns ORDER BY r.start_ns) = 1)
SELECT g.run_id, g.rank, g.device, g.start_ns, g.end_ns, g.dur_ns,
       coalesce(bt.cause, CASE WHEN c.submit_ns > g.start_ns THEN 'host'
                               WHEN g.dur_ns < {kernel_wait_ns} THEN 'launch overhead'
                               ELSE 'unexplained' END) AS cause,
       coalesce(bt.cause_kind, CASE WHEN c.submit_ns > g.start_ns THEN 'host_wait'
                                    WHEN g.dur_ns < {kernel_wait_ns} THEN 'launch_overhead'
                                    ELSE 'unexplained' END) AS cause_kind,
       bt.cause_name, bt.cover AS covered_fraction
FROM g
LEFT JOIN best bt ON bt.run_id = g.run_id AND bt.rank = g.rank AND bt.device IS NOT DISTINCT FROM g.device
                 AND bt.start_ns = g.start_ns
LEFT JOIN call c ON c.run_id = g.run_id AND c.rank = g.rank AND c.device IS NOT DISTINCT FROM g.device
                AND c.start_ns = g.start_ns;

-- Idle time of each device by cause, inside the run window, with its share of the window.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column device INTEGER the device
-- @column cause VARCHAR the cause (idle_gaps.cause)
-- @column cause_kind VARCHAR the cause's kind (idle_gaps.cause_kind)
-- @column n_gaps BIGINT gaps with that cause
-- @column idle_ns BIGINT Σ gap length (ns)
-- @column window_fraction DOUBLE idle_ns ÷ the device's window_ns (0..1)
-- @column idle_fraction DOUBLE idle_ns ÷ the device's idle time in the window (0..1)
-- @column longest_gap_ns BIGINT the longest gap with that cause (ns)
-- @column longest_gap_start_ns BIGINT where it starts (ns; the earliest of equally long ones)
CREATE OR REPLACE TEMP VIEW idle_by_cause AS
SELECT g.run_id, g.rank, g.device, g.cause, g.cause_kind, count(*) AS n_gaps, CAST(sum(g.dur_ns) AS BIGINT) AS idle_ns,
       sum(g.dur_ns) / any_value(w.window_ns) AS window_fraction,
       sum(g.dur_ns) / nullif(any_value(w.idle_ns), 0) AS idle_fraction,
       max(g.dur_ns) AS longest_gap_ns, arg_max(g.start_ns, [g.dur_ns, -g.start_ns]) AS longest_gap_start_ns
FROM idle_gaps g JOIN run_window w
  ON w.run_id = g.run_id AND w.rank = g.rank AND w.device IS NOT DISTINCT FROM g.device
GROUP BY g.run_id, g.rank, g.device, g.cause, g.cause_kind;
