-- classes.sql: one cross-vendor kernel classification and the device time by class.
-- The CASE itself lives in tracekit/analysis/categories.py (regexes documented there) and is
-- filled in below as {kernel_class_case}.

-- Whether a run is in the analysis scope: every run, unless the session variable tracekit_run
-- names one (analyze sets it while it analyzes a run, so that every view reads only that run's
-- rows; DuckDB folds the variable into a constant filter on the base tables).
-- @arg run_id VARCHAR a run id
-- @returns BOOLEAN true when the run is in scope
CREATE OR REPLACE TEMP MACRO in_scope(run_id) AS
  (getvariable('tracekit_run') IS NULL OR run_id = getvariable('tracekit_run'));

-- The class of one device activity row: gemm, attention, moe, norm, reduction, elementwise,
-- communication, memcpy or other (rules in docs/findings.md, "Kernel classes").
-- @arg name VARCHAR the kernel (or op) name
-- @arg category VARCHAR the row's `kernels.category` (kernel, memcpy, memset, ...)
-- @arg hlo_category VARCHAR XProf's op class on XPlane rows, else NULL
-- @returns VARCHAR the class
CREATE OR REPLACE TEMP MACRO kernel_class(name, category, hlo_category) AS
  {kernel_class_case};

-- Kernels built to look "inefficient" on occupancy, wave and padding metrics: collectives (they
-- wait on peers), flash/fused attention and persistent kernels (one block per SM by design),
-- and GEMVs / skinny GEMMs (memory-bound by design; a Tensile/hipBLASLt `Cijk_…_MT{M}x{N}x{K}`
-- kernel is skinny when its macro tile is ≤ 32 on M or N).
-- @arg name VARCHAR the kernel name
-- @arg kclass VARCHAR its kernel_class
-- @returns BOOLEAN true when low occupancy or a partial wave is the kernel's design
CREATE OR REPLACE TEMP MACRO by_design_low_occupancy(name, kclass) AS
  kclass IN ('communication', 'attention', 'memcpy')
  OR regexp_matches(lower(name), 'persistent|gemv|mul_mat_vec|wvspl?i?tk|splitk|stream_?k|skinny|cooperative')
  -- Tensile / hipBLASLt GEMMs whose macro tile is ≤ 32 on M or N (MT64x16x512…): picked for a
  -- skinny problem, i.e. few tokens against a weight matrix, memory-bound by design (decode)
  OR coalesce(least(TRY_CAST(regexp_extract(name, '^Cijk_.*_MT([0-9]+)x([0-9]+)x', 1) AS INTEGER),
                    TRY_CAST(regexp_extract(name, '^Cijk_.*_MT([0-9]+)x([0-9]+)x', 2) AS INTEGER)) <= 32, false);

-- The store's runtime_calls of the runs in scope, with the columns the library and analyzers
-- use. analyze materializes it once per run, so the views below filter on api_kind without
-- re-running the api_kind regexes on every call (DuckDB pushes an api_kind filter through
-- runtime_calls' per-name classification down to the rows).
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank
-- @column tid VARCHAR thread id
-- @column name VARCHAR the API call (cudaLaunchKernel, hipMemcpyWithStream, ...)
-- @column start_ns BIGINT start (ns, trace clock)
-- @column dur_ns BIGINT duration (ns)
-- @column end_ns BIGINT start_ns + dur_ns (ns)
-- @column correlation_id BIGINT id linking the call to the device rows it launched
-- @column external_id BIGINT id linking the call to its framework op
-- @column api_kind VARCHAR graph_launch, kernel_launch, memcpy, memset, sync or other
CREATE OR REPLACE TEMP VIEW runtime_calls_in_scope AS
SELECT run_id, rank, tid, name, start_ns, dur_ns, end_ns, correlation_id, external_id, api_kind
FROM runtime_calls WHERE in_scope(run_id);

-- Every device activity row that is device work (kernels, copies, sets, XLA ops), with its
-- class. XPlane `xla_async` rows (the in-flight span of an async TPU op, overlapping the ops on
-- the XLA Ops line) are left out. The class is computed once per distinct name of a run.
-- @column run_id VARCHAR the run
-- @column rank INTEGER the rank (one process / host)
-- @column device INTEGER the device index (NULL when the trace does not say)
-- @column stream VARCHAR stream / queue / XPlane line
-- @column category VARCHAR kernels.category (kernel, memcpy, memset, ...)
-- @column name VARCHAR the kernel name
-- @column start_ns BIGINT start (ns, trace clock)
-- @column dur_ns BIGINT duration (ns, negative durations clamped to 0)
-- @column end_ns BIGINT start_ns + dur_ns (ns)
-- @column correlation_id BIGINT id of the launching runtime call (NULL when none)
-- @column kernel_class VARCHAR the class (kernel_class macro)
-- @column by_design BOOLEAN by_design_low_occupancy(name, kernel_class)
CREATE OR REPLACE TEMP VIEW device_work AS
WITH names AS (
  SELECT DISTINCT run_id, name, category, hlo_category FROM kernels
  WHERE category <> 'xla_async' AND in_scope(run_id)),
cls AS (
  SELECT run_id, name, category, coalesce(hlo_category, '') AS hlo,
         kernel_class(name, category, hlo_category) AS kernel_class,
         by_design_low_occupancy(name, kernel_class(name, category, hlo_category)) AS by_design
  FROM names)
SELECT k.run_id, k.rank, k.device, k.stream, k.category, k.name, k.start_ns,
       greatest(k.dur_ns, 0) AS dur_ns, k.start_ns + greatest(k.dur_ns, 0) AS end_ns,
       k.correlation_id, c.kernel_class, c.by_design
FROM kernels k
JOIN cls c ON c.run_id = k.run_id AND c.name = k.name AND c.category = k.category
          AND c.hlo = coalesce(k.hlo_category, '')
WHERE k.category <> 'xla_async' AND in_scope(k.run_id);

-- Device time of each run by kernel class: the one "where did the device time go" used by the
-- analyzers, report, compare and the dashboard. Summed device work (concurrent streams both
-- count), not wall time.
-- @column run_id VARCHAR the run
-- @column kernel_class VARCHAR the class
-- @column n_rows BIGINT device rows of that class
-- @column time_ns BIGINT Σ dur_ns of those rows (ns)
-- @column time_fraction DOUBLE time_ns ÷ the run's Σ dur_ns over all classes (0..1)
CREATE OR REPLACE TEMP VIEW device_time_by_class AS
SELECT run_id, kernel_class, count(*) AS n_rows, CAST(sum(dur_ns) AS BIGINT) AS time_ns,
       sum(dur_ns) / nullif(sum(sum(dur_ns)) OVER (PARTITION BY run_id), 0) AS time_fraction
FROM device_work GROUP BY run_id, kernel_class;
